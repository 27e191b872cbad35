package trainer

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"go.temporal.io/api/serviceerror"
	tclient "go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/internal/fanout"
)

// rolloutUpdate is one update for sendUpdates.
type rolloutUpdate struct {
	Label      string // names the rollout in a failure
	WorkflowID string
	UpdateID   string
	Name       string
	Arg        any
}

// updateOutcome counts what sendUpdates did.
type updateOutcome struct {
	Accepted int      // updates the rollout accepted
	Closed   int      // rollouts that closed before the update reached them
	Failed   []string // "<label>: <error>" of every failed update, sorted
}

// sendUpdates sends every update with bounded concurrency and collects
// every failure, not only the first. The error is the context's: the
// outcome then counts only the updates sent before it ended.
func sendUpdates(ctx context.Context, upd workflowUpdater, ups []rolloutUpdate) (updateOutcome, error) {
	var (
		mu  sync.Mutex
		out updateOutcome
	)
	err := fanout.Each(ctx, len(ups), updateConcurrency, func(ctx context.Context, i int) error {
		u := ups[i]
		closed, err := sendUpdate(ctx, upd, u)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			out.Failed = append(out.Failed, fmt.Sprintf("%s: %v", u.Label, err))
		case closed:
			out.Closed++
		default:
			out.Accepted++
		}
		return nil
	})
	sort.Strings(out.Failed)
	return out, err
}

// sendUpdate sends update name to the current run of workflowID and waits
// for its outcome. closed reports a workflow that had already closed (it
// needs no update any more). updateID makes a retried update a no-op.
func sendUpdate(ctx context.Context, upd workflowUpdater, u rolloutUpdate) (closed bool, err error) {
	h, err := upd.UpdateWorkflow(ctx, tclient.UpdateWorkflowOptions{
		WorkflowID:   u.WorkflowID,
		UpdateID:     u.UpdateID,
		UpdateName:   u.Name,
		Args:         []any{u.Arg},
		WaitForStage: tclient.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		err = h.Get(ctx, nil)
	}
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return true, nil
	}
	return false, err
}
