package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"sort"
	"sync"

	"github.com/turnstile-rl/turnstile/internal/fanout"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/internal/artifact"
	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// loadedCheckpoint is a validated checkpoint, read whole.
type loadedCheckpoint struct {
	dir      storage.Store
	manifest AggregateManifest
	records  map[string][]byte // rollout id → park record
	parked   map[string]rollout.ParkRecord
	blobs    map[transcript.Digest][]byte
	// sessions are the unfinished sessions of every participant, by rollout:
	// the highest attempt saved.
	sessions map[string]int
	// fences are the participants' saved fences, by rollout: the highest.
	fences map[string]int
	// holders are the participants (indexes) holding an unfinished
	// session of each rollout.
	holders map[string][]int
	// retired are the rollouts some participant held a finished (verified)
	// session of at the cut: they ran before it.
	retired map[string]bool
}

// ValidateCheckpoint reads and checks the whole checkpoint before a restore
// touches anything: the aggregate manifest, the agents artifact, every
// participant's artifact, every record (it decodes and names a rollout of
// the set) and every transcript blob a record references. It also checks,
// read-only, that each participant answers as the server it replaces.
func (c *Coordinator) ValidateCheckpoint(ctx context.Context, in checkpoint.ValidateCheckpointInput) (checkpoint.ValidateCheckpointResult, error) {
	lc, err := c.loadCheckpoint(ctx, in.Root, in.CheckpointID, in.Participants)
	if err != nil {
		return checkpoint.ValidateCheckpointResult{}, err
	}
	if err := c.checkParticipantsLive(ctx, lc, in.Participants); err != nil {
		return checkpoint.ValidateCheckpointResult{}, err
	}
	res := checkpoint.ValidateCheckpointResult{Set: lc.manifest.Set, ManifestDigest: lc.manifest.Digest, Records: len(lc.records), Transcripts: len(lc.blobs)}
	for _, v := range lc.parked {
		switch restoreKind(v) {
		case checkpoint.RestoreContinue:
			res.Continue++
		case checkpoint.RestoreStartOver:
			res.StartOver++
		case checkpoint.RestoreOfferAgain:
			res.OfferAgain++
		}
	}
	c.Failpoints.Hit(failpoint.RestoreAfterValidate)
	return res, nil
}

// loadCheckpoint validates and reads a checkpoint; any problem is a
// non-retryable checkpoint.ErrCheckpointInvalid naming it.
func (c *Coordinator) loadCheckpoint(ctx context.Context, root, checkpointID string, urls []string) (*loadedCheckpoint, error) {
	dir, err := c.checkDir(ctx, root, checkpointID)
	if err != nil {
		return nil, err
	}
	if err := checkParticipants(urls); err != nil {
		return nil, err
	}
	m, err := ReadAggregateManifest(ctx, dir, checkpointID)
	if err != nil {
		return nil, invalidOrUnavailable(err, "checkpoint %s: %v", checkpointID, err)
	}
	if len(m.Participants) != len(urls) {
		return nil, invalidCheckpoint("checkpoint %s has %d participants, the restore names %d (same order as at checkpoint time)", checkpointID, len(m.Participants), len(urls))
	}
	lc := &loadedCheckpoint{dir: dir, manifest: m, records: map[string][]byte{}, parked: map[string]rollout.ParkRecord{},
		blobs: map[transcript.Digest][]byte{}, sessions: map[string]int{}, fences: map[string]int{}, holders: map[string][]int{}, retired: map[string]bool{}}

	if err := lc.loadAgents(ctx, checkpointID); err != nil {
		return nil, err
	}
	for i := range m.Participants {
		if err := lc.loadParticipant(ctx, checkpointID, i); err != nil {
			return nil, err
		}
	}
	return lc, nil
}

// loadAgents reads and checks the agents artifact: every park record (it
// decodes and names a rollout of the set) and every transcript blob.
func (lc *loadedCheckpoint) loadAgents(ctx context.Context, checkpointID string) error {
	m := lc.manifest
	sub, err := lc.dir.Sub(checkpoint.AgentsDir)
	if err != nil {
		return err
	}
	agents, err := artifact.OpenStore(ctx, sub, checkpointID)
	if err != nil {
		return invalidOrUnavailable(err, "checkpoint %s: agents: %v", checkpointID, err)
	}
	if d := agents.Manifest().Digest; d != m.Agents.ManifestDigest {
		return invalidCheckpoint("checkpoint %s: agents manifest is %s, MANIFEST.json binds %s", checkpointID, d, m.Agents.ManifestDigest)
	}
	if got := agents.Sections(); len(got) != 2 || got[0] != checkpoint.SectionAgents || got[1] != checkpoint.SectionTranscripts {
		return invalidCheckpoint("checkpoint %s: agents sections %v, want [%s %s]", checkpointID, got, checkpoint.SectionAgents, checkpoint.SectionTranscripts)
	}
	recs, err := agents.Section(ctx, checkpoint.SectionAgents)
	if err != nil {
		return invalidCheckpoint("checkpoint %s: agents: %v", checkpointID, err)
	}
	for _, r := range recs {
		v, err := DecodeRecord(r.Data)
		if err == nil {
			err = checkRecord(v, checkpointID, m.Set, r.Key)
		}
		if err != nil {
			return invalidCheckpoint("checkpoint %s: %v", checkpointID, err)
		}
		lc.records[r.Key], lc.parked[r.Key] = r.Data, v
	}
	if len(recs) != m.Agents.Records || len(recs) != m.Parked {
		return invalidCheckpoint("checkpoint %s: %d agent records, MANIFEST.json counts %d", checkpointID, len(recs), m.Parked)
	}
	blobs, err := agents.Section(ctx, checkpoint.SectionTranscripts)
	if err != nil {
		return invalidCheckpoint("checkpoint %s: transcripts: %v", checkpointID, err)
	}
	for _, b := range blobs {
		if transcript.DigestOf(b.Data) != transcript.Digest(b.Key) {
			return invalidCheckpoint("checkpoint %s: transcript blob %s does not match its content", checkpointID, b.Key)
		}
		lc.blobs[transcript.Digest(b.Key)] = b.Data
	}
	if err := lc.checkTranscripts(); err != nil {
		return invalidCheckpoint("checkpoint %s: %v", checkpointID, err)
	}
	return nil
}

// loadParticipant reads and checks participant i's artifact and takes note
// of its unfinished sessions and its fences.
func (lc *loadedCheckpoint) loadParticipant(ctx context.Context, checkpointID string, i int) error {
	p := lc.manifest.Participants[i]
	cp, err := openParticipant(ctx, lc.dir, i, checkpointID)
	if err != nil {
		return invalidOrUnavailable(err, "checkpoint %s: participant %d (%s): %v", checkpointID, i, p.Name, err)
	}
	if d := cp.Manifest().Digest; d != p.ManifestDigest {
		return invalidCheckpoint("checkpoint %s: participant %d manifest is %s, MANIFEST.json binds %s", checkpointID, i, d, p.ManifestDigest)
	}
	sessions, err := cp.Section(ctx, protocol.SectionSessions)
	if err != nil {
		return invalidCheckpoint("checkpoint %s: participant %d sessions: %v", checkpointID, i, err)
	}
	for _, s := range sessions {
		var sv struct {
			RolloutID string `json:"rollout_id"`
			Attempt   int    `json:"attempt"`
			Retired   bool   `json:"retired"`
		}
		if err := json.Unmarshal(s.Data, &sv); err != nil || sv.RolloutID != s.Key || sv.Attempt < 0 {
			return invalidCheckpoint("checkpoint %s: participant %d session %q does not decode as its own", checkpointID, i, s.Key)
		}
		if !sv.Retired {
			lc.sessions[sv.RolloutID] = max(lc.sessions[sv.RolloutID], sv.Attempt)
			lc.holders[sv.RolloutID] = append(lc.holders[sv.RolloutID], i)
		} else {
			lc.retired[sv.RolloutID] = true
		}
	}
	fences, err := cp.Section(ctx, protocol.SectionFences)
	if err != nil {
		return invalidCheckpoint("checkpoint %s: participant %d fences: %v", checkpointID, i, err)
	}
	for _, f := range fences {
		var fv struct {
			RolloutID string `json:"rollout_id"`
			Fence     int    `json:"fence"`
		}
		if err := json.Unmarshal(f.Data, &fv); err != nil || fv.RolloutID != f.Key || fv.Fence < 0 {
			return invalidCheckpoint("checkpoint %s: participant %d fence %q does not decode as its own", checkpointID, i, f.Key)
		}
		lc.fences[fv.RolloutID] = max(lc.fences[fv.RolloutID], fv.Fence)
	}
	return nil
}

// checkTranscripts checks that every blob the records reference is in the
// checkpoint: each conversation walks to its root within it.
func (lc *loadedCheckpoint) checkTranscripts() error {
	ids := make([]string, 0, len(lc.parked))
	for id := range lc.parked {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		heads, singles := references(lc.parked[id])
		for _, d := range singles {
			if _, ok := lc.blobs[d]; !ok {
				return fmt.Errorf("rollout %s: blob %s is not in the checkpoint", id, d)
			}
		}
		for _, h := range heads {
			seen := map[transcript.Digest]bool{}
			for d := h; d != ""; {
				if seen[d] {
					return fmt.Errorf("rollout %s: transcript cycle at %s", id, d)
				}
				seen[d] = true
				data, ok := lc.blobs[d]
				if !ok {
					return fmt.Errorf("rollout %s: transcript node %s is not in the checkpoint", id, d)
				}
				var n struct {
					Parent transcript.Digest `json:"parent"`
					Item   transcript.Digest `json:"item"`
				}
				if err := json.Unmarshal(data, &n); err != nil || n.Item.Validate() != nil {
					return fmt.Errorf("rollout %s: %s is not a transcript node", id, d)
				}
				if _, ok := lc.blobs[n.Item]; !ok {
					return fmt.Errorf("rollout %s: transcript item %s is not in the checkpoint", id, n.Item)
				}
				d = n.Parent
			}
		}
	}
	return nil
}

// checkParticipantsLive asks each participant, read-only, who it is: the
// server at participant n must carry the name participant n had and be
// idle or already restoring this checkpoint.
func (c *Coordinator) checkParticipantsLive(ctx context.Context, lc *loadedCheckpoint, urls []string) error {
	return fanout.Each(ctx, len(urls), c.limit(), func(ctx context.Context, i int) error {
		return c.checkParticipantLive(ctx, lc, i, urls[i])
	})
}

// checkParticipantLive asks the server at url, read-only, whether it
// carries the name participant i of the checkpoint had.
func (c *Coordinator) checkParticipantLive(ctx context.Context, lc *loadedCheckpoint, i int, url string) error {
	caps, err := c.control(url).Capabilities(ctx)
	if err != nil {
		return controlError(url, "capabilities", err)
	}
	want := lc.manifest.Participants[i]
	if caps.Component != protocol.ComponentEnvironmentServer || caps.Name != want.Name || caps.SchemaVersion != protocol.ControlSchemaVersion {
		return invalidCheckpoint("participant %d at %s is %s %q (schema %d); the checkpoint holds %q: list participants in the order of the checkpoint",
			i, url, caps.Component, caps.Name, caps.SchemaVersion, want.Name)
	}
	return nil
}

// A restore is named by its restore id, which defaults to the id of the
// checkpoint it restores. Each restore keeps its working files in
// <checkpoint>/restore/<restore_id>/ (attempts.json, started.json), so the
// same checkpoint can be restored more than once (the trainer rolling back
// to it again), each restore with its own attempt map, while a re-run of
// one restore reuses its own.

// restoreIDOf validates a restore id; empty means the checkpoint id.
func restoreIDOf(checkpointID, restoreID string) (string, error) {
	if restoreID == "" {
		return checkpointID, nil
	}
	if err := checkpoint.ValidateName("restore_id", restoreID); err != nil {
		return "", rollout.BadInput("%v", err)
	}
	return restoreID, nil
}

// restoreFiles validates a checkpoint id, root and restore id and returns
// the checkpoint directory, the restore id and the restore's directory.
func (c *Coordinator) restoreFiles(ctx context.Context, root, checkpointID, restoreID string) (dir storage.Store, rid string, rdir storage.Store, err error) {
	if dir, err = c.checkDir(ctx, root, checkpointID); err != nil {
		return nil, "", nil, err
	}
	if rid, err = restoreIDOf(checkpointID, restoreID); err != nil {
		return nil, "", nil, err
	}
	if rdir, err = dir.Sub(checkpoint.RestoreDir + "/" + rid); err != nil {
		return nil, "", nil, rollout.BadInput("%v", err)
	}
	return dir, rid, rdir, nil
}

// attemptsPath and startedPath are a restore's attempt map and started
// list; the files keep the names checkpoint.RestoreAttempts and checkpoint.ListStarted give them.
func attemptsPath(rdir storage.Store) file {
	return at(rdir, path.Base(checkpoint.RestoreAttempts))
}
func startedPath(rdir storage.Store) file {
	return at(rdir, path.Base(checkpoint.ListStarted))
}

// restoreSetUp names what a restore step needs before its work. The
// checkpoint and restore ids and the root are always checked; the rest only
// when asked for.
type restoreSetUp struct {
	root, checkpointID, restoreID string
	// participants are the environment servers the restore names.
	participants []string
	// checkParticipants checks the participant list on its own (loading the
	// checkpoint checks it too, against the manifest).
	checkParticipants bool
	// temporal asks for the Temporal client.
	temporal bool
	// checkpoint asks for the whole checkpoint, loaded and validated.
	checkpoint bool
	// attempts asks for the restore's attempt map; with checkpoint, the map
	// must have been planned for the checkpoint's manifest.
	attempts bool
}

// restoreStep is the set-up a restore step shares with the others.
type restoreStep struct {
	dir  storage.Store // the checkpoint's directory
	rid  string        // the restore id
	rdir storage.Store // the restore's working directory, restore/<restore_id>/
	tc   client.Client
	lc   *loadedCheckpoint
	af   attemptsFile
}

// setUpRestore does the set-up every restore step shares, always in the
// same order (ids and files, participants, Temporal client, checkpoint,
// attempt map), so that a problem fails each step the same way.
func (c *Coordinator) setUpRestore(ctx context.Context, in restoreSetUp) (restoreStep, error) {
	var rs restoreStep
	var err error
	if rs.dir, rs.rid, rs.rdir, err = c.restoreFiles(ctx, in.root, in.checkpointID, in.restoreID); err != nil {
		return restoreStep{}, err
	}
	if in.checkParticipants {
		if err := checkParticipants(in.participants); err != nil {
			return restoreStep{}, err
		}
	}
	if in.temporal {
		if rs.tc, err = c.temporal(); err != nil {
			return restoreStep{}, err
		}
	}
	if in.checkpoint {
		if rs.lc, err = c.loadCheckpoint(ctx, in.root, in.checkpointID, in.participants); err != nil {
			return restoreStep{}, err
		}
	}
	if in.attempts {
		path := attemptsPath(rs.rdir)
		if rs.af, _, err = readAttempts(ctx, path, in.checkpointID, rs.rid); err != nil {
			return restoreStep{}, invalidCheckpoint("read the attempt map: %v", err)
		}
		if rs.lc != nil {
			if err := rs.af.plannedFor(path, rs.lc.manifest.Digest); err != nil {
				return restoreStep{}, err
			}
		}
	}
	return rs, nil
}

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
	m, err := ReadAggregateManifest(ctx, rs.dir, in.CheckpointID)
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

// RestoreParticipants asks every environment server to install its
// artifact with the attempt map, in a control session named by the restore
// id: export_restore sessions become the new attempt, restart-only ones and
// the set's rollouts started after the cut only have their fence raised
// (what they hold now is dropped), another set's sessions are left alone,
// and the server stays paused until resumed. A server that answers the
// restore id is retired already resumed it in an earlier run of this
// restore.
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
		url := in.Participants[i]
		resp, err := c.control(url).Restore(ctx, protocol.RestoreRequest{
			CheckpointID: in.CheckpointID, RestoreID: rs.rid, Location: checkpoint.ParticipantLocation(rs.dir.Location(), i), Attempts: rs.af.Attempts,
		})
		if remoteCode(err) == protocol.CodeStaleCheckpoint {
			mu.Lock()
			res.AlreadyResumed++
			mu.Unlock()
			return nil
		}
		if err != nil {
			return controlError(url, "restore", err)
		}
		mu.Lock()
		res.Restored += len(resp.Restored)
		res.Restarted += len(resp.Restarted)
		res.Fenced += len(resp.Fenced)
		res.Untouched += len(resp.Untouched)
		mu.Unlock()
		return nil
	})
	if err != nil {
		return checkpoint.RestoreParticipantsResult{}, fmt.Errorf("restore participants of checkpoint %s (restore %s): %w", in.CheckpointID, rs.rid, err)
	}
	c.Failpoints.Hit(failpoint.RestoreAfterParticipants)
	return res, nil
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

// TerminateStale terminates every running run of a rollout of the set in
// the attempt map whose attempt is below its new attempt (runs of the
// replaced attempts, and of rollouts started after the cut). The
// environment servers already refuse that attempt; this stops its workflow
// code too.
func (c *Coordinator) TerminateStale(ctx context.Context, in checkpoint.TerminateStaleInput) (checkpoint.TerminateStaleResult, error) {
	rs, err := c.setUpRestore(ctx, restoreSetUp{root: in.Root, checkpointID: in.CheckpointID, restoreID: in.RestoreID,
		temporal: true, attempts: true})
	if err != nil {
		return checkpoint.TerminateStaleResult{}, err
	}
	tc, rid, af := rs.tc, rs.rid, rs.af
	ids := sortedKeys(af.Attempts)
	var mu sync.Mutex
	n := 0
	prog := newProgress(ctx, "terminate", len(ids))
	defer prog.stop()
	err = fanout.Each(ctx, len(ids), c.limit(), func(ctx context.Context, i int) error {
		defer prog.add()
		id, attempt := ids[i], af.Attempts[ids[i]]
		ri, err := describeRollout(ctx, tc, id)
		if err != nil {
			return err
		}
		// A rollout of another set whose session shared a server is only
		// fenced there; its workflow is not this restore's to end.
		if !ri.Running || ri.Set != af.Set || (ri.HasAttempt && int(ri.Attempt) >= attempt) {
			return nil
		}
		reason := fmt.Sprintf("superseded by the restore of checkpoint %s: attempt %d replaces attempt %d", in.CheckpointID, attempt, ri.Attempt)
		if rid != in.CheckpointID {
			reason = fmt.Sprintf("superseded by restore %s of checkpoint %s: attempt %d replaces attempt %d", rid, in.CheckpointID, attempt, ri.Attempt)
		}
		err = tc.TerminateWorkflow(ctx, rollout.WorkflowID(id), ri.RunID, reason)
		var nf *serviceerror.NotFound
		if err != nil && !errors.As(err, &nf) { // NotFound: it closed meanwhile
			return fmt.Errorf("terminate %s run %s: %w", rollout.WorkflowID(id), ri.RunID, err)
		}
		if err == nil {
			mu.Lock()
			n++
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		return checkpoint.TerminateStaleResult{}, fmt.Errorf("terminate stale runs of checkpoint %s: %w", in.CheckpointID, err)
	}
	c.Failpoints.Hit(failpoint.RestoreAfterTerminate)
	return checkpoint.TerminateStaleResult{Terminated: n}, nil
}

func sortedKeys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// StartRestored puts the checkpoint's transcript blobs back into the store,
// then starts the new attempt of every rollout with a record, held for the
// checkpoint until resumed. A run of exactly that attempt that already
// exists (running or closed) is left as it is. The list of rollouts goes to
// restore/<restore_id>/started.json for the resume.
func (c *Coordinator) StartRestored(ctx context.Context, in checkpoint.StartRestoredInput) (checkpoint.StartRestoredResult, error) {
	rs, err := c.setUpRestore(ctx, restoreSetUp{root: in.Root, checkpointID: in.CheckpointID, restoreID: in.RestoreID,
		participants: in.Participants, temporal: true, checkpoint: true, attempts: true})
	if err != nil {
		return checkpoint.StartRestoredResult{}, err
	}
	tc, rid, lc, af := rs.tc, rs.rid, rs.lc, rs.af
	taskQueue := in.TaskQueue
	if taskQueue == "" {
		taskQueue = c.TaskQueue
	}
	if taskQueue == "" {
		return checkpoint.StartRestoredResult{}, rollout.BadInput("no task queue for the restored rollouts")
	}
	if err := c.installTranscripts(ctx, lc); err != nil {
		return checkpoint.StartRestoredResult{}, err
	}
	if _, err := writeJSONAtomic(ctx, startedPath(rs.rdir), rolloutList{CheckpointID: in.CheckpointID, Set: lc.manifest.Set, Rollouts: af.Start}); err != nil {
		return checkpoint.StartRestoredResult{}, err
	}

	// Environment servers may come back on new addresses: the restore names
	// them in the checkpoint's order, so a rollout pinned to participant i's
	// old URL continues against its new one.
	moved := map[string]string{}
	for i, p := range lc.manifest.Participants {
		if p.URL != in.Participants[i] {
			moved[p.URL] = in.Participants[i]
		}
	}
	var mu sync.Mutex
	var res checkpoint.StartRestoredResult
	prog := newProgress(ctx, "start", len(af.Start))
	defer prog.stop()
	err = fanout.Each(ctx, len(af.Start), c.limit(), func(ctx context.Context, i int) error {
		defer prog.add()
		id := af.Start[i]
		input, kind, err := af.restoredInput(lc, id, in.CheckpointID, moved)
		if err != nil {
			return err
		}
		opts := rollout.StartOptions(input, taskQueue)
		opts.StaticSummary = restoredSummary(input, kind, rid)
		started, err := c.startRestored(ctx, tc, opts, input)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		switch kind {
		case checkpoint.RestoreContinue:
			res.Continue++
		case checkpoint.RestoreStartOver:
			res.StartOver++
		case checkpoint.RestoreOfferAgain:
			res.OfferAgain++
		}
		if started {
			res.Started++
		} else {
			res.Existing++
		}
		return nil
	})
	if err != nil {
		return checkpoint.StartRestoredResult{}, fmt.Errorf("start restored rollouts of checkpoint %s: %w", in.CheckpointID, err)
	}
	c.Failpoints.Hit(failpoint.RestoreAfterStart)
	return res, nil
}

// restoredSummary is the static summary of a restored run in the Web UI.
func restoredSummary(in rollout.Input, kind, restoreID string) string {
	if restoreID != in.HoldFor {
		return fmt.Sprintf("rollout %s · attempt %d · restored from checkpoint %s by restore %s (%s)", in.RolloutID, in.Attempt, in.HoldFor, restoreID, kind)
	}
	return fmt.Sprintf("rollout %s · attempt %d · restored from checkpoint %s (%s)", in.RolloutID, in.Attempt, in.HoldFor, kind)
}

// startRestored starts one new attempt unless a run of it exists; it says
// whether it started one.
func (c *Coordinator) startRestored(ctx context.Context, tc client.Client, opts client.StartWorkflowOptions, in rollout.Input) (bool, error) {
	id, attempt := in.RolloutID, in.Attempt
	exists := func() (bool, error) {
		ri, err := describeRollout(ctx, tc, id)
		if err != nil || !ri.Exists || !ri.HasAttempt {
			return false, err
		}
		switch a := int(ri.Attempt); {
		case a == attempt:
			return true, nil
		case a > attempt:
			return false, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
				"rollout %s already runs attempt %d, above the %d this restore would start: a later restore superseded this one", id, a, attempt),
				checkpoint.ErrAttemptConflict, nil)
		}
		return false, nil
	}
	if ok, err := exists(); ok || err != nil {
		return false, err
	}
	_, err := tc.ExecuteWorkflow(ctx, opts, rollout.WorkflowName, in)
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &already) {
		// Started meanwhile (a retried activity): fine if it is this attempt.
		if ok, xerr := exists(); ok || xerr != nil {
			return false, xerr
		}
		return false, fmt.Errorf("start %s attempt %d: a run of an older attempt is still running: %w", rollout.WorkflowID(id), attempt, err)
	}
	if err != nil {
		return false, fmt.Errorf("start %s attempt %d: %w", rollout.WorkflowID(id), attempt, err)
	}
	return true, nil
}

// installTranscripts puts every blob of the checkpoint into the transcript
// store (content-addressed: a blob already there is left as it is).
func (c *Coordinator) installTranscripts(ctx context.Context, lc *loadedCheckpoint) error {
	if len(lc.blobs) == 0 {
		return nil
	}
	if c.Store == nil {
		return temporal.NewNonRetryableApplicationError("coordinator: no transcript store configured", rollout.ErrBadInput, nil)
	}
	prog := newProgress(ctx, "transcripts", len(lc.blobs))
	defer prog.stop()
	for d, data := range lc.blobs {
		got, err := c.Store.Put(ctx, data)
		if err != nil {
			return fmt.Errorf("install transcript blob %s: %w", d, err)
		}
		if got != d {
			return invalidCheckpoint("transcript blob %s stored as %s", d, got)
		}
		prog.add()
	}
	return nil
}

// ResumeRestoredParticipants reopens admission at every environment server
// and retires the restore id there, so a re-run of this restore installs
// nothing twice. Resume is idempotent.
func (c *Coordinator) ResumeRestoredParticipants(ctx context.Context, in checkpoint.ResumeRestoredParticipantsInput) (checkpoint.ResumeParticipantsResult, error) {
	if err := checkpoint.ValidateName("checkpoint_id", in.CheckpointID); err != nil {
		return checkpoint.ResumeParticipantsResult{}, rollout.BadInput("%v", err)
	}
	rid, err := restoreIDOf(in.CheckpointID, in.RestoreID)
	if err != nil {
		return checkpoint.ResumeParticipantsResult{}, err
	}
	if err := checkParticipants(in.Participants); err != nil {
		return checkpoint.ResumeParticipantsResult{}, err
	}
	prog := newProgress(ctx, "resume participants", len(in.Participants))
	defer prog.stop()
	err = fanout.Each(ctx, len(in.Participants), c.limit(), func(ctx context.Context, i int) error {
		if _, err := c.control(in.Participants[i]).ResumeRestore(ctx, in.CheckpointID, rid); err != nil {
			return controlError(in.Participants[i], "resume", err)
		}
		prog.add()
		return nil
	})
	if err != nil {
		return checkpoint.ResumeParticipantsResult{}, fmt.Errorf("resume participants of restore %s of checkpoint %s: %w", rid, in.CheckpointID, err)
	}
	c.Failpoints.Hit(failpoint.RestoreAfterResumeParticipants)
	return checkpoint.ResumeParticipantsResult{Resumed: len(in.Participants)}, nil
}

// ResumeRestoredRollouts signals every rollout of
// restore/<restore_id>/started.json to resume. A rollout that is not held
// for the checkpoint ignores it, so a retry is harmless.
func (c *Coordinator) ResumeRestoredRollouts(ctx context.Context, in checkpoint.ResumeRestoredRolloutsInput) (checkpoint.ResumeRolloutsResult, error) {
	rs, err := c.setUpRestore(ctx, restoreSetUp{root: in.Root, checkpointID: in.CheckpointID, restoreID: in.RestoreID,
		temporal: true})
	if err != nil {
		return checkpoint.ResumeRolloutsResult{}, err
	}
	tc, rid := rs.tc, rs.rid
	l, err := readRolloutList(ctx, startedPath(rs.rdir), in.CheckpointID)
	if err != nil {
		return checkpoint.ResumeRolloutsResult{}, fmt.Errorf("read rollouts to resume: %w", err)
	}
	resumed, gone, err := c.releaseRollouts(ctx, tc, in.CheckpointID, l.Rollouts)
	res := checkpoint.ResumeRolloutsResult{Resumed: resumed, Gone: gone}
	if err != nil {
		return checkpoint.ResumeRolloutsResult{}, fmt.Errorf("resume rollouts of restore %s of checkpoint %s: %w", rid, in.CheckpointID, err)
	}
	return res, nil
}
