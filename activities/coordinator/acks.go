package coordinator

import (
	"context"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/internal/ackledger"
	"github.com/turnstile-rl/turnstile/internal/visibility"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// A checkpoint and the set's acknowledgement ledger (set.AckLedger): a
// result acknowledged and not yet released is still held by its rollout,
// so its park record says "held". The checkpoint holds the ledger's
// releases before it asks the members to park, and the receipts recorded
// up to then (the cut's sequence number) are in the checkpoint as
// acknowledged: their records are left out, as a rollout that completed
// before the cut is, and a restore does not offer them again. A receipt
// recorded later is after the cut: its rollout is in the checkpoint holding
// its result, and a restore of it offers the result again (the pipeline
// rolled back to before it acknowledged it).

// ackHoldMargin is how long past the checkpoint's deadline its hold of the
// releases lasts if the checkpoint never ends it (its step died).
const ackHoldMargin = time.Minute

// ackHoldDefault bounds the hold of a checkpoint without a deadline.
const ackHoldDefault = 10 * time.Minute

// ackCut is a checkpoint's hold of its set's ledger.
type ackCut struct {
	tc           client.Client
	set          string
	checkpointID string
	seq          int64
}

// holdAcks holds the releases of set's ledger for checkpointID (starting
// the ledger if it does not run, so one started meanwhile is held too) and
// returns the cut. The hold ends at the deadline plus a margin if end is
// never called.
func (c *Coordinator) holdAcks(ctx context.Context, tc client.Client, set, checkpointID string, deadline time.Time) (*ackCut, error) {
	until := deadline.Add(ackHoldMargin)
	if deadline.IsZero() {
		until = time.Now().Add(ackHoldDefault)
	}
	seq, err := ackledger.Hold(ctx, tc, c.rolloutQueue(), set, checkpointID, until)
	if err != nil {
		return nil, err
	}
	return &ackCut{tc: tc, set: set, checkpointID: checkpointID, seq: seq}, nil
}

// rolloutQueue is the rollouts' task queue, whose control plane the
// ledger runs on.
func (c *Coordinator) rolloutQueue() string {
	if c.TaskQueue != "" {
		return c.TaskQueue
	}
	return rollout.TaskQueue
}

// acknowledged returns the rollouts among records (raw park records by
// rollout id) whose held result the ledger had recorded as acknowledged by
// the cut.
func (a *ackCut) acknowledged(ctx context.Context, records map[string][]byte) (map[string]bool, error) {
	held := map[string]rollout.Receipt{}
	var ids []string
	for id, raw := range records {
		rec, err := DecodeRecord(raw)
		if err != nil || rec.Result == nil || rec.Result.Receipt == nil {
			continue // a record that does not decode fails the commit, as before
		}
		held[id] = *rec.Result.Receipt
		ids = append(ids, id)
	}
	out := map[string]bool{}
	if len(ids) == 0 {
		return out, nil
	}
	pending, err := ackledger.Acked(ctx, a.tc, a.set, ids)
	if err != nil {
		return nil, err
	}
	for id, p := range pending {
		if p.Seq <= a.seq && p.Receipt == held[id] {
			out[id] = true
		}
	}
	return out, nil
}

// end ends the hold. It runs whatever the step's outcome, so a failed step
// does not keep the releases waiting until the hold expires.
func (a *ackCut) end(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return ackledger.EndHold(ctx, a.tc, a.set, a.checkpointID)
}

// forgetRolledBack drops from the set's ledger the receipts of the
// rollouts a restore starts or fences that were recorded before its fence:
// they acknowledged results of the world the restore rolls back, and must
// not release the runs it starts (a held result the checkpoint offers
// again carries the same receipt). Receipts recorded since the fence (a
// retried step, after its runs were acknowledged) are kept. A scoped
// recovery rolls nothing back and forgets nothing. It returns how many it
// forgot.
func (c *Coordinator) forgetRolledBack(ctx context.Context, tc client.Client, rid, checkpointID string, af attemptsFile) (int, error) {
	if af.Recover != nil {
		return 0, nil
	}
	fence, err := visibility.ReadSetFence(ctx, tc, af.Set)
	if err != nil {
		return 0, err
	}
	var before time.Time
	for _, w := range fence.Windows {
		if w.RestoreID == rid && w.CheckpointID == checkpointID {
			before = w.Before
		}
	}
	if before.IsZero() {
		return 0, nil // a restore that wrote no fence (recorded before fences existed)
	}
	ids := append(append([]string{}, af.Start...), af.Fence...)
	return ackledger.Forget(ctx, tc, af.Set, ids, before)
}
