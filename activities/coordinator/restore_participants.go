package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/internal/fanout"
	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/participants/cutfile"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"

	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// RestoreParticipants asks every environment server to install its
// artifact with the attempt map, in a control session named by the restore
// id: export_restore sessions become the new attempt, restart-only ones and
// the set's rollouts started after the cut only have their fence raised
// (what they hold now is dropped), another set's sessions are left alone,
// and the server stays paused until resumed.
//
// A restore never reports an attempt installed that a participant did not
// install (ARCHITECTURE.md invariant 11): each answer is checked against
// the plan (every rollout of the attempt map, at its planned attempt, as
// restored or restarted where the participant's artifact holds a session
// of it, as fenced elsewhere), and the checked answer is recorded in the
// restore's directory. A server that answers the restore id is retired
// (stale_checkpoint) counts as already resumed only when such a record
// says an earlier run of this restore installed it; otherwise the step
// fails, naming the server and the rollouts it did not install.
func (c *Coordinator) RestoreParticipants(ctx context.Context, in checkpoint.RestoreParticipantsInput) (checkpoint.RestoreParticipantsResult, error) {
	rs, err := c.setUpRestore(ctx, restoreSetUp{root: in.Root, checkpointID: in.CheckpointID, restoreID: in.RestoreID,
		participants: in.Participants, checkParticipants: true, attempts: true})
	if err != nil {
		return checkpoint.RestoreParticipantsResult{}, err
	}
	indexes, err := participantIndexes(in.Participants, in.Indexes)
	if err != nil {
		return checkpoint.RestoreParticipantsResult{}, err
	}
	var mu sync.Mutex
	res := checkpoint.RestoreParticipantsResult{Participants: len(indexes)}
	prog := newProgress(ctx, "restore participants", len(indexes))
	defer prog.stop()
	err = fanout.Each(ctx, len(indexes), c.limit(), func(ctx context.Context, k int) error {
		defer prog.add()
		i := indexes[k]
		got, err := c.restoreParticipant(ctx, rs, in, i)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if got.alreadyResumed {
			res.AlreadyResumed++
			return nil
		}
		res.Replayed += got.replayed
		res.Diverged += got.diverged
		res.Restored += got.Restored
		res.Restarted += got.Restarted
		res.Fenced += got.Fenced
		res.Untouched += got.Untouched
		return nil
	})
	if err != nil {
		return checkpoint.RestoreParticipantsResult{}, fmt.Errorf("restore participants of checkpoint %s (restore %s): %w", in.CheckpointID, rs.rid, err)
	}
	c.Failpoints.Hit(failpoint.RestoreAfterParticipants)
	return res, nil
}

// installRecord is restore/<restore_id>/installed-<n>.json: participant
// n's restore answer, checked against the plan. It is written before the
// restore's resume can retire the restore id there, so a re-run that finds
// the id retired knows whether this restore installed it.
type installRecord struct {
	CheckpointID string `json:"checkpoint_id"`
	RestoreID    string `json:"restore_id"`
	Index        int    `json:"index"`
	URL          string `json:"url"`
	// ManifestDigest is the participant's artifact's; AttemptsDigest the
	// SHA-256 of the attempt map's file the plan was checked against.
	ManifestDigest string `json:"manifest_digest"`
	AttemptsDigest string `json:"attempts_digest"`
	Restored       int    `json:"restored"`
	Restarted      int    `json:"restarted"`
	Fenced         int    `json:"fenced"`
	Untouched      int    `json:"untouched"`
}

// restoredPart is what one participant did for a restore.
type restoredPart struct {
	installRecord
	alreadyResumed bool
	// replayed and diverged count its replay sessions rebuilt and not
	// (kept in replays-<n>.json).
	replayed, diverged int
}

func installPath(rdir storage.Store, i int) file {
	return at(rdir, fmt.Sprintf("installed-%d.json", i))
}

// restoreParticipant installs participant i and checks its answer.
func (c *Coordinator) restoreParticipant(ctx context.Context, rs restoreStep, in checkpoint.RestoreParticipantsInput, i int) (restoredPart, error) {
	url := in.Participants[i]
	cp, err := openParticipant(ctx, rs.dir, i, in.CheckpointID, c.Checkpoints)
	if err != nil {
		return restoredPart{}, invalidOrUnavailable(err, "checkpoint %s: participant %d: %v", in.CheckpointID, i, err)
	}
	cut, err := cutfile.Read(ctx, cp)
	if err != nil {
		return restoredPart{}, invalidCheckpoint("checkpoint %s: participant %d: %v", in.CheckpointID, i, err)
	}
	cc, err := c.control(url)
	if err != nil {
		return restoredPart{}, err
	}
	var resp protocol.RestoreResponse
	err = c.watched(ctx, url, "restore", func(ctx context.Context) error {
		var err error
		resp, err = cc.Restore(ctx, protocol.RestoreRequest{
			CheckpointID: in.CheckpointID, RestoreID: rs.rid, Location: checkpoint.ParticipantLocation(rs.dir.Location(), i), Attempts: rs.af.Attempts,
		})
		return err
	})
	if remoteCode(err) == protocol.CodeStaleCheckpoint {
		return c.alreadyResumed(ctx, rs, i, url, cut, err)
	}
	if err != nil {
		return restoredPart{}, controlError(url, "restore", err)
	}
	if err := checkInstalled(resp, rs.af.Attempts, cut); err != nil {
		return restoredPart{}, notInstalled("participant %s answered the restore of checkpoint %s (restore %s) without installing its plan: %v",
			url, in.CheckpointID, rs.rid, err)
	}
	// Written before the step reports: the start step reads it, and a
	// participant resumed later answers stale_checkpoint instead.
	rf := replaysOf(in.CheckpointID, rs.rid, i, resp)
	if _, err := writeJSONAtomic(ctx, replaysPath(rs.rdir, i), rf); err != nil {
		return restoredPart{}, err
	}
	rec := installRecord{CheckpointID: in.CheckpointID, RestoreID: rs.rid, Index: i, URL: url, ManifestDigest: cut.Digest,
		AttemptsDigest: rs.attemptsDigest, Restored: len(resp.Restored), Restarted: len(resp.Restarted), Fenced: len(resp.Fenced),
		Untouched: len(resp.Untouched)}
	if _, err := writeJSONAtomic(ctx, installPath(rs.rdir, i), rec); err != nil {
		return restoredPart{}, err
	}
	return restoredPart{installRecord: rec, replayed: len(rf.Replayed), diverged: len(rf.Diverged)}, nil
}

// alreadyResumed handles a participant that answered the restore id is
// retired: success only if this restore's record says it installed there.
func (c *Coordinator) alreadyResumed(ctx context.Context, rs restoreStep, i int, url string, cut cutfile.Cut, refusal error) (restoredPart, error) {
	path := installPath(rs.rdir, i)
	var rec installRecord
	_, err := readJSONStrict(ctx, path, &rec)
	switch {
	case err == nil && rec.URL == url && rec.ManifestDigest == cut.Digest && rec.AttemptsDigest == rs.attemptsDigest:
		return restoredPart{installRecord: rec, alreadyResumed: true}, nil
	case err == nil:
		return restoredPart{}, notInstalled("participant %s refused restore %s as retired, and %s records an install of another plan or server (%s, manifest %s)",
			url, rs.rid, path, rec.URL, rec.ManifestDigest)
	case !errors.Is(err, storage.ErrNotExist):
		return restoredPart{}, fmt.Errorf("participant %s refused restore %s as retired; reading the record of an earlier install: %w", url, rs.rid, err)
	}
	return restoredPart{}, notInstalled("participant %s refused restore id %q (%v) and installed nothing: no run of this restore installed it "+
		"(the id was used before, e.g. by the checkpoint of that name: see RULES.md R18); rollouts not installed there: %s; "+
		"resume what this restore paused and restore again under a new restore id (--restore-id)",
		url, rs.rid, refusal, namesOf(planned(rs.af.Attempts, cut)))
}

// planned lists the rollouts of the attempt map a participant installs
// with a session (those its artifact holds), else all of the map (each
// then has its fence raised there).
func planned(attempts map[string]int, cut cutfile.Cut) []string {
	var held, all []string
	for id := range attempts {
		all = append(all, id)
		if cut.Holds(id) {
			held = append(held, id)
		}
	}
	if len(held) > 0 {
		all = held
	}
	sort.Strings(all)
	return all
}

// checkInstalled compares a restore answer with the plan: every rollout of
// the attempt map is answered exactly once at its planned attempt, as
// restored or restarted when the artifact holds a session of it, as fenced
// when it does not; none is left untouched; the answer is for this
// artifact.
func checkInstalled(resp protocol.RestoreResponse, attempts map[string]int, cut cutfile.Cut) error {
	var problems []string
	if resp.Phase != protocol.PhaseRestored {
		problems = append(problems, fmt.Sprintf("phase %q, want %q", resp.Phase, protocol.PhaseRestored))
	}
	if resp.ManifestDigest != cut.Digest {
		problems = append(problems, fmt.Sprintf("manifest %s, the artifact is %s", resp.ManifestDigest, cut.Digest))
	}
	type answered struct {
		attempt int
		as      string
	}
	got := map[string][]answered{}
	for _, s := range resp.Restored {
		got[s.RolloutID] = append(got[s.RolloutID], answered{s.Attempt, "restored"})
	}
	for _, s := range resp.Restarted {
		got[s.RolloutID] = append(got[s.RolloutID], answered{s.Attempt, "restarted"})
	}
	for _, f := range resp.Fenced {
		got[f.RolloutID] = append(got[f.RolloutID], answered{f.Attempt, "fenced"})
	}
	for _, id := range resp.Untouched {
		got[id] = append(got[id], answered{-1, "untouched"})
	}
	ids := make([]string, 0, len(attempts))
	for id := range attempts {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		want, as := attempts[id], got[id]
		switch {
		case len(as) == 0:
			problems = append(problems, fmt.Sprintf("%s not installed (not in the answer)", id))
		case len(as) > 1:
			problems = append(problems, fmt.Sprintf("%s answered %d times", id, len(as)))
		case as[0].as == "untouched":
			problems = append(problems, fmt.Sprintf("%s not installed (left untouched)", id))
		case as[0].attempt != want:
			problems = append(problems, fmt.Sprintf("%s %s at attempt %d, planned %d", id, as[0].as, as[0].attempt, want))
		case cut.Holds(id) && as[0].as == "fenced":
			problems = append(problems, fmt.Sprintf("%s only fenced, but the artifact holds its session", id))
		case !cut.Holds(id) && as[0].as != "fenced":
			problems = append(problems, fmt.Sprintf("%s %s, but the artifact holds no session of it", id, as[0].as))
		}
	}
	if len(problems) > 0 {
		return errors.New(namesOf(problems))
	}
	return nil
}

// namesOf joins a list for an error message, at most 20 items.
func namesOf(list []string) string {
	const most = 20
	if len(list) > most {
		return strings.Join(list[:most], ", ") + fmt.Sprintf(" and %d more", len(list)-most)
	}
	return strings.Join(list, ", ")
}

func notInstalled(format string, args ...any) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(format, args...), checkpoint.ErrNotInstalled, nil)
}

// participantIndexes are the participants a restore step installs: all of
// them, or the ones indexes names (a scoped recovery), each in range once.
func participantIndexes(urls []string, indexes []int) ([]int, error) {
	if len(indexes) == 0 {
		all := make([]int, len(urls))
		for i := range all {
			all[i] = i
		}
		return all, nil
	}
	seen := map[int]bool{}
	for _, i := range indexes {
		if i < 0 || i >= len(urls) || seen[i] {
			return nil, rollout.BadInput("participant index %d: want each of 0..%d at most once", i, len(urls)-1)
		}
		seen[i] = true
	}
	return indexes, nil
}
