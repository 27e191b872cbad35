package trainer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/internal/testsupport/temporalfake"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
	"github.com/turnstile-rl/turnstile/workflows/set"
)

func sha(c byte) string { return strings.Repeat(string(c), 64) }

func receipt(id string, attempt int, c byte) rollout.Receipt {
	return rollout.Receipt{RolloutID: id, Attempt: attempt, SHA256: sha(c)}
}

// held is a running rollout holding a result with receipt rc.
func held(rc rollout.Receipt) HeldState {
	return HeldState{WorkflowID: rollout.WorkflowID(rc.RolloutID), Running: true, Phase: rollout.PhaseAwaitingAck,
		Result: &rollout.Result{RolloutID: rc.RolloutID, Attempt: rc.Attempt, Receipt: &rc}}
}

func jsonLine(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

func TestParseReceipts(t *testing.T) {
	a, b := receipt("s1-0000", 0, 'a'), receipt("s1-0001", 1, 'b')
	res := rollout.Result{RolloutID: "s1-0001", Attempt: 1, Reward: 1, Receipt: &b}
	in := strings.Join([]string{
		jsonLine(t, a),
		"",
		jsonLine(t, res),
		`{"rollout_id":"s1-0002","error":"environment refused"}`,
		`{"rollout_id":"s1-0003","status":"failed","failure":"environment refused","held":false}`,
	}, "\n")
	lines, skipped, err := ParseReceipts(strings.NewReader(in))
	require.NoError(t, err)
	require.Len(t, lines, 2, "lines = %+v", lines)
	require.Equal(t, ReceiptLine{1, a}, lines[0], "lines = %+v", lines)
	require.Equal(t, ReceiptLine{3, b}, lines[1], "lines = %+v", lines)
	require.Len(t, skipped, 2, "skipped = %q", skipped)
	require.Contains(t, skipped[0], "line 4: rollout s1-0002 failed", "skipped = %q", skipped)
	require.Contains(t, skipped[1], "line 5: rollout s1-0003 failed", "skipped = %q", skipped)
}

func TestParseReceiptsListsEveryBadLine(t *testing.T) {
	in := strings.Join([]string{
		jsonLine(t, receipt("s1-0000", 0, 'a')), // 1 good
		`not json`,                              // 2
		`{"rollout_id":"s1-0001","sha256":"` + sha('a') + `"}`,                               // 3 no attempt
		jsonLine(t, receipt("s1-0002", 0, 'X')),                                              // 4 not hex
		`{"rollout_id":"s1-0003","reward":1}`,                                                // 5 a result without receipt
		`{"rollout_id":"s1-0004","receipt":` + jsonLine(t, receipt("s1-0005", 0, 'a')) + `}`, // 6 someone else's receipt
		jsonLine(t, receipt("s1-0006", -1, 'a')),                                             // 7 negative attempt
	}, "\n")
	_, _, err := ParseReceipts(strings.NewReader(in))
	require.Error(t, err, "accepted")
	for _, want := range []string{"6 bad receipt lines", "line 2:", "line 3: receipt of rollout s1-0001 has no attempt", "line 4:", "line 5: neither", "line 6: result of rollout s1-0004 carries the receipt of rollout s1-0005", "line 7:"} {
		assert.ErrorContains(t, err, want, "error lacks %q:\n%v", want, err)
	}
	assert.NotContains(t, err.Error(), "line 1:", "good line reported: %v", err)
}

func TestPlanAcks(t *testing.T) {
	a, b, c := receipt("s1-0000", 0, 'a'), receipt("s1-0001", 1, 'b'), receipt("s1-0002", 0, 'c')
	done := HeldState{WorkflowID: "rollout/s1-0002", Result: &rollout.Result{RolloutID: "s1-0002", Receipt: &c}}
	states := map[string]HeldState{"s1-0000": held(a), "s1-0001": held(b), "s1-0002": done}
	plan, err := PlanAcks("s1", []ReceiptLine{{1, b}, {2, a}, {3, c}, {4, a}}, states)
	require.NoError(t, err)
	require.Len(t, plan.Send, 2, "send = %+v", plan.Send)
	require.Equal(t, a, plan.Send[0], "send = %+v", plan.Send)
	require.Equal(t, b, plan.Send[1], "send = %+v", plan.Send)
	require.Len(t, plan.Already, 1, "already = %v", plan.Already)
	require.Equal(t, "s1-0002", plan.Already[0], "already = %v", plan.Already)
}

func TestPlanAcksRejectsTheWholeBatch(t *testing.T) {
	a, b := receipt("s1-0000", 0, 'a'), receipt("s1-0001", 1, 'b')
	running := HeldState{Running: true, Phase: rollout.PhaseModel}
	failedRun := HeldState{Err: "environment refused"}
	states := map[string]HeldState{"s1-0000": held(a), "s1-0001": held(b), "s1-0003": running, "s1-0004": failedRun}
	lines := []ReceiptLine{
		{1, a}, // good
		{2, receipt("s1-0001", 0, 'b')},
		{3, receipt("s1-0001", 1, 'c')},
		{4, receipt("s1-0009", 0, 'a')},
		{5, receipt("s1-0003", 0, 'a')},
		{6, receipt("s1-0004", 0, 'a')},
		{7, receipt("s1-0000", 0, 'f')},
	}
	_, err := PlanAcks("s1", lines, states)
	require.Error(t, err, "accepted")
	for _, want := range []string{
		"6 of 7 receipts", "nothing acknowledged",
		"line 2: rollout s1-0001: wrong attempt: the receipt says attempt 0, the held result is attempt 1",
		"line 4: rollout s1-0009 is not a rollout of set s1",
		"line 5: rollout s1-0003: holds no completed result yet (phase model)",
		"line 6: rollout s1-0004: closed without a result: environment refused",
		"line 7: rollout s1-0000 already has a different receipt on line 1",
	} {
		assert.ErrorContains(t, err, want, "error lacks %q:\n%v", want, err)
	}
	// Line 3 is s1-0001 again with another digest: a duplicate of line 2.
	assert.ErrorContains(t, err, "line 3: rollout s1-0001 already has a different receipt on line 2", "duplicate not reported:\n%v", err)
	// A digest mismatch on a single line.
	_, err = PlanAcks("s1", []ReceiptLine{{1, receipt("s1-0001", 1, 'c')}}, states)
	assert.ErrorContains(t, err, "digest mismatch", "digest mismatch: %v", err)
}

func TestPlanAllCompleted(t *testing.T) {
	a, b, c := receipt("s1-0002", 0, 'a'), receipt("s1-0000", 1, 'b'), receipt("s1-0001", 0, 'c')
	done := held(c)
	done.Running, done.Phase = false, rollout.PhaseCompleted
	states := map[string]HeldState{
		"s1-0002": held(a), "s1-0000": held(b), "s1-0001": done,
		"s1-0003": {Running: true, Phase: rollout.PhaseModel},
	}
	plan := PlanAllCompleted(states)
	require.Len(t, plan.Send, 2, "send = %+v", plan.Send)
	require.Equal(t, b, plan.Send[0], "send = %+v", plan.Send)
	require.Equal(t, a, plan.Send[1], "send = %+v", plan.Send)
}

// updater answers updates as rollouts do: a workflow in closed has
// closed, one in reject has its update refused by the validator; log, when
// set, hears of every update first.
func updater(closed, reject map[string]bool, log func(workflowID string)) *temporalfake.Client {
	return &temporalfake.Client{Update: func(o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
		if log != nil {
			log(o.WorkflowID)
		}
		if closed[o.WorkflowID] {
			return nil, serviceerror.NewNotFound("workflow execution already completed")
		}
		if reject[o.WorkflowID] {
			return temporalfake.UpdateHandle{Err: errors.New("rejected by the validator")}, nil
		}
		return temporalfake.UpdateHandle{}, nil
	}}
}

// ledgerFake answers update-with-start to a set's acknowledgement ledger
// as the ledger does (a receipt recorded before is already recorded), or
// refuses every batch as a full ledger does; it keeps what was sent.
type ledgerFake struct {
	mu       sync.Mutex
	recorded map[rollout.Receipt]bool
	sent     []client.UpdateWithStartWorkflowOptions
	full     bool
}

func (l *ledgerFake) client() *temporalfake.Client {
	return &temporalfake.Client{UpdateWithStart: func(o client.UpdateWithStartWorkflowOptions) (client.WorkflowUpdateHandle, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.sent = append(l.sent, o)
		if l.full {
			return temporalfake.UpdateHandle{Err: temporal.NewApplicationError("the ledger holds 10000 receipts not yet released", set.ErrLedgerFull)}, nil
		}
		var res set.AckBatchResult
		for _, rc := range o.UpdateOptions.Args[0].(set.AckBatch).Receipts {
			if l.recorded[rc] {
				res.Already++
				continue
			}
			l.recorded[rc] = true
			res.Recorded++
		}
		return temporalfake.UpdateHandle{Value: res}, nil
	}}
}

// An acknowledgement is one update of the set's ledger per batch of at
// most set.MaxAckBatch receipts, started on the control queue if it does
// not run, and no update of any rollout; sent again, it records nothing
// twice; a full ledger is a retryable UnavailableError.
func TestSendAcks(t *testing.T) {
	a, b, c := receipt("s1-0000", 0, 'a'), receipt("s1-0001", 1, 'b'), receipt("s1-0002", 0, 'c')
	l := &ledgerFake{recorded: map[rollout.Receipt]bool{c: true}}
	f := l.client()
	plan := AckPlan{Set: "s1", Send: []rollout.Receipt{a, b, c}, Already: []string{"s1-0009"}}
	sum, err := sendAcks(t.Context(), f, "q", plan)
	require.NoError(t, err)
	assert.Equal(t, AckSummary{Acknowledged: 2, Already: 2}, sum, "summary")
	require.Len(t, l.sent, 1, "one update for the batch")
	require.Empty(t, f.Updates(), "no rollout is updated on the caller's path")
	o := l.sent[0]
	start := o.StartWorkflowOperation.(*temporalfake.StartOperation)
	assert.Equal(t, "acks/s1", start.Options.ID)
	assert.Equal(t, "q-control", start.Options.TaskQueue, "the ledger runs on the control queue")
	assert.Equal(t, enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING, start.Options.WorkflowIDConflictPolicy)
	assert.Equal(t, set.UpdateRecordAcks, o.UpdateOptions.UpdateName)
	assert.Equal(t, client.WorkflowUpdateStageCompleted, o.UpdateOptions.WaitForStage, "answered once durable")
	assert.Equal(t, set.AckBatch{Set: "s1", Receipts: []rollout.Receipt{a, b, c}}, o.UpdateOptions.Args[0])

	again, err := sendAcks(t.Context(), f, "q", plan)
	require.NoError(t, err)
	assert.Equal(t, AckSummary{Already: 4}, again, "a repeat records nothing twice")
	assert.Equal(t, l.sent[0].UpdateOptions.UpdateID, l.sent[1].UpdateOptions.UpdateID, "the same batch is the same update")

	many := AckPlan{Set: "s1"}
	for i := range set.MaxAckBatch + 1 {
		many.Send = append(many.Send, receipt(fmt.Sprintf("s1-%05d", i), 0, 'd'))
	}
	sum, err = sendAcks(t.Context(), f, "q", many)
	require.NoError(t, err)
	assert.Equal(t, set.MaxAckBatch+1, sum.Acknowledged)
	require.Len(t, l.sent, 4, "a batch beyond MaxAckBatch is two updates")

	l.full = true
	_, err = sendAcks(t.Context(), f, "q", AckPlan{Set: "s1", Send: []rollout.Receipt{a}})
	var unavailable *UnavailableError
	require.ErrorAs(t, err, &unavailable)
	assert.Contains(t, err.Error(), "not yet released")

	_, err = sendAcks(t.Context(), f, "q", AckPlan{Send: []rollout.Receipt{a}})
	require.ErrorContains(t, err, "acknowledgement plan", "a plan without its set")
	sum, err = sendAcks(t.Context(), &temporalfake.Client{}, "q", AckPlan{Already: []string{"s1-0001"}})
	require.NoError(t, err, "nothing to send needs no ledger")
	assert.Equal(t, AckSummary{Already: 1}, sum)
}

// statusQueries answers status queries of the current runs from a table.
func statusQueries(status map[string]rollout.Status) *temporalfake.Client {
	return &temporalfake.Client{Query: func(workflowID, runID, queryType string, _ ...any) (converter.EncodedValue, error) {
		st, ok := status[workflowID]
		if !ok || queryType != rollout.QueryStatus || runID != "" {
			return nil, fmt.Errorf("unexpected query %s %q %s", workflowID, runID, queryType)
		}
		return temporalfake.Value{V: st}, nil
	}}
}

func TestResultsListHeldResultsWithReceipts(t *testing.T) {
	a, c := receipt("s1-0000", 0, 'a'), receipt("s1-0002", 1, 'c')
	recs := []RolloutRecord{
		{RolloutID: "s1-0000", WorkflowID: "rollout/s1-0000", Status: running, Phase: "awaiting_ack"},
		{RolloutID: "s1-0001", WorkflowID: "rollout/s1-0001", Status: running, Phase: "model"},
		{RolloutID: "s1-0002", WorkflowID: "rollout/s1-0002", Status: completed, Result: &rollout.Result{RolloutID: "s1-0002", Attempt: 1, Receipt: &c}},
	}
	q := statusQueries(map[string]rollout.Status{
		"rollout/s1-0000": {Phase: rollout.PhaseAwaitingAck, Result: &rollout.Result{RolloutID: "s1-0000", Reward: 1, Receipt: &a}},
	})
	require.NoError(t, fillHeld(t.Context(), q, recs))
	assert.Len(t, q.Queried(), 1, "only the awaiting rollout needs a query")
	// What results prints is what acknowledge reads.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, r := range recs {
		if r.Result != nil {
			require.NoError(t, enc.Encode(r.Result))
		}
	}
	lines, _, err := ParseReceipts(&buf)
	require.NoError(t, err)
	require.Len(t, lines, 2, "receipts read back: %+v", lines)
	require.Equal(t, a, lines[0].Receipt, "receipts read back: %+v", lines)
	require.Equal(t, c, lines[1].Receipt, "receipts read back: %+v", lines)
}
