package trainer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	tclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// fakeRecords keeps request records as Temporal would: a workflow id
// started once (reuse rejected), its memo, and whether it was terminated.
type fakeRecords struct {
	mu         sync.Mutex
	records    map[string]*fakeRecord
	starts     int
	terminates int
	// beforeStart, when set, runs before a start (another caller racing).
	beforeStart func()
}

type fakeRecord struct {
	opts       tclient.StartWorkflowOptions
	memo       map[string]*commonpb.Payload
	terminated bool
}

func (f *fakeRecords) DescribeWorkflowExecution(_ context.Context, workflowID, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
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

func (f *fakeRecords) ExecuteWorkflow(_ context.Context, o tclient.StartWorkflowOptions, wf any, _ ...any) (tclient.WorkflowRun, error) {
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
		f.records = map[string]*fakeRecord{}
	}
	if _, ok := f.records[o.ID]; ok {
		return nil, serviceerror.NewWorkflowExecutionAlreadyStarted("already started", "", "run-"+o.ID)
	}
	memo := map[string]*commonpb.Payload{}
	for k, v := range o.Memo {
		p, err := converter.GetDefaultDataConverter().ToPayload(v)
		if err != nil {
			return nil, err
		}
		memo[k] = p
	}
	f.records[o.ID] = &fakeRecord{opts: o, memo: memo}
	return recordRun{id: o.ID}, nil
}

func (f *fakeRecords) TerminateWorkflow(_ context.Context, workflowID, runID, _ string, _ ...any) error {
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

// recordRun is the run of a record: only its id is ever read.
type recordRun struct {
	tclient.WorkflowRun
	id string
}

func (r recordRun) GetID() string    { return r.id }
func (r recordRun) GetRunID() string { return "run-" + r.id }

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
	k := &fakeRecords{}
	a := &countingAck{answers: []AckSummary{{Acknowledged: 2}, {Already: 2}}}
	first := ackOf("s1", "ack-1", receiptOf("s1-0000", 'a'), receiptOf("s1-0001", 'b'))

	got, err := acknowledgeOnce(ctx, k, "q", first, a.ack)
	if err != nil || got != (AckSummary{Acknowledged: 2}) || a.calls != 1 {
		t.Fatalf("first: %+v, %v, %d acknowledgements", got, err, a.calls)
	}
	rec := k.records[AckRecordWorkflowID("s1", "ack-1")]
	if rec == nil {
		t.Fatal("no record written")
	}
	if rec.opts.TaskQueue != "q-records" || rec.opts.WorkflowIDReusePolicy != enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE ||
		rec.opts.WorkflowExecutionTimeout <= 0 || rec.opts.WorkflowExecutionTimeout > time.Hour || !rec.terminated {
		t.Errorf("record %+v (terminated %v)", rec.opts, rec.terminated)
	}

	got, err = acknowledgeOnce(ctx, k, "q", first, a.ack)
	if err != nil || got != (AckSummary{Acknowledged: 2}) || a.calls != 1 {
		t.Fatalf("repeat: %+v, %v, %d acknowledgements; want the first answer and no acknowledgement", got, err, a.calls)
	}

	for name, other := range map[string]AckRequest{
		"another receipt":    ackOf("s1", "ack-1", receiptOf("s1-0000", 'a'), receiptOf("s1-0002", 'c')),
		"another digest":     ackOf("s1", "ack-1", receiptOf("s1-0000", 'a'), receiptOf("s1-0001", 'c')),
		"fewer receipts":     ackOf("s1", "ack-1", receiptOf("s1-0000", 'a')),
		"another order":      ackOf("s1", "ack-1", receiptOf("s1-0001", 'b'), receiptOf("s1-0000", 'a')),
		"all completed then": {Set: "s1", RequestID: "ack-1", AllCompleted: true},
	} {
		_, err = acknowledgeOnce(ctx, k, "q", other, a.ack)
		var ce *ConflictError
		if !errors.As(err, &ce) || ce.Field != "request_id" || !strings.Contains(ce.Msg, `"ack-1"`) {
			t.Errorf("%s under the same request id: %v, want a conflict naming request_id", name, err)
		}
	}
	if a.calls != 1 {
		t.Errorf("%d acknowledgements, want 1: a refused request acknowledged", a.calls)
	}

	// The request id is the set's: another set's request of that id is its own.
	if _, err := acknowledgeOnce(ctx, k, "q", ackOf("s2", "ack-1", receiptOf("s2-0000", 'a')), a.ack); err != nil || a.calls != 2 {
		t.Errorf("same request id, another set: %v, %d acknowledgements", err, a.calls)
	}
}

// A refused or failed acknowledgement leaves no record: the request id may
// be sent again, corrected.
func TestAcknowledgeOnceRefusedLeavesNoRecord(t *testing.T) {
	ctx := context.Background()
	k := &fakeRecords{}
	refused := &countingAck{err: &ConflictError{Field: "receipts[0].sha256", Msg: "1 of 1 receipts do not match"}}
	_, err := acknowledgeOnce(ctx, k, "q", ackOf("s1", "ack-1", receiptOf("s1-0000", 'a')), refused.ack)
	var ce *ConflictError
	if !errors.As(err, &ce) || ce.Field != "receipts[0].sha256" {
		t.Fatalf("refused: %v", err)
	}
	if k.starts != 0 || len(k.records) != 0 {
		t.Fatalf("a refused acknowledgement wrote a record")
	}
	ok := &countingAck{answers: []AckSummary{{Acknowledged: 1}}}
	if got, err := acknowledgeOnce(ctx, k, "q", ackOf("s1", "ack-1", receiptOf("s1-0000", 'b')), ok.ack); err != nil || got.Acknowledged != 1 {
		t.Fatalf("corrected: %+v, %v", got, err)
	}
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
			k := &fakeRecords{}
			k.beforeStart = func() {
				k.beforeStart = nil
				winner := &countingAck{answers: []AckSummary{{Acknowledged: 1}}}
				if _, err := acknowledgeOnce(ctx, k, "q", tt.winner, winner.ack); err != nil {
					t.Fatal(err)
				}
			}
			loser := &countingAck{answers: []AckSummary{{Already: 1}}}
			got, err := acknowledgeOnce(ctx, k, "q", req, loser.ack)
			var ce *ConflictError
			switch {
			case tt.conflict && !(errors.As(err, &ce) && ce.Field == "request_id"):
				t.Errorf("%+v, %v: want a conflict naming request_id", got, err)
			case !tt.conflict && (err != nil || got != (AckSummary{Acknowledged: 1})):
				t.Errorf("%+v, %v: want the recorded answer", got, err)
			}
		})
	}
}

// A workflow of the record's id that is not a record (no stamp, no answer)
// is an error, not a replay.
func TestAckRecordOfSomethingElse(t *testing.T) {
	k := &fakeRecords{records: map[string]*fakeRecord{AckRecordWorkflowID("s1", "x"): {memo: map[string]*commonpb.Payload{}}}}
	a := &countingAck{answers: []AckSummary{{}}}
	if _, err := acknowledgeOnce(context.Background(), k, "q", ackOf("s1", "x", receiptOf("s1-0000", 'a')), a.ack); err == nil || a.calls != 0 {
		t.Fatalf("%v, %d acknowledgements", err, a.calls)
	}
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
		if !errors.As(err, &ce) {
			t.Fatalf("%q: %v, want a conflict", tt.array, err)
		}
		if ce.Field != tt.field {
			t.Errorf("%q: field %q, want %q", tt.array, ce.Field, tt.field)
		}
		for _, s := range tt.says {
			if !strings.Contains(ce.Msg, s) {
				t.Errorf("%q: message %q does not say %q", tt.array, ce.Msg, s)
			}
		}
		if tt.array != "" && strings.Contains(ce.Msg, "line ") {
			t.Errorf("message %q numbers lines", ce.Msg)
		}
	}
	for i, sub := range map[int]string{2: ".attempt", 3: ".rollout_id", 4: ""} {
		_, err := planAcks("s1", []ReceiptLine{lines[0], lines[i]}, states, "receipts")
		var ce *ConflictError
		want := fmt.Sprintf("receipts[%d]%s", i, sub)
		if !errors.As(err, &ce) || ce.Field != want {
			t.Errorf("receipt %d alone: %v, want field %s", i, err, want)
		}
	}
}
