package trainer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	tclient "go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
)

// AutoRecover turns on automatic recovery for a set: a watchdog workflow
// (watchdog/<set>, on the control task queue) probes each of Participants
// every Every and, after Misses unanswered probes in a row and at least
// Bound since a server's last answer, moves the rollouts it held to a
// replacement by scoped recovery (RecoverServer) from the newest committed
// checkpoint of the set under Root. Zero durations and Misses take the
// defaults (checkpoint.DefaultWatch*). Manual RecoverServer stays.
type AutoRecover struct {
	// Participants are the environment servers the set's rollouts use,
	// by base URL.
	Participants []string `json:"participants"`
	// Standby are idle servers the operator registered, taken in order as
	// replacements (one per server name that may die). With none left, the
	// replacement is the dead server's address once it answers again.
	Standby []string `json:"standby,omitempty"`
	// Root is the checkpoint root (made absolute against the working
	// directory), or a storage URL.
	Root    string        `json:"root"`
	Every   time.Duration `json:"every,omitempty"`
	Timeout time.Duration `json:"timeout,omitempty"`
	Misses  int           `json:"misses,omitempty"`
	Bound   time.Duration `json:"bound,omitempty"`
}

// WatchdogInput turns a into the set's watchdog input (root made absolute
// against cwd); the error names what was wrong.
func (a AutoRecover) WatchdogInput(set, cwd, taskQueue string) (checkpoint.WatchdogInput, error) {
	root, err := absRoot(a.Root, cwd)
	if err != nil {
		return checkpoint.WatchdogInput{}, fmt.Errorf("auto_recover: %w", err)
	}
	dur := func(d time.Duration) string {
		if d == 0 {
			return ""
		}
		return d.String()
	}
	in := checkpoint.WatchdogInput{Set: set, Participants: a.Participants, Standby: a.Standby, Root: root, TaskQueue: taskQueue,
		Settings: checkpoint.WatchSettings{Every: dur(a.Every), Timeout: dur(a.Timeout), Misses: a.Misses, Bound: dur(a.Bound)}}
	if err := in.Validate(); err != nil {
		return checkpoint.WatchdogInput{}, fmt.Errorf("auto_recover: %w", err)
	}
	return in, nil
}

// StartWatchdog starts set's watchdog with the settings a and returns at
// once. A watchdog already running for the set is joined (its settings
// stay); one that ended is started again.
func (c *Client) StartWatchdog(ctx context.Context, set string, a AutoRecover) (Started, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return Started{}, fmt.Errorf("working directory: %w", err)
	}
	in, err := a.WatchdogInput(set, cwd, c.taskQueue)
	if err != nil {
		return Started{}, err
	}
	opts := tclient.StartWorkflowOptions{
		ID:                       checkpoint.WatchdogWorkflowID(set),
		TaskQueue:                checkpoint.ControlTaskQueue(c.taskQueue),
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		StaticSummary:            fmt.Sprintf("watch the environment servers of set %s and recover a dead one's rollouts", set),
	}
	started := Started{WorkflowID: opts.ID, TaskQueue: opts.TaskQueue}
	run, err := c.tc.ExecuteWorkflow(ctx, opts, checkpoint.WatchdogWorkflowName, in)
	if err != nil {
		return started, fmt.Errorf("start %s: %w", opts.ID, err)
	}
	started.RunID = run.GetRunID()
	if c.OnStart != nil {
		c.OnStart(started)
	}
	return started, nil
}

// StopWatchdog ends set's watchdog; recoveries it started run on. A set
// with no running watchdog is not an error.
func (c *Client) StopWatchdog(ctx context.Context, set string) error {
	err := c.tc.SignalWorkflow(ctx, checkpoint.WatchdogWorkflowID(set), "", checkpoint.SignalStopWatchdog, nil)
	var nf *serviceerror.NotFound
	if err != nil && !errors.As(err, &nf) {
		return fmt.Errorf("stop the watchdog of set %s: %w", set, err)
	}
	return nil
}

// WatchdogStatus is what set's watchdog knows (its servers, what it
// declared dead and recovered); ok is false when the set has none.
func (c *Client) WatchdogStatus(ctx context.Context, set string) (checkpoint.WatchdogStatus, bool, error) {
	var st checkpoint.WatchdogStatus
	v, err := c.tc.QueryWorkflow(ctx, checkpoint.WatchdogWorkflowID(set), "", checkpoint.QueryWatchdogStatus)
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return st, false, nil
	}
	if err != nil {
		return st, false, fmt.Errorf("query the watchdog of set %s: %w", set, err)
	}
	if err := v.Get(&st); err != nil {
		return st, false, fmt.Errorf("decode the watchdog status of set %s: %w", set, err)
	}
	return st, true, nil
}
