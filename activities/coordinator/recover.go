package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/internal/destination"
	"github.com/turnstile-rl/turnstile/internal/fanout"
	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/internal/visibility"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// recoverPlan is what a scoped recovery adds to its attempt map.
type recoverPlan struct {
	Server      string `json:"server"`
	Replacement string `json:"replacement"`
	// Participant is the dead server's index in the checkpoint;
	// Participants the checkpoint's list with the replacement in its place.
	Participant  int      `json:"participant"`
	Participants []string `json:"participants"`
	// Fresh are the inputs of the rollouts that start over from their
	// seed because the checkpoint holds no record of their current attempt
	// (started or retried after the cut): their run's input with no
	// boundary, on the replacement.
	Fresh map[string]rollout.Input `json:"fresh,omitempty"`
	// Continue counts the moved rollouts that continue from a boundary;
	// Untouched the set's running rollouts left alone.
	Continue  int `json:"continue"`
	Untouched int `json:"untouched"`
}

// restoredInput is the held input of rollout id's new attempt: from its
// fresh input (a recovery's start-over) or from its record.
func (af attemptsFile) restoredInput(lc *loadedCheckpoint, id, checkpointID string, moved map[string]string, replays replayOutcomes) (rollout.Input, string, bool, error) {
	if af.Recover != nil {
		if in, ok := af.Recover.Fresh[id]; ok {
			in.Attempt, in.HoldFor = af.Attempts[id], checkpointID
			in.Resume, in.Completed = nil, nil
			in.Env.URL, in.Env.Server = af.Recover.Replacement, ""
			return in, checkpoint.RestoreStartOver, false, nil
		}
	}
	rec, ok := lc.parked[id]
	if !ok {
		return rollout.Input{}, "", false, invalidCheckpoint("the attempt map starts %s, which has no record", id)
	}
	in, kind, err := BuildRestoredInput(rec, checkpointID, af.Attempts[id], moved)
	if err != nil {
		return rollout.Input{}, "", false, invalidCheckpoint("%v", err)
	}
	in, kind, replay := settleReplay(in, kind, rec, replays)
	if af.Recover != nil {
		// Only rollouts of the dead server move, all to the replacement.
		in.Env.URL, in.Env.Server = af.Recover.Replacement, ""
	}
	return in, kind, replay, nil
}

// PlanRecovery plans a scoped recovery: it picks the checkpoint (the one
// named, or the newest committed one of the set), validates it whole,
// checks that the replacement answers as the dead server's name, and finds
// the set's running rollouts whose current run uses the dead server. Each
// gets one attempt above the highest issued; it continues from its record
// when the checkpoint holds one of its current attempt, and otherwise
// starts over from its seed. The plan is persisted as the attempt map of
// restore in.RestoreID of the checkpoint; a re-run reads it back.
func (c *Coordinator) PlanRecovery(ctx context.Context, in checkpoint.PlanRecoveryInput) (checkpoint.PlanRecoveryResult, error) {
	if err := rollout.ValidateSet(in.Set); err != nil {
		return checkpoint.PlanRecoveryResult{}, rollout.BadInput("%v", err)
	}
	tc, err := c.temporal()
	if err != nil {
		return checkpoint.PlanRecoveryResult{}, err
	}
	cpID := in.CheckpointID
	if cpID == "" {
		if cpID, err = c.recoveryCheckpoint(ctx, tc, in); err != nil {
			return checkpoint.PlanRecoveryResult{}, err
		}
	}
	rs, err := c.setUpRestore(ctx, restoreSetUp{root: in.Root, checkpointID: cpID, restoreID: in.RestoreID})
	if err != nil {
		return checkpoint.PlanRecoveryResult{}, err
	}
	path := attemptsPath(rs.rdir)
	if af, b, err := readAttempts(ctx, path, cpID, rs.rid); err == nil {
		if p := af.Recover; p == nil || p.Server != in.Server || p.Replacement != in.Replacement {
			return checkpoint.PlanRecoveryResult{}, rollout.BadInput("%s was planned for another restore or recovery: use another request id", path)
		}
		return planResult(cpID, af, true, sha256Hex(b)), nil
	} else if !errors.Is(err, storage.ErrNotExist) {
		return checkpoint.PlanRecoveryResult{}, invalidCheckpoint("%v", err)
	}
	af, err := c.planRecovery(ctx, tc, in, cpID)
	if err != nil {
		return checkpoint.PlanRecoveryResult{}, err
	}
	af.RestoreID = rs.rid
	digest, err := writeJSONAtomic(ctx, path, af)
	if err != nil {
		return checkpoint.PlanRecoveryResult{}, err
	}
	return planResult(cpID, af, false, digest), nil
}

func planResult(cpID string, af attemptsFile, reused bool, digest string) checkpoint.PlanRecoveryResult {
	p := af.Recover
	return checkpoint.PlanRecoveryResult{CheckpointID: cpID, Participant: p.Participant, Participants: p.Participants,
		Affected: len(af.Start), Continue: p.Continue, StartOver: len(af.Start) - p.Continue, Untouched: p.Untouched,
		Reused: reused, Digest: digest}
}

// planRecovery loads the checkpoint, places the dead server in it and
// computes the attempt map of the rollouts it held.
func (c *Coordinator) planRecovery(ctx context.Context, tc client.Client, in checkpoint.PlanRecoveryInput, cpID string) (attemptsFile, error) {
	dir, err := c.checkDir(ctx, in.Root, cpID)
	if err != nil {
		return attemptsFile{}, err
	}
	m, err := ReadSignedAggregateManifest(ctx, dir, cpID, c.Checkpoints.Key)
	if err != nil {
		return attemptsFile{}, invalidOrUnavailable(err, "checkpoint %s: %v", cpID, err)
	}
	if m.Set != in.Set {
		return attemptsFile{}, rollout.BadInput("checkpoint %s is of set %q, not %q", cpID, m.Set, in.Set)
	}
	plan := &recoverPlan{Server: in.Server, Replacement: in.Replacement, Participant: -1, Fresh: map[string]rollout.Input{}}
	for i, p := range m.Participants {
		plan.Participants = append(plan.Participants, p.URL)
		if p.URL == in.Server {
			plan.Participant = i
			plan.Participants[i] = in.Replacement
		}
	}
	if plan.Participant < 0 {
		return attemptsFile{}, rollout.BadInput("checkpoint %s has no participant %s (it has %v)", cpID, in.Server, plan.Participants)
	}
	lc, err := c.loadCheckpoint(ctx, in.Root, cpID, plan.Participants)
	if err != nil {
		return attemptsFile{}, err
	}
	if err := c.checkParticipantLive(ctx, lc, plan.Participant, in.Replacement); err != nil {
		return attemptsFile{}, err
	}
	af := attemptsFile{CheckpointID: cpID, Set: in.Set, ManifestDigest: m.Digest, Attempts: map[string]int{}, Start: []string{}, Recover: plan}
	return af, c.findMoved(ctx, tc, lc, &af)
}

// findMoved fills the attempt map with the set's running rollouts whose
// current run uses the dead server. Candidates are every rollout visibility
// lists running, every record and every session the dead server held at
// the cut (visibility may lag); each is described from its run, and its
// environment read from its run's input.
func (c *Coordinator) findMoved(ctx context.Context, tc client.Client, lc *loadedCheckpoint, af *attemptsFile) error {
	plan := af.Recover
	seen := map[string]bool{}
	for id := range lc.parked {
		seen[id] = true
	}
	for id := range lc.holders {
		seen[id] = true
	}
	err := listSet(ctx, tc, af.Set, `ExecutionStatus = "Running"`, func(r visibleRun) { seen[r.RolloutID] = true })
	if err != nil {
		return err
	}
	ids := sortedSet(seen)
	runs, err := c.describeAll(ctx, tc, ids)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	prog := newProgress(ctx, "find moved rollouts", len(ids))
	defer prog.stop()
	err = fanout.Each(ctx, len(ids), c.limit(), func(ctx context.Context, i int) error {
		defer prog.add()
		id, ri := ids[i], runs[i]
		if !ri.Running || ri.Set != af.Set || rollout.Phase(ri.Phase) == rollout.PhaseAwaitingAck {
			return nil // closed, another set's, or holding its result: the dead server is no longer needed
		}
		var cur rollout.Input
		if err := visibility.DecodeStartInput(ctx, tc, rollout.WorkflowID(id), ri.RunID, &cur); err != nil {
			return fmt.Errorf("input of %s run %s: %w", rollout.WorkflowID(id), ri.RunID, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if !c.usesServer(cur.Env, plan.Server) {
			plan.Untouched++
			return nil
		}
		af.Attempts[id] = max(lc.highestAttempt(id), int(ri.Attempt), cur.Attempt) + 1
		if rec, ok := lc.parked[id]; ok && rec.Input.Attempt == cur.Attempt {
			if restoreKind(rec) == checkpoint.RestoreContinue {
				plan.Continue++
			}
			return nil
		}
		cur.Resume, cur.HoldFor, cur.Completed = nil, "", nil
		plan.Fresh[id] = cur
		return nil
	})
	if err != nil {
		return fmt.Errorf("find the rollouts of %s: %w", plan.Server, err)
	}
	af.Start = sortedKeys(af.Attempts)
	return nil
}

// sortedSet is the members of seen, sorted.
func sortedSet(seen map[string]bool) []string {
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// recoveryCheckpoint is the checkpoint a recovery named by restoreID goes
// back to when it names none: the one an earlier run of the same recovery
// planned from (its attempt map is there), else the set's newest. A
// recovery run again after a failure must not move to a newer checkpoint:
// one that cut the replacement while it was still empty (restarted, not
// yet restored) holds none of the moved rollouts' sessions.
func (c *Coordinator) recoveryCheckpoint(ctx context.Context, tc client.Client, in checkpoint.PlanRecoveryInput) (string, error) {
	var newest, planned string
	looked := 0
	err := setCheckpoints(ctx, tc, in.Set, func(id string) (bool, error) {
		if newest == "" {
			newest = id
		}
		_, _, rdir, err := c.restoreFiles(ctx, in.Root, id, in.RestoreID)
		if err != nil {
			return false, err
		}
		if _, _, err := readAttempts(ctx, attemptsPath(rdir), id, in.RestoreID); err == nil {
			planned = id
			return false, nil
		}
		looked++
		return looked < maxPlanLookback, nil
	})
	if planned != "" {
		return planned, nil
	}
	return newest, err
}

// maxPlanLookback bounds how many of a set's newest checkpoints a
// recovery looks in for its own earlier plan (a retried recovery planned
// minutes ago; retention keeps a few checkpoints).
const maxPlanLookback = 8

// setCheckpoints calls fn with the ids of set's completed Checkpoint runs,
// newest (by close time) first, until fn returns false. Visibility lists
// the namespace's completed checkpoints; each candidate's set is read from
// its run's input.
func setCheckpoints(ctx context.Context, tc client.Client, set string, fn func(id string) (bool, error)) error {
	query := fmt.Sprintf(`WorkflowType = %q AND ExecutionStatus = "Completed"`, checkpoint.CheckpointWorkflowName)
	var runs []*workflowpb.WorkflowExecutionInfo
	var token []byte
	for {
		resp, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token, PageSize: 1000})
		if err != nil {
			return fmt.Errorf("list checkpoints: %w", err)
		}
		for _, e := range resp.GetExecutions() {
			if e.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
				runs = append(runs, e)
			}
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			break
		}
	}
	sort.SliceStable(runs, func(i, j int) bool {
		return runs[i].GetCloseTime().AsTime().After(runs[j].GetCloseTime().AsTime())
	})
	found := false
	for _, e := range runs {
		var in checkpoint.CheckpointInput
		if err := visibility.DecodeStartInput(ctx, tc, e.GetExecution().GetWorkflowId(), e.GetExecution().GetRunId(), &in); err != nil {
			return fmt.Errorf("input of %s: %w", e.GetExecution().GetWorkflowId(), err)
		}
		if in.Set != set {
			continue
		}
		id, err := checkpointIDOf(e.GetExecution().GetWorkflowId(), in)
		if err != nil {
			return err
		}
		found = true
		more, err := fn(id)
		if err != nil || !more {
			return err
		}
	}
	if !found {
		return rollout.BadInput("set %s has no completed checkpoint to recover from: name one (checkpoint_id)", set)
	}
	return nil
}

// checkpointIDOf is the checkpoint id of the Checkpoint run with
// workflowID and start input in: its input's, or for a scheduled fire
// (whose input names none) the one its workflow ID gives.
func checkpointIDOf(workflowID string, in checkpoint.CheckpointInput) (string, error) {
	if !in.Scheduled {
		return in.CheckpointID, nil
	}
	id, err := checkpoint.ScheduledCheckpointID(workflowID)
	if err != nil {
		return "", fmt.Errorf("scheduled checkpoint %s: %w", workflowID, err)
	}
	return id, nil
}

// usesServer reports whether ref names the server at url: by that URL, or
// by the name of a configured server at that URL. A rollout on the default
// server (neither) is left alone, as it always was.
func (c *Coordinator) usesServer(ref rollout.EnvRef, url string) bool {
	if ref.Server == "" {
		return ref.URL == url
	}
	t, err := c.destinations().Env(ref.Server, "")
	if err != nil {
		return false
	}
	want, err := destination.Canonical(url)
	return err == nil && t.URL == want
}
