// Package set holds the workflows that keep a set's own records; today the
// set's fence record (SetFence), which says which runs of the set a restore
// rolled back.
package set

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
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
	// MemoSetFence is the memo field holding the record.
	MemoSetFence = "set_fence"
	// MaxFenceWindows bounds the windows a record keeps (the newest); a
	// restore beyond that drops the oldest window, whose runs have long
	// been superseded.
	MaxFenceWindows  = 256
	setFenceIDPrefix = "fence/"
)

// The fence record is read through a cache in each worker, so that seeding
// the rollouts of a set costs no Temporal round trip each: a worker answers
// from a record it read less than FenceReadTTL ago (measured from when the
// read was sent). A restore waits FenceSettle after it wrote its fence,
// before it installs, terminates, starts or resumes anything, so every
// answer a worker can still give from a record read before the fence has
// expired by then, with FenceSettle - FenceReadTTL to spare for the seed
// request the check precedes to reach its environment server.
const (
	FenceReadTTL = time.Second
	FenceSettle  = 3 * time.Second
)

// SetFenceWorkflowID is the workflow ID holding set's fence record.
func SetFenceWorkflowID(set string) string { return setFenceIDPrefix + set }

// SetFence is a set's fence record: its restores' windows, oldest first.
type SetFence struct {
	Set     string                `json:"set"`
	Windows []rollout.FenceWindow `json:"windows"`
}

// Latest is the newest restore's window.
func (f SetFence) Latest() (rollout.FenceWindow, bool) {
	if len(f.Windows) == 0 {
		return rollout.FenceWindow{}, false
	}
	return f.Windows[len(f.Windows)-1], true
}

// FencesRun says whether a rollout whose run chain (its attempt, continued
// as new or not) started at startedAt may not go on: every run the set
// keeps after a restore was started by the restore or after it, so a run
// started no later than the newest fence is of a world rolled back.
func (f SetFence) FencesRun(startedAt time.Time) (rollout.FenceWindow, bool) {
	w, ok := f.Latest()
	if !ok || startedAt.After(w.Before) {
		return rollout.FenceWindow{}, false
	}
	return w, true
}

// FencesResult says whether a finished run that started at startedAt is of
// a rolled-back world: it started inside one restore's window. A run that
// started before a window ended before that restore's cut, or was in its
// checkpoint and replaced by a later attempt; its result stands.
func (f SetFence) FencesResult(startedAt time.Time) (rollout.FenceWindow, bool) {
	for i := len(f.Windows) - 1; i >= 0; i-- {
		w := f.Windows[i]
		if startedAt.After(w.From) && !startedAt.After(w.Before) {
			return w, true
		}
	}
	return rollout.FenceWindow{}, false
}

// SetFenceWorkflow holds a set's fence record in its memo (set when it is
// started) and runs until the next restore of the set replaces it. It does
// nothing: it only has to stay running.
func SetFenceWorkflow(ctx workflow.Context, f SetFence) error {
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("fence record of set %s: %d restores", f.Set, len(f.Windows)))
	return workflow.Await(ctx, func() bool { return false })
}
