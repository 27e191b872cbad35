package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/turnstile-rl/turnstile/internal/fanout"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"

	"go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/internal/storage"
)

// attemptsFile is restore/<restore_id>/attempts.json: the attempt map of a
// restore, computed once and reused by every re-run.
type attemptsFile struct {
	CheckpointID   string `json:"checkpoint_id"`
	RestoreID      string `json:"restore_id"`
	Set            string `json:"set"`
	ManifestDigest string `json:"manifest_digest"`
	// Attempts maps every rollout of the set this restore owns to its new
	// attempt: those with a record, the set's unfinished environment
	// sessions of the checkpoint, and the set's rollouts running now that
	// the checkpoint does not hold (Fence). Only these are touched: another
	// set's sessions on the same servers are not named.
	Attempts map[string]int `json:"attempts"`
	// Start are the rollouts that get a new run (those with a record);
	// the others only have their fence raised.
	Start []string `json:"start"`
	// Fence are the set's rollouts started after the cut: in the rolled
	// back world they do not exist, so their sessions are dropped, their
	// runs ended, and any later run of them must come above their attempt.
	Fence []string `json:"fence,omitempty"`
	// Recover is set when the map is a scoped recovery's plan.
	Recover *recoverPlan `json:"recover,omitempty"`
}

// PlanAttempts gives every rollout of the set one more attempt than the
// highest ever issued for it: above its record's and its saved sessions'
// attempt, and above every run of it Temporal shows (so a second restore of
// the same checkpoint comes above the first). The map is persisted on first
// computation and read back by any re-run of the same restore, so running
// it twice never starts a second run of one attempt.
func (c *Coordinator) PlanAttempts(ctx context.Context, in checkpoint.PlanAttemptsInput) (checkpoint.PlanAttemptsResult, error) {
	rs, err := c.setUpRestore(ctx, restoreSetUp{root: in.Root, checkpointID: in.CheckpointID, restoreID: in.RestoreID})
	if err != nil {
		return checkpoint.PlanAttemptsResult{}, err
	}
	path := attemptsPath(rs.rdir)
	m, err := ReadSignedAggregateManifest(ctx, rs.dir, in.CheckpointID, c.Checkpoints.Key)
	if err != nil {
		return checkpoint.PlanAttemptsResult{}, invalidCheckpoint("checkpoint %s: %v", in.CheckpointID, err)
	}
	// A re-run reuses the map it planned, and needs neither the whole
	// checkpoint nor Temporal for that.
	if af, b, err := readAttempts(ctx, path, in.CheckpointID, rs.rid); err == nil {
		if err := af.plannedFor(path, m.Digest); err != nil {
			return checkpoint.PlanAttemptsResult{}, err
		}
		return checkpoint.PlanAttemptsResult{Rollouts: len(af.Attempts), Start: len(af.Start), Fence: len(af.Fence), Reused: true, Digest: sha256Hex(b)}, nil
	} else if !errors.Is(err, storage.ErrNotExist) {
		return checkpoint.PlanAttemptsResult{}, invalidCheckpoint("%v", err)
	}
	lc, err := c.loadCheckpoint(ctx, in.Root, in.CheckpointID, in.Participants)
	if err != nil {
		return checkpoint.PlanAttemptsResult{}, err
	}
	tc, err := c.temporal()
	if err != nil {
		return checkpoint.PlanAttemptsResult{}, err
	}
	af, err := c.planAttempts(ctx, tc, lc)
	if err != nil {
		return checkpoint.PlanAttemptsResult{}, err
	}
	af.RestoreID = rs.rid
	digest, err := writeJSONAtomic(ctx, path, af)
	if err != nil {
		return checkpoint.PlanAttemptsResult{}, err
	}
	c.Failpoints.Hit(failpoint.RestoreAfterPlan)
	return checkpoint.PlanAttemptsResult{Rollouts: len(af.Attempts), Start: len(af.Start), Fence: len(af.Fence), Digest: digest}, nil
}

// planAttempts computes the attempt map of a loaded checkpoint. It names
// the set's rollouts only:
//   - every rollout with a record;
//   - every unfinished session of the participants' cut whose rollout
//     belongs to the set (visibility lists it under the set, or its run
//     says so); another set's sessions, and sessions no run claims, are
//     left to their owners;
//   - every rollout of the set that has a run now (running or closed)
//     that the checkpoint does not know at all (no record, no session,
//     finished or not, no fence): it started after the cut, and in the
//     rolled-back world it does not exist, so it is fenced (Fence) and a
//     running run ended, but not started. A run that already closed is
//     fenced too: a later run of it must come above its attempt, and its
//     sessions are dropped.
func (c *Coordinator) planAttempts(ctx context.Context, tc client.Client, lc *loadedCheckpoint) (attemptsFile, error) {
	set := lc.manifest.Set
	visible, err := visibleAttempts(ctx, tc, set)
	if err != nil {
		return attemptsFile{}, err
	}
	if err := c.probeSubmitted(ctx, tc, set, lc, visible); err != nil {
		return attemptsFile{}, err
	}
	cutAt, err := checkpointStart(ctx, tc, lc.manifest.CheckpointID)
	if err != nil {
		return attemptsFile{}, err
	}
	// afterCut: a run of the set the checkpoint does not know, running, or
	// closed and started after the checkpoint began (a run that closed
	// before it ended before the cut; its result stands).
	afterCut := func(ri runInfo) bool {
		return ri.Exists && ri.Set == set && (ri.Running || cutAt.IsZero() || ri.StartTime.After(cutAt))
	}
	ids := lc.candidates(visible)
	runs, err := c.describeAll(ctx, tc, ids)
	if err != nil {
		return attemptsFile{}, err
	}
	af := attemptsFile{CheckpointID: lc.manifest.CheckpointID, Set: set, ManifestDigest: lc.manifest.Digest, Attempts: map[string]int{}, Start: []string{}}
	for i, id := range ids {
		ri := runs[i]
		v, listed := visible[id]
		ofSet := listed || (ri.Exists && ri.Set == set)
		_, rec := lc.parked[id]
		_, session := lc.sessions[id]
		switch {
		case rec:
		case session && !ofSet:
			continue // another set's session, or one no run claims
		case !session && !afterCut(ri):
			continue // listed by a lagging index, or closed before the cut
		}
		highest := lc.highestAttempt(id)
		if listed {
			highest = max(highest, v.attempt)
		}
		if ri.Exists && ri.HasAttempt {
			highest = max(highest, int(ri.Attempt))
		}
		af.Attempts[id] = highest + 1
		switch {
		case rec:
			af.Start = append(af.Start, id)
		case !session:
			af.Fence = append(af.Fence, id)
		}
	}
	return af, nil
}

// seenRuns is what visibility shows of one rollout's runs: its highest
// attempt (-1 when no run carries one) and whether one is running.
type seenRuns struct {
	attempt int
	running bool
}

// visibleAttempts lists every run of set that visibility shows, by rollout.
func visibleAttempts(ctx context.Context, tc client.Client, set string) (map[string]seenRuns, error) {
	visible := map[string]seenRuns{}
	err := listSet(ctx, tc, set, "", func(r visibleRun) {
		v, ok := visible[r.RolloutID]
		if !ok {
			v.attempt = -1
		}
		if r.HasAttempt {
			v.attempt = max(v.attempt, int(r.Attempt))
		}
		v.running = v.running || r.Running
		visible[r.RolloutID] = v
	})
	return visible, err
}

// candidates are the rollouts an attempt map may name, sorted: those with a
// record or an unfinished session, and those with a run now (running or
// closed) that the checkpoint does not know at all (no record, no session,
// no finished session, no fence).
func (lc *loadedCheckpoint) candidates(visible map[string]seenRuns) []string {
	set := map[string]bool{}
	for id := range lc.parked {
		set[id] = true
	}
	for id := range lc.sessions {
		set[id] = true
	}
	for id := range visible {
		_, session := lc.sessions[id]
		_, fence := lc.fences[id]
		if _, rec := lc.parked[id]; !rec && !session && !fence && !lc.retired[id] {
			set[id] = true
		}
	}
	ids := make([]string, 0, len(set))
	for id := range set {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// describeAll reads the current run of each rollout from the run itself
// (visibility may lag behind a run that just started).
func (c *Coordinator) describeAll(ctx context.Context, tc client.Client, ids []string) ([]runInfo, error) {
	runs := make([]runInfo, len(ids))
	prog := newProgress(ctx, "describe", len(ids))
	defer prog.stop()
	err := fanout.Each(ctx, len(ids), c.limit(), func(ctx context.Context, i int) error {
		defer prog.add()
		ri, err := describeRollout(ctx, tc, ids[i])
		if err != nil {
			return err
		}
		runs[i] = ri
		return nil
	})
	return runs, err
}

// highestAttempt is the highest attempt of rollout id the checkpoint knows
// (its record, its result, the participants' sessions and fences), or -1.
func (lc *loadedCheckpoint) highestAttempt(id string) int {
	highest := -1
	if rec, ok := lc.parked[id]; ok {
		highest = rec.Input.Attempt
		if rec.Result != nil {
			highest = max(highest, rec.Result.Attempt)
		}
	}
	if a, ok := lc.sessions[id]; ok {
		highest = max(highest, a)
	}
	if f, ok := lc.fences[id]; ok {
		highest = max(highest, f)
	}
	return highest
}

func readAttempts(ctx context.Context, path file, checkpointID, restoreID string) (attemptsFile, []byte, error) {
	var af attemptsFile
	b, err := readJSONStrict(ctx, path, &af)
	if err != nil {
		return attemptsFile{}, nil, err
	}
	if af.CheckpointID != checkpointID || af.RestoreID != restoreID {
		return attemptsFile{}, nil, fmt.Errorf("%s is of restore %q of checkpoint %q, not restore %q of %q",
			path, af.RestoreID, af.CheckpointID, restoreID, checkpointID)
	}
	for _, id := range append(append([]string(nil), af.Start...), af.Fence...) {
		if _, ok := af.Attempts[id]; !ok {
			return attemptsFile{}, nil, fmt.Errorf("%s: rollout %q to start or fence has no attempt", path, id)
		}
	}
	return af, b, nil
}

// plannedFor checks that the attempt map at path was planned for the
// checkpoint manifest of digest: a checkpoint rewritten since fails closed.
func (af attemptsFile) plannedFor(path file, digest string) error {
	if af.ManifestDigest != digest {
		return invalidCheckpoint("%s was planned for manifest %s, the checkpoint is now %s", path, af.ManifestDigest, digest)
	}
	return nil
}
