package rollout

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// ErrFencedByRestore: a restore of the set replaced the world this run
// started in; the run stops before any environment call.
const ErrFencedByRestore = "FencedByRestore"

// SetFenceCheck names the run chain a seed checks against its set's fence
// record (package workflows/set keeps the record): the set, and when the
// first run of the chain started.
type SetFenceCheck struct {
	Set       string    `json:"set"`
	StartedAt time.Time `json:"started_at"`
}

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

// FencedByRestoreError is the non-retryable failure of a seed whose run
// chain, of rollout rolloutID's attempt, started at startedAt, no later
// than restore w's fence of set: in the restored world the run does not
// exist, so it stops before its first environment call.
func FencedByRestoreError(rolloutID string, attempt int, set string, startedAt time.Time, w FenceWindow) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
		"attempt %d of rollout %s started at %s, before restore %s of checkpoint %s fenced set %s at %s: in the restored world it does not exist, so it stops before its first environment call; re-submit it deliberately as a higher attempt",
		attempt, rolloutID, startedAt.Format(time.RFC3339Nano), w.RestoreID, w.CheckpointID, set,
		w.Before.Format(time.RFC3339Nano)), ErrFencedByRestore, nil, w)
}

// setupChainStart notes when the run's chain started: the first run of an
// attempt's chain, and the first run a restore starts (held for its
// checkpoint: a new chain, whatever the record's input carried). A
// continue-as-new and a group retry carry it on. The seed checks it against
// the set's fence record (StartEnvironment does, in the worker, with no
// history event of its own): once per chain, before its first environment
// call.
func (r *rollout) setupChainStart(ctx workflow.Context) {
	if r.in.Set == "" {
		return
	}
	if r.in.StartedAt == nil || r.in.HoldFor != "" {
		started := workflow.GetInfo(ctx).WorkflowStartTime
		r.in.StartedAt = &started
	}
}

// applicationMessage is err's application error message, without the
// "(type: …, retryable: …)" suffix; err's text when it holds none.
func applicationMessage(err error) string {
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) {
		return ae.Message()
	}
	return err.Error()
}
