package rollout

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// A held result is readable without a workflow task: with
// Input.ResultInStore, the run stores the result in the transcript store
// (a local activity, so no task-queue round trip) before it upserts its
// phase awaiting_ack, and names it in that same upsert (SARolloutReceipt,
// the digest it is stored under, which is its receipt's SHA256). A reader
// lists the held runs, reads each result from the store, checks its digest
// and has the receipt from RolloutId, RolloutAttempt and RolloutReceipt:
// no status query reaches the busy rollout queue. Runs started without the
// flag upsert no receipt and are read by their query, as before.

// storeResultOptions are StoreResult's: a few quick tries. A result it
// could not store is published without its receipt (readers fall back
// to the run's query), so the rollout never waits on the store.
var storeResultOptions = workflow.LocalActivityOptions{
	StartToCloseTimeout: 30 * time.Second,
	RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 3},
	Summary:             "store the held result",
}

// storeResult stores res, when the input asks for it, and keeps the digest
// it is stored under for the upsert of awaiting_ack.
func (r *rollout) storeResult(ctx workflow.Context, res Result) {
	if !r.in.ResultInStore || res.Receipt == nil {
		return
	}
	lctx := workflow.WithLocalActivityOptions(ctx, storeResultOptions)
	if err := workflow.ExecuteLocalActivity(lctx, StoreResultName, StoreResultInput{Result: res}).Get(ctx, nil); err != nil {
		r.logger.Warn("held result not stored; readers query the run for it", "error", err)
		return
	}
	r.stored = res.Receipt.SHA256
}
