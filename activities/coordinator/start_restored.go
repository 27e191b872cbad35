package coordinator

import (
	"context"
	"fmt"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/activities/bookkeeping"
	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// StartRestored puts the checkpoint's transcript blobs back into the store,
// drops from the set's acknowledgement ledger what the rolled-back world
// acknowledged of its rollouts (forgetRolledBack), then starts the new attempt of every rollout with a record, held for the
// checkpoint until resumed, with bookkeeping.EagerStarter (eager workflow
// start, as every start from inside the worker). A run of exactly that
// attempt that already exists (running or closed) is left as it is; a run
// of a later attempt means a later restore superseded this one. The list of rollouts goes to
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
	replays, err := readReplays(ctx, rs.rdir, in.CheckpointID, rid, len(lc.manifest.Participants))
	if err != nil {
		return checkpoint.StartRestoredResult{}, err
	}
	if err := c.installTranscripts(ctx, lc); err != nil {
		return checkpoint.StartRestoredResult{}, err
	}
	forgot, err := c.forgetRolledBack(ctx, tc, rid, in.CheckpointID, af)
	if err != nil {
		return checkpoint.StartRestoredResult{}, fmt.Errorf("start restored rollouts of checkpoint %s: %w", in.CheckpointID, err)
	}
	finished, err := c.finishedMeanwhile(ctx, tc, &af)
	if err != nil {
		return checkpoint.StartRestoredResult{}, fmt.Errorf("start restored rollouts of checkpoint %s: %w", in.CheckpointID, err)
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
	inputs := make([]rollout.Input, len(af.Start))
	kinds := map[string]string{}
	res := checkpoint.StartRestoredResult{ForgottenAcks: forgot, FinishedMeanwhile: finished}
	for i, id := range af.Start {
		input, kind, replay, err := af.restoredInput(lc, id, in.CheckpointID, moved, replays)
		if err != nil {
			return checkpoint.StartRestoredResult{}, err
		}
		inputs[i], kinds[id] = input, kind
		switch kind {
		case checkpoint.RestoreContinue:
			res.Continue++
			if replay {
				res.Replayed++
			}
		case checkpoint.RestoreStartOver:
			res.StartOver++
			if replay {
				res.Diverged++
			}
		case checkpoint.RestoreOfferAgain:
			res.OfferAgain++
		}
	}
	// The restored runs start like any other from inside the worker:
	// eagerly, so their first task (which only parks them) does not wait on
	// the task queue, and records no more than a fresh run's.
	prog := newProgress(ctx, "start", len(af.Start))
	defer prog.stop()
	starter := bookkeeping.EagerStarter{Client: tc, TaskQueue: taskQueue}
	outcomes, err := starter.StartBatch(ctx, inputs, bookkeeping.BatchOptions{
		Concurrency: c.limit(),
		Options: func(in rollout.Input, opts *client.StartWorkflowOptions) {
			opts.StaticSummary = restoredSummary(in, kinds[in.RolloutID], rid)
		},
		Progress: prog.add,
	})
	if err != nil {
		return checkpoint.StartRestoredResult{}, fmt.Errorf("start restored rollouts of checkpoint %s: %w", in.CheckpointID, err)
	}
	for i, o := range outcomes {
		switch o {
		case bookkeeping.BatchStarted:
			res.Started++
		case bookkeeping.BatchExisting:
			res.Existing++
		case bookkeeping.BatchSuperseded:
			return checkpoint.StartRestoredResult{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
				"rollout %s already runs an attempt above the %d this restore would start: a later restore superseded this one", inputs[i].RolloutID, inputs[i].Attempt),
				checkpoint.ErrAttemptConflict, nil)
		}
	}
	if res.Queued, err = c.requeue(ctx, requeueSpec{tc: tc, rid: rid, checkpointID: in.CheckpointID, taskQueue: taskQueue, lc: lc, af: af, moved: moved}); err != nil {
		return checkpoint.StartRestoredResult{}, fmt.Errorf("queue again the rollouts checkpoint %s recorded as not started: %w", in.CheckpointID, err)
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

// finishedMeanwhile takes out of a scoped recovery's start list the
// rollouts whose current run completed, below the planned attempt, after
// the plan: a server declared dead that was only slow (a false positive)
// can answer its old attempts until the recovery ended their runs, and a
// rollout that finished that way has its one result; a new attempt would
// be a second. The old runs were ended before this step, so what it sees
// no longer changes. A full restore rolls back on purpose and keeps its
// list. It returns how many it took out.
func (c *Coordinator) finishedMeanwhile(ctx context.Context, tc client.Client, af *attemptsFile) (int, error) {
	if af.Recover == nil || len(af.Start) == 0 {
		return 0, nil
	}
	runs, err := c.describeAll(ctx, tc, af.Start)
	if err != nil {
		return 0, err
	}
	keep := af.Start[:0:0]
	for i, id := range af.Start {
		ri := runs[i]
		if ri.Completed && ri.HasAttempt && int(ri.Attempt) < af.Attempts[id] {
			continue
		}
		keep = append(keep, id)
	}
	n := len(af.Start) - len(keep)
	af.Start = keep
	return n, nil
}
