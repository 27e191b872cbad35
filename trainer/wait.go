package trainer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	tclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/internal/fanout"
	"github.com/turnstile-rl/turnstile/internal/sleep"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// waitConcurrency bounds concurrent result long-polls.
const waitConcurrency = 128

// visibilityPoll is how often the waits that poll visibility ask again.
const visibilityPoll = 200 * time.Millisecond

// Wait waits until every rollout of r has closed and visibility shows it
// (so a listing that follows counts them all), or, with r.RequireAck, until
// every rollout holds its result for acknowledgement or has closed. Bound
// it with ctx.
func (c *Client) Wait(ctx context.Context, r WaitRequest) error {
	bar := r.Progress
	if bar == nil {
		bar = noProgress{}
	}
	if r.RequireAck {
		// Held results keep their runs open: wait until every rollout
		// holds one (or has closed), not until all close.
		if err := awaitHeld(ctx, c.tc, r.Set, len(r.Inputs), bar); err != nil {
			return fmt.Errorf("wait for set %s: %w", r.Set, err)
		}
		return nil
	}
	if err := waitAll(ctx, c.tc, r.Inputs, bar); err != nil {
		return fmt.Errorf("wait for set %s: %w", r.Set, err)
	}
	if err := awaitVisibility(ctx, c.tc, r.Set); err != nil {
		return fmt.Errorf("wait for set %s in visibility: %w", r.Set, err)
	}
	return nil
}

type noProgress struct{}

func (noProgress) Increment()  {}
func (noProgress) Finish(bool) {}

// runGetter is the part of client.Client that follows a workflow to its
// end.
type runGetter interface {
	GetWorkflow(ctx context.Context, workflowID string, runID string) tclient.WorkflowRun
}

// waitAll waits until every rollout's workflow ID has closed (following new
// runs and attempts), counting each on bar. A rollout its set's admission
// has not started yet is waited for until it starts.
func waitAll(ctx context.Context, c runGetter, inputs []rollout.Input, bar Progress) error {
	err := fanout.Each(ctx, len(inputs), waitConcurrency, func(ctx context.Context, i int) error {
		for {
			err := c.GetWorkflow(ctx, rollout.WorkflowID(inputs[i].RolloutID), "").Get(ctx, nil)
			var wee *temporal.WorkflowExecutionError
			var nf *serviceerror.NotFound
			switch {
			case errors.As(err, &nf):
				if err := sleep.For(ctx, queuedPoll); err != nil {
					return err
				}
				continue // queued: not started yet
			case err != nil && !errors.As(err, &wee):
				return fmt.Errorf("rollout %s: %w", inputs[i].RolloutID, err)
			}
			bar.Increment() // completed or failed: closed either way
			return nil
		}
	})
	bar.Finish(err == nil)
	return err
}

// queuedPoll is how often a wait looks again for a rollout still queued.
const queuedPoll = time.Second

// workflowCounter is the counting part of client.Client.
type workflowCounter interface {
	CountWorkflow(ctx context.Context, req *workflowservice.CountWorkflowExecutionsRequest) (*workflowservice.CountWorkflowExecutionsResponse, error)
}

// awaitVisibility waits until visibility, which lags the workflows, no longer
// lists a running rollout of set, so the summary that follows counts them all.
func awaitVisibility(ctx context.Context, c workflowCounter, set string) error {
	q := rollout.SetQuery(set) + ` AND ExecutionStatus="Running"`
	t := time.NewTicker(visibilityPoll)
	defer t.Stop()
	for {
		resp, err := c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: q})
		if err != nil {
			return err
		}
		if resp.GetCount() == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// heldQuery matches the rollouts of set still working towards a result: open
// and not holding one for acknowledgement.
func heldQuery(set string) string {
	return fmt.Sprintf(`%s AND ExecutionStatus="Running" AND %s!=%q`, rollout.SetQuery(set), rollout.SARolloutPhase, rollout.PhaseAwaitingAck)
}

// awaitHeld waits (polling visibility) until none of the total rollouts of
// set is still working: each holds its result for acknowledgement or has
// closed. Visibility lags the starts, so a count is trusted only once the
// set is listed whole. Progress counts the rollouts done.
func awaitHeld(ctx context.Context, c workflowCounter, set string, total int, bar Progress) error {
	count := func(q string) (int, error) {
		resp, err := c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: q})
		return int(resp.GetCount()), err
	}
	t := time.NewTicker(visibilityPoll)
	defer t.Stop()
	shown := 0
	for {
		listed, err := count(rollout.SetQuery(set))
		if err != nil {
			bar.Finish(false)
			return err
		}
		working, err := count(heldQuery(set))
		if err != nil {
			bar.Finish(false)
			return err
		}
		if listed >= total {
			for ; shown < total-working; shown++ {
				bar.Increment()
			}
			if working == 0 {
				bar.Finish(true)
				return nil
			}
		}
		select {
		case <-ctx.Done():
			bar.Finish(false)
			return ctx.Err()
		case <-t.C:
		}
	}
}
