package bookkeeping

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/internal/fanout"
	"github.com/turnstile-rl/turnstile/internal/heartbeat"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
	"github.com/turnstile-rl/turnstile/workflows/set"
)

// releaseConcurrency bounds the acknowledge updates one release batch has
// in flight.
const releaseConcurrency = 64

// releaseHeartbeat is how often a release batch heartbeats (a third of its
// heartbeat timeout).
const releaseHeartbeat = 3 * time.Second

// LedgerActivities hold the activity an acknowledgement ledger releases
// its held results with. It talks to Temporal itself; register a pointer
// to it on the worker beside Activities.
type LedgerActivities struct {
	Client     client.Client
	Failpoints *failpoint.Set
}

// ReleaseAcknowledged sends each receipt's rollout its acknowledge update
// (set.ReleaseUpdateID: a release sent twice, or after a direct
// acknowledgement, applies once) and sorts the receipts by outcome. A run
// that has closed needs no release; a rollout that refuses the receipt
// holds no such result any more. Nothing else fails the activity: a
// receipt that got no answer is reported failed and sent again later.
func (a *LedgerActivities) ReleaseAcknowledged(ctx context.Context, in set.ReleaseInput) (set.ReleaseResult, error) {
	if err := rollout.ValidateSet(in.Set); err != nil {
		return set.ReleaseResult{}, rollout.BadInput("release: %v", err)
	}
	for _, rc := range in.Receipts {
		if err := set.CheckReceipt(rc); err != nil {
			return set.ReleaseResult{}, rollout.BadInput("release of set %s: %v", in.Set, err)
		}
	}
	stop := heartbeat.Every(ctx, releaseHeartbeat)
	defer stop()
	var (
		mu  sync.Mutex
		out set.ReleaseResult
	)
	err := fanout.Each(ctx, len(in.Receipts), releaseConcurrency, func(ctx context.Context, i int) error {
		rc := in.Receipts[i]
		outcome := a.release(ctx, rc)
		mu.Lock()
		defer mu.Unlock()
		switch outcome {
		case released:
			out.Released = append(out.Released, rc.RolloutID)
			a.Failpoints.Hit(failpoint.WorkerMidRelease)
		case obsolete:
			out.Obsolete = append(out.Obsolete, rc.RolloutID)
		default:
			out.Failed = append(out.Failed, rc.RolloutID)
		}
		return nil
	})
	if err != nil {
		return set.ReleaseResult{}, err
	}
	sort.Strings(out.Released)
	sort.Strings(out.Obsolete)
	sort.Strings(out.Failed)
	return out, nil
}

// releaseOutcome is what one release came to.
type releaseOutcome int

const (
	releaseFailed releaseOutcome = iota
	released
	obsolete
)

// release sends rc's rollout its acknowledge update and waits for the
// outcome.
func (a *LedgerActivities) release(ctx context.Context, rc rollout.Receipt) releaseOutcome {
	h, err := a.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   rollout.WorkflowID(rc.RolloutID),
		UpdateID:     set.ReleaseUpdateID(rc),
		UpdateName:   rollout.UpdateAcknowledge,
		Args:         []any{rollout.AckRequest{Receipt: rc}},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		err = h.Get(ctx, nil)
	}
	var (
		nf *serviceerror.NotFound
		ae *temporal.ApplicationError
	)
	switch {
	case err == nil, errors.As(err, &nf):
		return released
	case errors.As(err, &ae):
		return obsolete // the rollout itself refused it
	}
	return releaseFailed
}
