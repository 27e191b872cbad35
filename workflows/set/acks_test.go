package set_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
	"github.com/turnstile-rl/turnstile/workflows/set"
)

func receipt(id string, c byte) rollout.Receipt {
	return rollout.Receipt{RolloutID: id, SHA256: strings.Repeat(string(c), 64)}
}

// releaser stands in for the ReleaseAcknowledged activity: it records each
// batch and releases it, or fails it while fail says so.
type releaser struct {
	mu      sync.Mutex
	batches [][]string
	// fail fails the next n batches; obsolete names rollouts that refuse.
	fail     int
	obsolete map[string]bool
	// gate, when set, holds each batch until it is closed.
	gate chan struct{}
}

func (r *releaser) release(_ context.Context, in set.ReleaseInput) (set.ReleaseResult, error) {
	if r.gate != nil {
		<-r.gate
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []string
	var out set.ReleaseResult
	for _, rc := range in.Receipts {
		ids = append(ids, rc.RolloutID)
		if r.obsolete[rc.RolloutID] {
			out.Obsolete = append(out.Obsolete, rc.RolloutID)
		} else {
			out.Released = append(out.Released, rc.RolloutID)
		}
	}
	r.batches = append(r.batches, ids)
	if r.fail > 0 {
		r.fail--
		return set.ReleaseResult{}, errors.New("worker gone")
	}
	return out, nil
}

func (r *releaser) seen() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprint(r.batches)
}

func newLedgerRun(t *testing.T, r *releaser) *ledgerRun {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	// Wall time: a run of 10,000 receipts under -race on a loaded machine
	// takes more than the default few seconds.
	env.SetTestTimeout(2 * time.Minute)
	env.RegisterWorkflowWithOptions(set.AckLedger, workflow.RegisterOptions{Name: set.AckLedgerWorkflowName})
	env.RegisterActivityWithOptions(r.release, activity.RegisterOptions{Name: set.ReleaseAcknowledgedName})
	return &ledgerRun{t: t, env: env}
}

// ledgerRun drives one ledger run: updates and queries at offsets after
// its start, their outcomes in got, in order.
type ledgerRun struct {
	t   *testing.T
	env *testsuite.TestWorkflowEnvironment
	got []string
	n   int // updates sent, for their ids
}

// update sends an update at offset and records its outcome.
func (l *ledgerRun) update(at time.Duration, name string, arg any) {
	l.n++
	id := fmt.Sprintf("%s-%d", name, l.n)
	l.env.RegisterDelayedCallback(func() {
		l.env.UpdateWorkflow(name, id, &testsuite.TestUpdateCallback{
			OnAccept: func() {},
			OnReject: func(err error) { l.got = append(l.got, fmt.Sprintf("%s rejected: %v", name, err)) },
			OnComplete: func(v any, err error) {
				if err != nil {
					l.got = append(l.got, fmt.Sprintf("%s failed: %v", name, err))
					return
				}
				l.got = append(l.got, fmt.Sprintf("%s %+v", name, v))
			},
		}, arg)
	}, at+time.Millisecond)
}

// acked reads the ledger's pending rollout ids (with their sequence
// numbers) at offset.
func (l *ledgerRun) acked(at time.Duration) {
	l.env.RegisterDelayedCallback(func() {
		v, err := l.env.QueryWorkflow(set.QueryAcked, []string(nil))
		require.NoError(l.t, err)
		var pending []set.PendingAck
		require.NoError(l.t, v.Get(&pending))
		var ids []string
		for _, p := range pending {
			ids = append(ids, fmt.Sprintf("%s#%d", p.Receipt.RolloutID, p.Seq))
		}
		l.got = append(l.got, fmt.Sprintf("pending %v", ids))
	}, at+2*time.Millisecond)
}

// settled reads which of ids the ledger knows acknowledged at offset.
func (l *ledgerRun) settled(at time.Duration, ids ...string) {
	l.env.RegisterDelayedCallback(func() {
		v, err := l.env.QueryWorkflow(set.QuerySettled, ids)
		require.NoError(l.t, err)
		var rcs []rollout.Receipt
		require.NoError(l.t, v.Get(&rcs))
		var got []string
		for _, rc := range rcs {
			got = append(got, rc.RolloutID+"/"+rc.SHA256[:1])
		}
		l.got = append(l.got, fmt.Sprintf("settled %v", got))
	}, at+2*time.Millisecond)
}

// run runs the ledger from in until it closes (idle).
func (l *ledgerRun) run(in set.AckLedgerInput) []string {
	l.env.ExecuteWorkflow(set.AckLedgerWorkflowName, in)
	require.True(l.t, l.env.IsWorkflowCompleted())
	require.NoError(l.t, l.env.GetWorkflowError(), "an idle ledger closes")
	return l.got
}

// A batch is recorded in one update and answered at once; a receipt sent
// again counts as already recorded; the ledger then releases the batch and
// holds nothing; idle, it closes.
func TestAckLedgerRecordsThenReleases(t *testing.T) {
	r := &releaser{gate: make(chan struct{})}
	l := newLedgerRun(t, r)
	l.env.RegisterDelayedCallback(func() { close(r.gate) }, 10*time.Millisecond) // after the first read
	a, b := receipt("s1-a", 'a'), receipt("s1-b", 'b')
	l.update(0, set.UpdateRecordAcks, set.AckBatch{Set: "s1", Receipts: []rollout.Receipt{a, b}})
	l.update(0, set.UpdateRecordAcks, set.AckBatch{Set: "s1", Receipts: []rollout.Receipt{b}})
	l.acked(0)
	l.acked(time.Minute)
	got := l.run(set.AckLedgerInput{Set: "s1"})
	assert.Equal(t, []string{
		"record-acks {Recorded:2 Already:0 Pending:2 Seq:2}",
		"record-acks {Recorded:0 Already:1 Pending:2 Seq:2}",
		"pending [s1-a#1 s1-b#2]",
		"pending []",
	}, got)
	assert.Equal(t, "[[s1-a s1-b]]", r.seen(), "one release batch")
}

// A receipt acknowledged again after the ledger released it (a plan made
// from a listing taken before the release) applies once: it counts as
// already recorded, and is not released a second time.
func TestAckLedgerReleasedReceiptAppliesOnce(t *testing.T) {
	r := &releaser{gate: make(chan struct{})}
	l := newLedgerRun(t, r)
	l.env.RegisterDelayedCallback(func() { close(r.gate) }, 10*time.Millisecond)
	a, b := receipt("s1-a", 'a'), receipt("s1-b", 'b')
	l.update(0, set.UpdateRecordAcks, set.AckBatch{Set: "s1", Receipts: []rollout.Receipt{a}})
	l.update(time.Minute, set.UpdateRecordAcks, set.AckBatch{Set: "s1", Receipts: []rollout.Receipt{a, b}})
	l.acked(2 * time.Minute)
	got := l.run(set.AckLedgerInput{Set: "s1"})
	assert.Equal(t, []string{
		"record-acks {Recorded:1 Already:0 Pending:1 Seq:1}",
		"record-acks {Recorded:1 Already:1 Pending:1 Seq:2}",
		"pending []",
	}, got)
	assert.Equal(t, "[[s1-a] [s1-b]]", r.seen(), "s1-a released once")
}

// The settled query knows a receipt acknowledged while it is pending and
// after it was released (a reader that saw the result held before the
// release must not take it for unacknowledged); a rollout refused as
// obsolete, or never acknowledged, is not settled.
func TestAckLedgerSettled(t *testing.T) {
	r := &releaser{gate: make(chan struct{}), obsolete: map[string]bool{"s1-c": true}}
	l := newLedgerRun(t, r)
	l.env.RegisterDelayedCallback(func() { close(r.gate) }, 10*time.Millisecond)
	a, c := receipt("s1-a", 'a'), receipt("s1-c", 'c')
	l.update(0, set.UpdateRecordAcks, set.AckBatch{Set: "s1", Receipts: []rollout.Receipt{a, c}})
	l.settled(0, "s1-a", "s1-b", "s1-c")
	l.settled(time.Minute, "s1-a", "s1-b", "s1-c")
	got := l.run(set.AckLedgerInput{Set: "s1"})
	assert.Equal(t, []string{
		"record-acks {Recorded:2 Already:0 Pending:2 Seq:2}",
		"settled [s1-a/a s1-c/c]",
		"settled [s1-a/a]",
	}, got)
}

// While a checkpoint holds the releases nothing is released, and a batch
// recorded meanwhile is answered as usual; the hold answers the sequence
// number of its cut (a second hold of the same checkpoint the same); once
// it ends, everything is released.
func TestAckLedgerHold(t *testing.T) {
	r := &releaser{}
	l := newLedgerRun(t, r)
	until := l.env.Now().Add(time.Hour)
	l.update(0, set.UpdateHoldReleases, set.ReleaseHold{CheckpointID: "ck1", Until: until})
	l.update(time.Second, set.UpdateRecordAcks, set.AckBatch{Set: "s1", Receipts: []rollout.Receipt{receipt("s1-a", 'a')}})
	l.update(2*time.Second, set.UpdateHoldReleases, set.ReleaseHold{CheckpointID: "ck1", Until: until})
	l.acked(3 * time.Second)
	l.update(4*time.Second, set.UpdateEndHold, set.EndHold{CheckpointID: "ck1"})
	l.acked(5 * time.Second)
	got := l.run(set.AckLedgerInput{Set: "s1"})
	assert.Equal(t, []string{
		"hold-releases {Seq:0}",
		"record-acks {Recorded:1 Already:0 Pending:1 Seq:1}",
		"hold-releases {Seq:0}",
		"pending [s1-a#1]",
		"end-hold <nil>",
		"pending []",
	}, got)
}

// A hold that is never ended (its checkpoint's step died) ends at its
// Until, and the releases go on.
func TestAckLedgerHoldExpires(t *testing.T) {
	r := &releaser{}
	l := newLedgerRun(t, r)
	l.update(0, set.UpdateHoldReleases, set.ReleaseHold{CheckpointID: "ck1", Until: l.env.Now().Add(time.Minute)})
	l.update(time.Second, set.UpdateRecordAcks, set.AckBatch{Set: "s1", Receipts: []rollout.Receipt{receipt("s1-a", 'a')}})
	l.acked(50 * time.Second)
	l.acked(70 * time.Second)
	got := l.run(set.AckLedgerInput{Set: "s1"})
	assert.Equal(t, []string{"hold-releases {Seq:0}", "record-acks {Recorded:1 Already:0 Pending:1 Seq:1}", "pending [s1-a#1]", "pending []"}, got)
}

// A hold asked while a release batch is in flight waits for it: what that
// batch released is released before the checkpoint's cut, the rest after.
func TestAckLedgerHoldWaitsForTheBatchInFlight(t *testing.T) {
	r := &releaser{gate: make(chan struct{})}
	l := newLedgerRun(t, r)
	l.update(0, set.UpdateRecordAcks, set.AckBatch{Set: "s1", Receipts: []rollout.Receipt{receipt("s1-a", 'a')}})
	l.env.RegisterDelayedCallback(func() {
		l.env.UpdateWorkflow(set.UpdateHoldReleases, "hold", &testsuite.TestUpdateCallback{
			OnAccept: func() { close(r.gate) }, // the batch ends only once the hold waits
			OnReject: func(err error) { l.got = append(l.got, "hold rejected: "+err.Error()) },
			OnComplete: func(v any, err error) {
				l.got = append(l.got, fmt.Sprintf("hold %+v %v after releases %s", v, err, r.seen()))
			},
		}, set.ReleaseHold{CheckpointID: "ck1", Until: l.env.Now().Add(time.Minute)})
	}, 2*time.Millisecond)
	l.acked(time.Second)
	got := l.run(set.AckLedgerInput{Set: "s1"})
	assert.Equal(t, []string{"record-acks {Recorded:1 Already:0 Pending:1 Seq:1}", "hold {Seq:1} <nil> after releases [[s1-a]]", "pending []"}, got)
}

// A restore forgets the receipts of its rollouts recorded before its
// fence; one recorded after, and other rollouts', stay.
func TestAckLedgerForget(t *testing.T) {
	r := &releaser{}
	l := newLedgerRun(t, r)
	fence := l.env.Now().Add(2 * time.Second)
	l.update(0, set.UpdateHoldReleases, set.ReleaseHold{CheckpointID: "ck1", Until: l.env.Now().Add(time.Minute)})
	l.update(time.Second, set.UpdateRecordAcks, set.AckBatch{Set: "s1", Receipts: []rollout.Receipt{receipt("s1-a", 'a'), receipt("s1-b", 'b')}})
	l.update(3*time.Second, set.UpdateRecordAcks, set.AckBatch{Set: "s1", Receipts: []rollout.Receipt{receipt("s1-c", 'c')}})
	l.update(4*time.Second, set.UpdateForgetAcks, set.ForgetAcks{RolloutIDs: []string{"s1-a", "s1-c"}, RecordedBefore: fence})
	l.acked(5 * time.Second)
	got := l.run(set.AckLedgerInput{Set: "s1"})
	require.Len(t, got, 5)
	assert.Equal(t, "forget-acks {Forgotten:1}", got[3])
	assert.Equal(t, "pending [s1-b#2 s1-c#3]", got[4])
}

// A failed release batch is sent again after a backoff; a rollout that
// refuses its receipt (obsolete) is dropped, not retried.
func TestAckLedgerRetriesAFailedRelease(t *testing.T) {
	r := &releaser{fail: 2, obsolete: map[string]bool{"s1-b": true}}
	l := newLedgerRun(t, r)
	l.update(0, set.UpdateRecordAcks, set.AckBatch{Set: "s1", Receipts: []rollout.Receipt{receipt("s1-a", 'a'), receipt("s1-b", 'b')}})
	l.acked(2500 * time.Millisecond)
	l.acked(time.Minute)
	got := l.run(set.AckLedgerInput{Set: "s1"})
	assert.Equal(t, "[[s1-a s1-b] [s1-a s1-b] [s1-a s1-b]]", r.seen(), "failed twice, then released")
	assert.Equal(t, []string{"record-acks {Recorded:1 Already:0 Pending:2 Seq:2}"}[0][:12], got[0][:12])
	assert.Equal(t, "pending [s1-a#1 s1-b#2]", got[1], "backing off after the second failure")
	assert.Equal(t, "pending []", got[2])
}

// Bad batches are refused without a trace: another set's, empty, a
// malformed receipt, and one beyond the ledger's room.
func TestAckLedgerRefusesBadBatches(t *testing.T) {
	r := &releaser{gate: make(chan struct{})} // nothing is released: the ledger fills
	l := newLedgerRun(t, r)
	many := make([]rollout.Receipt, set.MaxAckBatch)
	for i := range many {
		many[i] = receipt(fmt.Sprintf("s1-%05d", i), 'a')
	}
	bad := receipt("s1-x", 'a')
	bad.SHA256 = "XYZ"
	l.update(0, set.UpdateRecordAcks, set.AckBatch{Set: "s2", Receipts: many[:1]})
	l.update(0, set.UpdateRecordAcks, set.AckBatch{Set: "s1"})
	l.update(0, set.UpdateRecordAcks, set.AckBatch{Set: "s1", Receipts: []rollout.Receipt{many[0], bad}})
	l.update(time.Second, set.UpdateRecordAcks, set.AckBatch{Set: "s1", Receipts: many})
	l.update(2*time.Second, set.UpdateRecordAcks, set.AckBatch{Set: "s1", Receipts: []rollout.Receipt{receipt("s1-more", 'b')}})
	l.update(3*time.Second, set.UpdateRecordAcks, set.AckBatch{Set: "s1", Receipts: many[:2]})
	l.env.RegisterDelayedCallback(func() { close(r.gate) }, 4*time.Second)
	got := l.run(set.AckLedgerInput{Set: "s1", ReleaseBatch: set.MaxReleaseBatch})
	require.Len(t, got, 6, "%q", got)
	assert.Contains(t, got[0], `rejected: a batch of set "s2" sent to the ledger of set "s1"`)
	assert.Contains(t, got[1], "rejected: 0 receipts: want 1..10000")
	assert.Contains(t, got[2], `rejected: receipts[1]: rollout s1-x: sha256 "XYZ" is not 64 lower-case hex digits`)
	assert.Equal(t, "record-acks {Recorded:10000 Already:0 Pending:10000 Seq:10000}", got[3])
	assert.Contains(t, got[4], "rejected: the acknowledgement ledger of set s1 holds 10000 receipts not yet released")
	assert.Equal(t, "record-acks {Recorded:0 Already:2 Pending:10000 Seq:10000}", got[5], "receipts it holds take no room")
}

// A ledger continued as new carries its pending receipts, holds and
// sequence number, and goes on releasing.
func TestAckLedgerCarriesOver(t *testing.T) {
	r := &releaser{}
	l := newLedgerRun(t, r)
	in := set.AckLedgerInput{Set: "s1", Seq: 7, Pending: []set.PendingAck{{Receipt: receipt("s1-a", 'a'), Seq: 7, At: l.env.Now()}},
		Holds: []set.ReleaseHold{{CheckpointID: "ck1", Until: l.env.Now().Add(time.Minute), Seq: 7}}}
	l.acked(time.Second)
	l.update(2*time.Second, set.UpdateHoldReleases, set.ReleaseHold{CheckpointID: "ck1", Until: l.env.Now().Add(time.Minute)})
	l.update(3*time.Second, set.UpdateRecordAcks, set.AckBatch{Set: "s1", Receipts: []rollout.Receipt{receipt("s1-b", 'b')}})
	l.update(4*time.Second, set.UpdateEndHold, set.EndHold{CheckpointID: "ck1"})
	l.acked(5 * time.Second)
	got := l.run(in)
	assert.Equal(t, []string{
		"pending [s1-a#7]",
		"hold-releases {Seq:7}",
		"record-acks {Recorded:1 Already:0 Pending:2 Seq:8}",
		"end-hold <nil>",
		"pending []",
	}, got)
}
