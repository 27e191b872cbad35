package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/turnstile-rl/turnstile/internal/fanout"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/internal/failpoint"
)

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
