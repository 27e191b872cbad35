package trainer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	tclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// An acknowledgement under a request id leaves a record in Temporal, as a
// submission, a checkpoint and a restore do in their runs' memos: the
// acknowledgement itself is a set of updates of many rollouts, which hold
// no trace of the request, so its record is a workflow of its own,
// "ack-request/<set>/<request id>", whose memo carries the request's stamp
// and the summary it answered. The record is started on a task queue no
// worker polls and terminated at once: it never runs, it is only kept (for
// the namespace's retention period, like every closed run), so it costs a
// start and a terminate, needs no worker, and survives any gateway.
//
// It is written only once the acknowledgement has succeeded: a request
// refused (a receipt that does not match) or cut short leaves none, so the
// same request id may be sent again, with the same body or a corrected one.
// Acknowledging is idempotent by receipt anyway (each update's id derives
// from its receipt), so a repeat that finds no record acknowledges nothing
// twice; the record makes its answer the same, and catches the request id
// reused for another body.

// AckRecordWorkflowName is the workflow type of an acknowledgement's
// record. No worker registers it: a record is never run.
const AckRecordWorkflowName = "AckRequestRecord"

// MemoAnswer is the memo field of an acknowledgement's record holding the
// AckSummary it answered (beside MemoRequest, its stamp).
const MemoAnswer = "answer"

// ackRecordTimeout closes a record that was started but, its starter gone
// before terminating it, never terminated (its memo is complete from the
// start).
const ackRecordTimeout = time.Minute

// AckRecordWorkflowID is the workflow id of the record of acknowledgement
// request requestID of set.
func AckRecordWorkflowID(set, requestID string) string {
	return "ack-request/" + set + "/" + requestID
}

// RecordTaskQueue is the task queue of request records: taskQueue (the
// rollouts') plus "-records". No worker polls it.
func RecordTaskQueue(taskQueue string) string { return taskQueue + "-records" }

// recordKeeper is the part of client.Client that reads and writes request
// records.
type recordKeeper interface {
	DescribeWorkflowExecution(ctx context.Context, workflowID, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error)
	ExecuteWorkflow(ctx context.Context, options tclient.StartWorkflowOptions, workflow any, args ...any) (tclient.WorkflowRun, error)
	TerminateWorkflow(ctx context.Context, workflowID, runID, reason string, details ...any) error
}

// acknowledgeOnce runs ack(r) under r.RequestID: a request with a record
// answers from it, one without is acknowledged, then recorded.
func acknowledgeOnce(ctx context.Context, k recordKeeper, taskQueue string, r AckRequest, ack func(context.Context, AckRequest) (AckSummary, error)) (AckSummary, error) {
	if err := rollout.ValidateSet(r.Set); err != nil {
		return AckSummary{}, err
	}
	stamp, err := ackStamp(r)
	if err != nil {
		return AckSummary{}, err
	}
	rec, found, err := readAckRecord(ctx, k, r.Set, stamp)
	if err != nil {
		return AckSummary{}, err
	}
	if found {
		return rec.replay(r.Set, stamp)
	}
	sum, err := ack(ctx, r)
	if err != nil {
		return sum, err
	}
	return writeAckRecord(ctx, k, taskQueue, r.Set, stamp, sum)
}

// ackStamp is r's stamp: its request id and a digest of the set and the
// receipts, in the order given (AllCompleted in place of receipts).
func ackStamp(r AckRequest) (SubmitStamp, error) {
	body := struct {
		Set          string            `json:"set"`
		Receipts     []rollout.Receipt `json:"receipts"`
		AllCompleted bool              `json:"all_completed,omitempty"`
	}{Set: r.Set, Receipts: make([]rollout.Receipt, len(r.Receipts)), AllCompleted: r.AllCompleted}
	for i, l := range r.Receipts {
		body.Receipts[i] = l.Receipt
	}
	data, err := json.Marshal(body)
	if err != nil {
		return SubmitStamp{}, fmt.Errorf("digest of the acknowledgement: %w", err)
	}
	sum := sha256.Sum256(data)
	return SubmitStamp{RequestID: r.RequestID, Digest: hex.EncodeToString(sum[:])}, nil
}

// ackRecord is a record read back.
type ackRecord struct {
	stamp  SubmitStamp
	answer AckSummary
}

// readAckRecord reads the record of stamp's request id for set; found is
// false when there is none.
func readAckRecord(ctx context.Context, k recordKeeper, set string, stamp SubmitStamp) (rec ackRecord, found bool, err error) {
	id := AckRecordWorkflowID(set, stamp.RequestID)
	d, err := k.DescribeWorkflowExecution(ctx, id, "")
	var notFound *serviceerror.NotFound
	switch {
	case errors.As(err, &notFound):
		return ackRecord{}, false, nil
	case err != nil:
		return ackRecord{}, false, fmt.Errorf("look up %s: %w", id, err)
	}
	fields := d.GetWorkflowExecutionInfo().GetMemo().GetFields()
	dc := converter.GetDefaultDataConverter()
	if p, ok := fields[MemoRequest]; !ok || dc.FromPayload(p, &rec.stamp) != nil {
		return ackRecord{}, false, fmt.Errorf("%s holds no request stamp: it is not a record of an acknowledgement", id)
	}
	if p, ok := fields[MemoAnswer]; !ok || dc.FromPayload(p, &rec.answer) != nil {
		return ackRecord{}, false, fmt.Errorf("%s holds no answer: it is not a record of an acknowledgement", id)
	}
	return rec, true, nil
}

// replay answers a request that has a record: the recorded answer when the
// record is of the same request, a ConflictError naming request_id when of
// another.
func (rec ackRecord) replay(set string, stamp SubmitStamp) (AckSummary, error) {
	if rec.stamp != stamp {
		return AckSummary{}, &ConflictError{Field: "request_id", Msg: fmt.Sprintf(
			"request id %q acknowledged other receipts of set %s before; use a new request id", stamp.RequestID, set)}
	}
	return rec.answer, nil
}

// writeAckRecord keeps the record of stamp's request for set with the
// answer it got. When another call wrote the record first (the same
// request sent twice at once), the answer is that record's.
func writeAckRecord(ctx context.Context, k recordKeeper, taskQueue, set string, stamp SubmitStamp, answer AckSummary) (AckSummary, error) {
	id := AckRecordWorkflowID(set, stamp.RequestID)
	run, err := k.ExecuteWorkflow(ctx, tclient.StartWorkflowOptions{
		ID:                                       id,
		TaskQueue:                                RecordTaskQueue(taskQueue),
		WorkflowIDConflictPolicy:                 enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		WorkflowExecutionTimeout:                 ackRecordTimeout,
		StaticSummary:                            "record of acknowledgement request " + stamp.RequestID + " of set " + set,
		Memo:                                     map[string]any{MemoRequest: stamp, MemoAnswer: answer},
	}, AckRecordWorkflowName)
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	switch {
	case errors.As(err, &already):
		rec, found, err := readAckRecord(ctx, k, set, stamp)
		if err != nil {
			return answer, err
		}
		if !found {
			return answer, fmt.Errorf("%s: started by another call, then not found", id)
		}
		return rec.replay(set, stamp)
	case err != nil:
		return answer, fmt.Errorf("record acknowledgement request %q: %w", stamp.RequestID, err)
	}
	// The record is complete as started; ending it is tidiness (the
	// timeout ends it otherwise), so a failure here fails nothing.
	_ = k.TerminateWorkflow(ctx, id, run.GetRunID(), "the record of an acknowledgement request: kept, never run")
	return answer, nil
}
