package trainer

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
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	tclient "go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/internal/testsupport/temporalfake"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// ackRecords keeps request records as Temporal would: a workflow id
// started once (reuse rejected), its memo, and whether it was terminated.
type ackRecords struct {
	mu         sync.Mutex
	records    map[string]*keptRecord
	starts     int
	terminates int
	// beforeStart, when set, runs before a start (another caller racing).
	beforeStart func()
}

type keptRecord struct {
	opts       tclient.StartWorkflowOptions
	memo       map[string]*commonpb.Payload
	terminated bool
}

// client is a Temporal client keeping the records.
func (f *ackRecords) client() *temporalfake.Client {
	return &temporalfake.Client{Describe: f.describe, Execute: f.start, Terminate: f.terminate}
}

func (f *ackRecords) describe(workflowID, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rec, ok := f.records[workflowID]
	if !ok {
		return nil, serviceerror.NewNotFound("workflow not found: " + workflowID)
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
		Execution: &commonpb.WorkflowExecution{WorkflowId: workflowID, RunId: "run-" + workflowID},
		Memo:      &commonpb.Memo{Fields: rec.memo},
	}}, nil
}

// start starts a record; its run is only ever read for its ids.
func (f *ackRecords) start(o tclient.StartWorkflowOptions, wf any, _ ...any) (tclient.WorkflowRun, error) {
	if f.beforeStart != nil {
		f.beforeStart()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.starts++
	if wf != AckRecordWorkflowName {
		return nil, errors.New("not a record")
	}
	if f.records == nil {
		f.records = map[string]*keptRecord{}
	}
	if _, ok := f.records[o.ID]; ok {
		return nil, serviceerror.NewWorkflowExecutionAlreadyStarted("already started", "", "run-"+o.ID)
	}
	memo := map[string]*commonpb.Payload{}
	for k, v := range o.Memo {
		memo[k] = temporalfake.Payload(v)
	}
	f.records[o.ID] = &keptRecord{opts: o, memo: memo}
	return temporalfake.Run{ID: o.ID, RunID: "run-" + o.ID}, nil
}

func (f *ackRecords) terminate(workflowID, runID, _ string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.terminates++
	rec, ok := f.records[workflowID]
	if !ok || runID != "run-"+workflowID {
		return serviceerror.NewNotFound("no run " + runID)
	}
	rec.terminated = true
	return nil
}

func receiptOf(id string, c byte) rollout.Receipt {
	return rollout.Receipt{RolloutID: id, SHA256: strings.Repeat(string(c), 64)}
}

func ackOf(set, requestID string, rcs ...rollout.Receipt) AckRequest {
	r := AckRequest{Set: set, RequestID: requestID, Field: "receipts"}
	for i, rc := range rcs {
		r.Receipts = append(r.Receipts, ReceiptLine{Line: i + 1, Receipt: rc})
	}
	return r
}

// countingAck acknowledges by answering answers in turn, counting calls.
type countingAck struct {
	calls   int
	answers []AckSummary
	err     error
}

func (a *countingAck) ack(context.Context, AckRequest) (AckSummary, error) {
	a.calls++
	if a.err != nil {
		return AckSummary{}, a.err
	}
	return a.answers[min(a.calls, len(a.answers))-1], nil
}

// Under a request id, an acknowledgement that succeeded answers the same
// when sent again, acknowledging nothing; the same request id with other
// receipts is a conflict naming request_id. The record is a workflow
// started on a queue no worker polls and ended at once.
func TestAcknowledgeOnceReplaysAndRefuses(t *testing.T) {
	ctx := context.Background()
	k := &ackRecords{}
	a := &countingAck{answers: []AckSummary{{Acknowledged: 2}, {Already: 2}}}
	first := ackOf("s1", "ack-1", receiptOf("s1-0000", 'a'), receiptOf("s1-0001", 'b'))

	got, err := acknowledgeOnce(ctx, k.client(), "q", first, a.ack)
	require.NoError(t, err, "first: %+v, %v, %d acknowledgements", got, err, a.calls)
	require.Equal(t, AckSummary{Acknowledged: 2}, got, "first: %+v, %v, %d acknowledgements", got, err, a.calls)
	require.Equal(t, 1, a.calls, "first: %+v, %v, %d acknowledgements", got, err, a.calls)
	rec := k.records[AckRecordWorkflowID("s1", "ack-1")]
	require.NotNil(t, rec, "no record written")
	require.Equal(t, "q-records", rec.opts.TaskQueue, "record %+v (terminated %v)", rec.opts, rec.terminated)
	require.Equal(t, enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE, rec.opts.WorkflowIDReusePolicy, "record %+v (terminated %v)", rec.opts, rec.terminated)
	require.Greater(t, rec.opts.WorkflowExecutionTimeout, time.Duration(0), "record %+v (terminated %v)", rec.opts, rec.terminated)
	require.LessOrEqual(t, rec.opts.WorkflowExecutionTimeout, time.Hour, "record %+v (terminated %v)", rec.opts, rec.terminated)
	require.True(t, rec.terminated, "record %+v (terminated %v)", rec.opts, rec.terminated)

	got, err = acknowledgeOnce(ctx, k.client(), "q", first, a.ack)
	require.NoError(t, err, "repeat: %+v, %v, %d acknowledgements; want the first answer and no acknowledgement", got, err, a.calls)
	require.Equal(t, AckSummary{Acknowledged: 2}, got, "repeat: %+v, %v, %d acknowledgements; want the first answer and no acknowledgement", got, err, a.calls)
	require.Equal(t, 1, a.calls, "repeat: %+v, %v, %d acknowledgements; want the first answer and no acknowledgement", got, err, a.calls)

	for name, other := range map[string]AckRequest{
		"another receipt":    ackOf("s1", "ack-1", receiptOf("s1-0000", 'a'), receiptOf("s1-0002", 'c')),
		"another digest":     ackOf("s1", "ack-1", receiptOf("s1-0000", 'a'), receiptOf("s1-0001", 'c')),
		"fewer receipts":     ackOf("s1", "ack-1", receiptOf("s1-0000", 'a')),
		"another order":      ackOf("s1", "ack-1", receiptOf("s1-0001", 'b'), receiptOf("s1-0000", 'a')),
		"all completed then": {Set: "s1", RequestID: "ack-1", AllCompleted: true},
	} {
		_, err = acknowledgeOnce(ctx, k.client(), "q", other, a.ack)
		var ce *ConflictError
		require.ErrorAs(t, err, &ce, "%s under the same request id: %v, want a conflict naming request_id", name, err)
		require.Equal(t, "request_id", ce.Field, "%s under the same request id: %v, want a conflict naming request_id", name, err)
		require.Contains(t, ce.Msg, `"ack-1"`, "%s under the same request id: %v, want a conflict naming request_id", name, err)
	}
	assert.Equal(t, 1, a.calls, "%d acknowledgements, want 1: a refused request acknowledged", a.calls)

	// The request id is the set's: another set's request of that id is its own.
	_, err = acknowledgeOnce(ctx, k.client(), "q", ackOf("s2", "ack-1", receiptOf("s2-0000", 'a')), a.ack)
	require.NoError(t, err, "same request id, another set: %v, %d acknowledgements", err, a.calls)
	require.Equal(t, 2, a.calls, "same request id, another set: %v, %d acknowledgements", err, a.calls)
}

// A refused or failed acknowledgement leaves no record: the request id may
// be sent again, corrected.
func TestAcknowledgeOnceRefusedLeavesNoRecord(t *testing.T) {
	ctx := context.Background()
	k := &ackRecords{}
	refused := &countingAck{err: &ConflictError{Field: "receipts[0].sha256", Msg: "1 of 1 receipts do not match"}}
	_, err := acknowledgeOnce(ctx, k.client(), "q", ackOf("s1", "ack-1", receiptOf("s1-0000", 'a')), refused.ack)
	var ce *ConflictError
	require.ErrorAs(t, err, &ce, "refused: %v", err)
	require.Equal(t, "receipts[0].sha256", ce.Field, "refused: %v", err)
	require.Equal(t, 0, k.starts, "a refused acknowledgement wrote a record")
	require.Empty(t, k.records, "a refused acknowledgement wrote a record")
	ok := &countingAck{answers: []AckSummary{{Acknowledged: 1}}}
	got, err := acknowledgeOnce(ctx, k.client(), "q", ackOf("s1", "ack-1", receiptOf("s1-0000", 'b')), ok.ack)
	require.NoError(t, err, "corrected: %+v, %v", got, err)
	require.Equal(t, 1, got.Acknowledged, "corrected: %+v, %v", got, err)
}

// Two calls of one request at once: the second to record answers what the
// first recorded; a call of another request under the same id that lost
// the race is a conflict.
func TestAcknowledgeOnceRace(t *testing.T) {
	ctx := context.Background()
	req := ackOf("s1", "ack-1", receiptOf("s1-0000", 'a'))
	for _, tt := range []struct {
		name     string
		winner   AckRequest
		conflict bool
	}{
		{"same request", req, false},
		{"another request", ackOf("s1", "ack-1", receiptOf("s1-0000", 'b')), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			k := &ackRecords{}
			k.beforeStart = func() {
				k.beforeStart = nil
				winner := &countingAck{answers: []AckSummary{{Acknowledged: 1}}}
				_, err := acknowledgeOnce(ctx, k.client(), "q", tt.winner, winner.ack)
				require.NoError(t, err)
			}
			loser := &countingAck{answers: []AckSummary{{Already: 1}}}
			got, err := acknowledgeOnce(ctx, k.client(), "q", req, loser.ack)
			if tt.conflict {
				var ce *ConflictError
				require.ErrorAs(t, err, &ce, "%+v: want a conflict naming request_id", got)
				assert.Equal(t, "request_id", ce.Field, "want a conflict naming request_id")
			} else {
				require.NoError(t, err, "want the recorded answer")
				assert.Equal(t, AckSummary{Acknowledged: 1}, got, "want the recorded answer")
			}
		})
	}
}

// A workflow of the record's id that is not a record (no stamp, no answer)
// is an error, not a replay.
func TestAckRecordOfSomethingElse(t *testing.T) {
	k := &ackRecords{records: map[string]*keptRecord{AckRecordWorkflowID("s1", "x"): {memo: map[string]*commonpb.Payload{}}}}
	a := &countingAck{answers: []AckSummary{{}}}
	_, err := acknowledgeOnce(context.Background(), k.client(), "q", ackOf("s1", "x", receiptOf("s1-0000", 'a')), a.ack)
	require.Error(t, err, "%v, %d acknowledgements", err, a.calls)
	require.Equal(t, 0, a.calls, "%v, %d acknowledgements", err, a.calls)
}

// Receipts sent as a JSON array (the gateway's) are named as its elements
// in the messages, and the conflict names the first bad one's field.
func TestPlanAcksNamesReceiptsInJSON(t *testing.T) {
	held := func(rc rollout.Receipt) HeldState {
		return HeldState{Running: true, Phase: rollout.PhaseAwaitingAck, Result: &rollout.Result{RolloutID: rc.RolloutID, Receipt: &rc}}
	}
	states := map[string]HeldState{
		"s1-0000": held(receiptOf("s1-0000", 'a')),
		"s1-0001": held(receiptOf("s1-0001", 'b')),
		"s1-0002": held(rollout.Receipt{RolloutID: "s1-0002", Attempt: 1, SHA256: strings.Repeat("c", 64)}),
	}
	lines := ackOf("s1", "", receiptOf("s1-0000", 'a'), receiptOf("s1-0001", 'x'), receiptOf("s1-0002", 'c'), receiptOf("s1-0009", 'd'), receiptOf("s1-0000", 'e')).Receipts
	tests := []struct {
		array, field string
		says         []string
	}{
		{"receipts", "receipts[1].sha256", []string{"receipts[1]: rollout s1-0001: digest mismatch", "receipts[2]: rollout s1-0002: wrong attempt",
			"receipts[3]: rollout s1-0009 is not a rollout", "receipts[4]: rollout s1-0000 already has a different receipt in receipts[0]"}},
		{"", "", []string{"line 2: rollout s1-0001: digest mismatch", "line 5: rollout s1-0000 already has a different receipt on line 1"}},
	}
	for _, tt := range tests {
		_, err := planAcks("s1", lines, states, tt.array)
		var ce *ConflictError
		require.ErrorAs(t, err, &ce, "%q: %v, want a conflict", tt.array, err)
		assert.Equal(t, tt.field, ce.Field, "%q: field %q, want %q", tt.array, ce.Field, tt.field)
		for _, s := range tt.says {
			assert.Contains(t, ce.Msg, s, "%q: message %q does not say %q", tt.array, ce.Msg, s)
		}
		assert.False(t, tt.array != "" && strings.Contains(ce.Msg, "line "), "message %q numbers lines", ce.Msg)
	}
	for i, sub := range map[int]string{2: ".attempt", 3: ".rollout_id", 4: ""} {
		_, err := planAcks("s1", []ReceiptLine{lines[0], lines[i]}, states, "receipts")
		var ce *ConflictError
		want := fmt.Sprintf("receipts[%d]%s", i, sub)
		require.ErrorAs(t, err, &ce, "receipt %d alone: %v, want field %s", i, err, want)
		require.Equal(t, want, ce.Field, "receipt %d alone: %v, want field %s", i, err, want)
	}
}
