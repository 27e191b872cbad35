package rollout

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"
)

// A set's fence record says which runs of the set a restore rolled back.
// Runs the restore itself starts, and every run started after it, start
// after its fence was written; every run of the set started before it
// belongs to the world the restore replaced: the restore ends the ones it
// knows of (its attempt map), and the record catches the ones it could not
// know (a dataset rollout or a custom id started just before it, not yet
// listed by visibility). Each rollout run consults the record before its
// first environment call and before its result lands, and the pipeline's
// readers (results, export, feed) consult it before they deliver one.
//
// The record is the memo of the running workflow SetFenceWorkflowID(set):
// Temporal keeps it as long as Temporal lives (a running workflow is never
// removed by retention), a describe reads it without a worker, and its
// start time, the moment the fence took effect, comes from the same clock
// as every run's start time. Each restore of the set starts a new run of
// it (terminating the previous one) whose memo carries the windows of the
// restores before it.
const (
	// SetFenceWorkflowName is the workflow type holding a set's record.
	SetFenceWorkflowName = "SetFence"
	// CheckSetFenceName is the activity a rollout consults the record with.
	CheckSetFenceName = "CheckSetFence"
	// ErrFencedByRestore: a restore of the set replaced the world this run
	// started in; the run stops before any environment call or result.
	ErrFencedByRestore = "FencedByRestore"
	// MemoSetFence is the memo field holding the record.
	MemoSetFence = "set_fence"
	// MaxFenceWindows bounds the windows a record keeps (the newest); a
	// restore beyond that drops the oldest window, whose runs have long
	// been superseded.
	MaxFenceWindows  = 256
	setFenceIDPrefix = "fence/"
)

// SetFenceWorkflowID is the workflow ID holding set's fence record.
func SetFenceWorkflowID(set string) string { return setFenceIDPrefix + set }

// FenceWindow is one restore's fence: the runs of the set that started
// after From (when the restored checkpoint's Checkpoint workflow started;
// zero when this Temporal never ran it) and no later than Before (when the
// restore wrote its fence) are of the world it rolled back.
type FenceWindow struct {
	RestoreID    string    `json:"restore_id"`
	CheckpointID string    `json:"checkpoint_id"`
	From         time.Time `json:"from"`
	// Before is zero in the memo of the run that carries the window: that
	// run's start time is when the fence took effect (ReadSetFence fills it).
	Before time.Time `json:"before,omitzero"`
}

// SetFence is a set's fence record: its restores' windows, oldest first.
type SetFence struct {
	Set     string        `json:"set"`
	Windows []FenceWindow `json:"windows"`
}

// Latest is the newest restore's window.
func (f SetFence) Latest() (FenceWindow, bool) {
	if len(f.Windows) == 0 {
		return FenceWindow{}, false
	}
	return f.Windows[len(f.Windows)-1], true
}

// FencesRun says whether a rollout whose run chain (its attempt, continued
// as new or not) started at startedAt may not go on: every run the set
// keeps after a restore was started by the restore or after it, so a run
// started no later than the newest fence is of a world rolled back.
func (f SetFence) FencesRun(startedAt time.Time) (FenceWindow, bool) {
	w, ok := f.Latest()
	if !ok || startedAt.After(w.Before) {
		return FenceWindow{}, false
	}
	return w, true
}

// FencesResult says whether a finished run that started at startedAt is of
// a rolled-back world: it started inside one restore's window. A run that
// started before a window ended before that restore's cut, or was in its
// checkpoint and replaced by a later attempt; its result stands.
func (f SetFence) FencesResult(startedAt time.Time) (FenceWindow, bool) {
	for i := len(f.Windows) - 1; i >= 0; i-- {
		w := f.Windows[i]
		if startedAt.After(w.From) && !startedAt.After(w.Before) {
			return w, true
		}
	}
	return FenceWindow{}, false
}

// Describer describes a workflow: a Temporal client is one.
type Describer interface {
	DescribeWorkflowExecution(ctx context.Context, workflowID, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error)
}

// ReadSetFence reads set's fence record; a set never restored has none (no
// windows). Any other failure is an error: a caller that cannot read the
// record must not take the run as unfenced.
func ReadSetFence(ctx context.Context, d Describer, set string) (SetFence, error) {
	resp, err := d.DescribeWorkflowExecution(ctx, SetFenceWorkflowID(set), "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return SetFence{Set: set}, nil
	}
	if err != nil {
		return SetFence{}, fmt.Errorf("read the fence record of set %s: %w", set, err)
	}
	info := resp.GetWorkflowExecutionInfo()
	p, ok := info.GetMemo().GetFields()[MemoSetFence]
	if !ok {
		return SetFence{}, fmt.Errorf("read the fence record of set %s: %s has no %s memo", set, SetFenceWorkflowID(set), MemoSetFence)
	}
	var f SetFence
	if err := converter.GetDefaultDataConverter().FromPayload(p, &f); err != nil || f.Set != set || len(f.Windows) == 0 {
		return SetFence{}, fmt.Errorf("read the fence record of set %s: its memo does not decode as a record of the set (%v)", set, err)
	}
	last := &f.Windows[len(f.Windows)-1]
	if last.Before.IsZero() {
		if info.GetStartTime() == nil {
			return SetFence{}, fmt.Errorf("read the fence record of set %s: no start time", set)
		}
		last.Before = info.GetStartTime().AsTime()
	}
	return f, nil
}

// SetFenceWorkflow holds a set's fence record in its memo (set when it is
// started) and runs until the next restore of the set replaces it. It does
// nothing: it only has to stay running.
func SetFenceWorkflow(ctx workflow.Context, f SetFence) error {
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("fence record of set %s: %d restores", f.Set, len(f.Windows)))
	return workflow.Await(ctx, func() bool { return false })
}
