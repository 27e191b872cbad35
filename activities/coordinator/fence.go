package coordinator

import (
	"context"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/internal/sleep"
	"github.com/turnstile-rl/turnstile/internal/visibility"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
	"github.com/turnstile-rl/turnstile/workflows/set"
)

// FenceSet ends the set's admission (unless this restore started it) and
// writes the set's fence record for this restore, before the restore
// installs, starts or resumes anything: a new run of the workflow
// set.SetFenceWorkflowID(set) (terminating the previous one) whose memo
// carries the windows of the earlier restores and this one's, from the
// restored checkpoint's start to this run's start. A re-run of the same
// restore finds its window the newest and keeps it: its fence time never
// moves past the runs it already started. Either way it returns only
// set.FenceSettle after the fence is in place: by then no worker answers a
// seed's fence check from a record it read before (bookkeeping.SetFences),
// and the restore may install, end, start and resume.
func (c *Coordinator) FenceSet(ctx context.Context, in checkpoint.FenceSetInput) (checkpoint.FenceSetResult, error) {
	if err := rollout.ValidateSet(in.Set); err != nil {
		return checkpoint.FenceSetResult{}, rollout.BadInput("%v", err)
	}
	if err := checkpoint.ValidateName("checkpoint_id", in.CheckpointID); err != nil {
		return checkpoint.FenceSetResult{}, rollout.BadInput("%v", err)
	}
	rid, err := restoreIDOf(in.CheckpointID, in.RestoreID)
	if err != nil {
		return checkpoint.FenceSetResult{}, err
	}
	tc, err := c.temporal()
	if err != nil {
		return checkpoint.FenceSetResult{}, err
	}
	cur, err := visibility.ReadSetFence(ctx, tc, in.Set)
	if err != nil {
		return checkpoint.FenceSetResult{}, err
	}
	ours := func(w rollout.FenceWindow) bool { return w.RestoreID == rid && w.CheckpointID == in.CheckpointID }
	if w, ok := cur.Latest(); ok && ours(w) {
		return checkpoint.FenceSetResult{FencedAt: w.Before, Restores: len(cur.Windows), Reused: true}, c.settleFence(ctx)
	}
	// The set's admission belongs to the world this restore replaces: it
	// ends before the fence, so every rollout it started is fenced (the
	// restore starts a new admission from the checkpoint's queue).
	if err := replaceAdmission(ctx, tc, in.Set, rid); err != nil {
		return checkpoint.FenceSetResult{}, err
	}
	from, err := checkpointStart(ctx, tc, in.CheckpointID)
	if err != nil {
		return checkpoint.FenceSetResult{}, err
	}
	next := set.SetFence{Set: in.Set, Windows: append(cur.Windows, rollout.FenceWindow{RestoreID: rid, CheckpointID: in.CheckpointID, From: from})}
	if n := len(next.Windows); n > set.MaxFenceWindows {
		next.Windows = next.Windows[n-set.MaxFenceWindows:]
	}
	queue := c.TaskQueue
	if queue == "" {
		queue = rollout.TaskQueue
	}
	_, err = tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       set.SetFenceWorkflowID(in.Set),
		TaskQueue:                checkpoint.ControlTaskQueue(queue),
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_TERMINATE_EXISTING,
		Memo:                     map[string]any{set.MemoSetFence: next},
		StaticSummary:            fmt.Sprintf("fence record of set %s: newest restore %s of checkpoint %s", in.Set, rid, in.CheckpointID),
	}, set.SetFenceWorkflowName, next)
	if err != nil {
		return checkpoint.FenceSetResult{}, fmt.Errorf("write the fence record of set %s: %w", in.Set, err)
	}
	got, err := visibility.ReadSetFence(ctx, tc, in.Set)
	if err != nil {
		return checkpoint.FenceSetResult{}, err
	}
	w, ok := got.Latest()
	if !ok || !ours(w) {
		return checkpoint.FenceSetResult{}, fmt.Errorf("the fence record of set %s names restore %s of checkpoint %s, not this one (%s of %s): another restore of the set ran at the same time",
			in.Set, w.RestoreID, w.CheckpointID, rid, in.CheckpointID)
	}
	return checkpoint.FenceSetResult{FencedAt: w.Before, Restores: len(got.Windows)}, c.settleFence(ctx)
}

// settleFence waits until every worker's cached read of the set's fence
// record predates it by more than set.FenceReadTTL.
func (c *Coordinator) settleFence(ctx context.Context) error {
	d := c.FenceSettle
	if d <= 0 {
		d = set.FenceSettle
	}
	return sleep.For(ctx, d)
}
