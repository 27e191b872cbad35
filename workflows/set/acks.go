package set

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// releaseOptions are a release batch's: one try (the ledger's loop sends a
// failed batch again after a backoff, so a hold never waits behind a
// Temporal retry), and a heartbeat that finds a dead worker quickly.
var releaseOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 2 * time.Minute,
	HeartbeatTimeout:    10 * time.Second,
	RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
	Summary:             "release acknowledged results",
}

// Backoff of a release batch that failed, doubling from the first to the
// most.
const (
	firstReleaseBackoff = time.Second
	maxReleaseBackoff   = 30 * time.Second
)

// AckLedger is a set's acknowledgement ledger (see AckLedgerWorkflowID):
// it records batches of receipts, answers which are recorded and not yet
// released, and releases them in batches through ReleaseAcknowledged,
// except while a checkpoint holds the releases.
func AckLedger(ctx workflow.Context, in AckLedgerInput) error {
	l, err := newAckLedger(in)
	if err != nil {
		return temporal.NewNonRetryableApplicationError("invalid ack ledger input: "+err.Error(), rollout.ErrInvalidInput, nil)
	}
	if err := l.register(ctx); err != nil {
		return err
	}
	for {
		now := workflow.Now(ctx)
		l.dropExpiredHolds(now)
		l.publish(ctx)
		if workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
				return err
			}
			return workflow.NewContinueAsNewError(ctx, AckLedgerWorkflowName, l.carry())
		}
		if batch := l.nextBatch(now); len(batch) > 0 {
			l.release(ctx, batch)
			continue
		}
		l.changed = false
		news, err := workflow.AwaitWithTimeout(ctx, l.wake(now), func() bool {
			return l.changed || workflow.GetInfo(ctx).GetContinueAsNewSuggested()
		})
		if err != nil {
			return err
		}
		if !news && l.idle() && workflow.AllHandlersFinished(ctx) {
			return nil
		}
	}
}

// ackLedger is a ledger run's state.
type ackLedger struct {
	set   string
	batch int
	// pending are the receipts not yet released, in recording order;
	// byID indexes them by rollout id (one receipt per rollout).
	pending []PendingAck
	byID    map[string]int
	holds   []ReleaseHold
	seq     int64
	// released are the receipts this run released lately, the oldest
	// first (at most MaxRecentReleased); releasedByID indexes them.
	released     []rollout.Receipt
	releasedByID map[string]rollout.Receipt
	// releasing: a release batch is in flight; waiting counts handlers
	// waiting for it to end (no new batch starts meanwhile).
	releasing bool
	waiting   int
	// failures counts release batches failed in a row; retryAt is when
	// the next may start.
	failures int
	retryAt  time.Time
	// changed: a handler changed something since the loop last looked.
	changed bool
	// shown is the summary last set.
	shown string
}

func newAckLedger(in AckLedgerInput) (*ackLedger, error) {
	if err := rollout.ValidateSet(in.Set); err != nil {
		return nil, err
	}
	switch {
	case in.ReleaseBatch < 0 || in.ReleaseBatch > MaxReleaseBatch:
		return nil, fmt.Errorf("release batch %d is outside 0..%d", in.ReleaseBatch, MaxReleaseBatch)
	case len(in.Pending) > MaxPendingAcks:
		return nil, fmt.Errorf("%d pending receipts: at most %d", len(in.Pending), MaxPendingAcks)
	}
	l := &ackLedger{set: in.Set, batch: in.ReleaseBatch, holds: in.Holds, seq: in.Seq, byID: map[string]int{}, releasedByID: map[string]rollout.Receipt{}}
	if l.batch == 0 {
		l.batch = DefaultReleaseBatch
	}
	for _, p := range in.Pending {
		if err := CheckReceipt(p.Receipt); err != nil {
			return nil, fmt.Errorf("pending receipt: %w", err)
		}
		if _, dup := l.byID[p.Receipt.RolloutID]; dup {
			return nil, fmt.Errorf("pending receipts name rollout %s twice", p.Receipt.RolloutID)
		}
		l.byID[p.Receipt.RolloutID] = len(l.pending)
		l.pending = append(l.pending, p)
	}
	return l, nil
}

func (l *ackLedger) register(ctx workflow.Context) error {
	if err := workflow.SetQueryHandlerWithOptions(ctx, QueryAcked, l.acked, workflow.QueryHandlerOptions{
		Description: "the receipts recorded and not yet released of the rollouts named (all without names)",
	}); err != nil {
		return err
	}
	if err := workflow.SetQueryHandlerWithOptions(ctx, QuerySettled, l.settled, workflow.QueryHandlerOptions{
		Description: "the receipts of the rollouts named acknowledged here: pending, or released lately",
	}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateRecordAcks,
		func(ctx workflow.Context, b AckBatch) (AckBatchResult, error) { return l.record(ctx, b), nil },
		workflow.UpdateHandlerOptions{Validator: l.validateBatch, Description: "record a batch of acknowledged receipts"}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateHoldReleases, l.hold, workflow.UpdateHandlerOptions{
		Validator:   func(h ReleaseHold) error { return checkHold(h.CheckpointID) },
		Description: "stop releases for a checkpoint; answers the sequence number of its cut",
	}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateEndHold, l.endHold, workflow.UpdateHandlerOptions{
		Validator:   func(h EndHold) error { return checkHold(h.CheckpointID) },
		Description: "end a checkpoint's hold of the releases",
	}); err != nil {
		return err
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, UpdateForgetAcks, l.forget, workflow.UpdateHandlerOptions{
		Description: "drop the pending receipts of a restore's rollouts recorded before its fence",
	})
}

func checkHold(checkpointID string) error {
	if checkpointID == "" {
		return errors.New("checkpoint_id is required")
	}
	return nil
}

// validateBatch refuses, without writing history, a malformed batch or one
// the ledger has no room for.
func (l *ackLedger) validateBatch(b AckBatch) error {
	if err := b.Validate(l.set); err != nil {
		return err
	}
	fresh := 0
	for _, rc := range b.Receipts {
		if _, ok := l.byID[rc.RolloutID]; !ok {
			fresh++
		}
	}
	if len(l.pending)+fresh > MaxPendingAcks {
		return temporal.NewApplicationError(fmt.Sprintf(
			"the acknowledgement ledger of set %s holds %d receipts not yet released (at most %d): send the batch again once they are",
			l.set, len(l.pending), MaxPendingAcks), ErrLedgerFull)
	}
	return nil
}

// record adds a batch's receipts. A rollout's receipt recorded before
// counts as already recorded, pending or released lately by this run (a
// reader that planned it from a listing taken before the release is not
// answered with a second acknowledgement, nor is it released twice);
// another receipt of the same rollout (a later attempt's result) replaces
// it.
func (l *ackLedger) record(ctx workflow.Context, b AckBatch) AckBatchResult {
	now := workflow.Now(ctx)
	var res AckBatchResult
	for _, rc := range b.Receipts {
		i, ok := l.byID[rc.RolloutID]
		if ok && l.pending[i].Receipt == rc || !ok && l.releasedByID[rc.RolloutID] == rc {
			res.Already++
			continue
		}
		l.seq++
		entry := PendingAck{Receipt: rc, Seq: l.seq, At: now}
		if ok {
			l.pending = append(l.pending[:i], l.pending[i+1:]...)
			l.reindex()
		}
		l.byID[rc.RolloutID] = len(l.pending)
		l.pending = append(l.pending, entry)
		res.Recorded++
	}
	l.changed = true
	res.Pending, res.Seq = len(l.pending), l.seq
	return res
}

// acked answers QueryAcked.
func (l *ackLedger) acked(ids []string) ([]PendingAck, error) {
	if len(ids) == 0 {
		return append([]PendingAck{}, l.pending...), nil
	}
	var idx []int
	for _, id := range ids {
		if i, ok := l.byID[id]; ok {
			idx = append(idx, i)
		}
	}
	sort.Ints(idx)
	out := make([]PendingAck, 0, len(idx))
	for k, i := range idx {
		if k == 0 || idx[k-1] != i {
			out = append(out, l.pending[i])
		}
	}
	return out, nil
}

// settled answers QuerySettled: the pending or lately released receipts of
// ids, in the order of ids.
func (l *ackLedger) settled(ids []string) ([]rollout.Receipt, error) {
	out := []rollout.Receipt{}
	for _, id := range ids {
		if i, ok := l.byID[id]; ok {
			out = append(out, l.pending[i].Receipt)
		} else if rc, ok := l.releasedByID[id]; ok {
			out = append(out, rc)
		}
	}
	return out, nil
}

// remember keeps rc as released lately, forgetting the oldest beyond
// MaxRecentReleased.
func (l *ackLedger) remember(rc rollout.Receipt) {
	l.released = append(l.released, rc)
	l.releasedByID[rc.RolloutID] = rc
	if len(l.released) > MaxRecentReleased {
		old := l.released[0]
		l.released = l.released[1:]
		if l.releasedByID[old.RolloutID] == old {
			delete(l.releasedByID, old.RolloutID)
		}
	}
}

// hold stops releases for h's checkpoint once no release is in flight and
// answers the sequence number of its cut.
func (l *ackLedger) hold(ctx workflow.Context, h ReleaseHold) (ReleaseHoldResult, error) {
	if err := l.awaitNoRelease(ctx); err != nil {
		return ReleaseHoldResult{}, err
	}
	l.changed = true
	for i := range l.holds {
		if l.holds[i].CheckpointID == h.CheckpointID {
			if h.Until.After(l.holds[i].Until) {
				l.holds[i].Until = h.Until
			}
			return ReleaseHoldResult{Seq: l.holds[i].Seq}, nil
		}
	}
	h.Seq = l.seq
	l.holds = append(l.holds, h)
	return ReleaseHoldResult{Seq: h.Seq}, nil
}

func (l *ackLedger) endHold(_ workflow.Context, e EndHold) error {
	kept := l.holds[:0]
	for _, h := range l.holds {
		if h.CheckpointID != e.CheckpointID {
			kept = append(kept, h)
		}
	}
	l.holds = kept
	l.changed = true
	return nil
}

// forget drops, once no release is in flight, the pending receipts of the
// rollouts named recorded before f.RecordedBefore.
func (l *ackLedger) forget(ctx workflow.Context, f ForgetAcks) (ForgetAcksResult, error) {
	if err := l.awaitNoRelease(ctx); err != nil {
		return ForgetAcksResult{}, err
	}
	names := map[string]bool{}
	for _, id := range f.RolloutIDs {
		names[id] = true
	}
	kept := l.pending[:0]
	n := 0
	for _, p := range l.pending {
		if names[p.Receipt.RolloutID] && p.At.Before(f.RecordedBefore) {
			n++
			continue
		}
		kept = append(kept, p)
	}
	l.pending = kept
	l.reindex()
	l.changed = true
	return ForgetAcksResult{Forgotten: n}, nil
}

// awaitNoRelease waits until no release batch is in flight; no new one
// starts while a handler waits.
func (l *ackLedger) awaitNoRelease(ctx workflow.Context) error {
	l.waiting++
	l.changed = true
	defer func() { l.waiting-- }()
	return workflow.Await(ctx, func() bool { return !l.releasing })
}

func (l *ackLedger) reindex() {
	l.byID = make(map[string]int, len(l.pending))
	for i, p := range l.pending {
		l.byID[p.Receipt.RolloutID] = i
	}
}

func (l *ackLedger) dropExpiredHolds(now time.Time) {
	kept := l.holds[:0]
	for _, h := range l.holds {
		if h.Until.After(now) {
			kept = append(kept, h)
		}
	}
	l.holds = kept
}

// nextBatch is the oldest pending receipts, when a release may start now.
func (l *ackLedger) nextBatch(now time.Time) []rollout.Receipt {
	if len(l.pending) == 0 || len(l.holds) > 0 || l.waiting > 0 || now.Before(l.retryAt) {
		return nil
	}
	n := min(l.batch, len(l.pending))
	out := make([]rollout.Receipt, n)
	for i := range n {
		out[i] = l.pending[i].Receipt
	}
	return out
}

// release runs one release batch and drops what it released or found
// obsolete; a failure backs off before the next.
func (l *ackLedger) release(ctx workflow.Context, batch []rollout.Receipt) {
	l.releasing = true
	defer func() { l.releasing = false }()
	var res ReleaseResult
	actx := workflow.WithActivityOptions(ctx, releaseOptions)
	err := workflow.ExecuteActivity(actx, ReleaseAcknowledgedName, ReleaseInput{Set: l.set, Receipts: batch}).Get(ctx, &res)
	if err != nil {
		workflow.GetLogger(ctx).Warn("release batch failed; it is sent again", "receipts", len(batch), "error", err)
		l.backoff(ctx)
		return
	}
	sent := make(map[string]rollout.Receipt, len(batch))
	for _, rc := range batch {
		sent[rc.RolloutID] = rc
	}
	done := map[string]bool{}
	for k, id := range append(append([]string{}, res.Released...), res.Obsolete...) {
		if rc, ok := sent[id]; ok {
			if i, ok := l.byID[id]; ok && l.pending[i].Receipt == rc {
				done[id] = true // not replaced by another receipt meanwhile
				if k < len(res.Released) {
					l.remember(rc)
				}
			}
		}
	}
	if len(done) > 0 {
		kept := l.pending[:0]
		for _, p := range l.pending {
			if !done[p.Receipt.RolloutID] {
				kept = append(kept, p)
			}
		}
		l.pending = kept
		l.reindex()
	}
	if len(res.Failed) > 0 {
		l.backoff(ctx)
		return
	}
	l.failures, l.retryAt = 0, time.Time{}
}

func (l *ackLedger) backoff(ctx workflow.Context) {
	l.failures++
	d := firstReleaseBackoff << min(l.failures-1, 5)
	l.retryAt = workflow.Now(ctx).Add(min(d, maxReleaseBackoff))
}

// wake is how long the loop may wait for news: until a backoff ends or a
// hold expires, or the idle time.
func (l *ackLedger) wake(now time.Time) time.Duration {
	d := AckLedgerIdle
	if len(l.pending) > 0 && l.retryAt.After(now) {
		d = min(d, l.retryAt.Sub(now))
	}
	for _, h := range l.holds {
		d = min(d, h.Until.Sub(now))
	}
	return max(d, time.Millisecond)
}

// idle: nothing pending, no hold, nobody waiting.
func (l *ackLedger) idle() bool {
	return len(l.pending) == 0 && len(l.holds) == 0 && l.waiting == 0
}

func (l *ackLedger) carry() AckLedgerInput {
	return AckLedgerInput{Set: l.set, ReleaseBatch: l.batch, Pending: l.pending, Holds: l.holds, Seq: l.seq}
}

// publish shows what the ledger holds in the Web UI (no history event).
func (l *ackLedger) publish(ctx workflow.Context) {
	s := fmt.Sprintf("**%d** acknowledged results waiting to be released; %d recorded in all", len(l.pending), l.seq)
	if len(l.holds) > 0 {
		s += fmt.Sprintf("; releases held for checkpoint %s", l.holds[0].CheckpointID)
	}
	if s != l.shown {
		workflow.SetCurrentDetails(ctx, s)
		l.shown = s
	}
}
