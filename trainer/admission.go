package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	tclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
	"github.com/turnstile-rl/turnstile/workflows/set"
)

// DefaultMaxInFlight is how many of a set's rollouts run at once when a
// submission does not say: the knee measured on the embedded dev server on a
// 2-core machine (the bench's admission rows, docs/capacity.md), where 512
// short rollouts ran at 34.7 turns/s admitted 64 at a time, 28.6 at 128 and
// 22.5 at 256, their workflow tasks waiting longer at each step.
const DefaultMaxInFlight = 64

// AdmissionStatus is where a set's admission stands (set.AdmissionStatus).
type AdmissionStatus = set.AdmissionStatus

// Admission asks set's admission where it stands: how many of its rollouts
// run, how many wait, its max_in_flight. ok is false for a set without one
// (submitted before admission existed, or not submitted).
func (c *Client) Admission(ctx context.Context, name string) (AdmissionStatus, bool, error) {
	if err := rollout.ValidateSet(name); err != nil {
		return AdmissionStatus{}, false, err
	}
	return queryAdmission(ctx, c.tc, name)
}

// admissionQuerier is the query part of client.Client.
type admissionQuerier interface {
	QueryWorkflow(ctx context.Context, workflowID string, runID string, queryType string, args ...any) (converter.EncodedValue, error)
}

// queryAdmission asks a set's admission for its status; ok is false when
// the set has none.
func queryAdmission(ctx context.Context, q admissionQuerier, name string) (AdmissionStatus, bool, error) {
	v, err := q.QueryWorkflow(ctx, set.AdmissionWorkflowID(name), "", set.QueryStatus)
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return AdmissionStatus{}, false, nil
	}
	if err != nil {
		return AdmissionStatus{}, false, fmt.Errorf("query the admission of set %q: %w", name, err)
	}
	var st AdmissionStatus
	if err := v.Get(&st); err != nil {
		return AdmissionStatus{}, false, fmt.Errorf("decode the admission of set %q: %w", name, err)
	}
	return st, true, nil
}

// SetMaxInFlight changes how many of set's rollouts run at once, while the
// set runs: a raise starts queued rollouts at once, a cut lets the running
// ones finish. It answers the admission's status after the change.
func (c *Client) SetMaxInFlight(ctx context.Context, name string, n int) (AdmissionStatus, error) {
	if err := rollout.ValidateSet(name); err != nil {
		return AdmissionStatus{}, err
	}
	if err := set.ValidateMaxInFlight("--max-in-flight", n); err != nil {
		return AdmissionStatus{}, err
	}
	h, err := c.tc.UpdateWorkflow(ctx, tclient.UpdateWorkflowOptions{
		WorkflowID: set.AdmissionWorkflowID(name), UpdateName: set.UpdateMaxInFlight,
		Args: []any{set.MaxInFlightRequest{MaxInFlight: n}}, WaitForStage: tclient.WorkflowUpdateStageCompleted,
	})
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return AdmissionStatus{}, &NotFoundError{Msg: fmt.Sprintf("set %q has no running admission (not submitted, submitted before admission existed, or every rollout already admitted and finished)", name)}
	}
	if err != nil {
		return AdmissionStatus{}, fmt.Errorf("change max_in_flight of set %q: %w", name, err)
	}
	var st AdmissionStatus
	if err := h.Get(ctx, &st); err != nil {
		return AdmissionStatus{}, fmt.Errorf("change max_in_flight of set %q: %w", name, err)
	}
	return st, nil
}

// admissionStamp is the stamp a submission's admission carries: the
// request's stamp, or, without a request id, its digest alone (batches of
// one Submit call still belong together; a second call is refused).
func (r SubmitRequest) admissionStamp() (set.SubmitStamp, error) {
	st, err := r.Stamp()
	if err != nil || st != nil {
		return derefStamp(st), err
	}
	data, err := json.Marshal(r)
	if err != nil {
		return set.SubmitStamp{}, fmt.Errorf("digest of the submission: %w", err)
	}
	return set.SubmitStamp{Digest: sha256Hex(data)}, nil
}

func derefStamp(s *SubmitStamp) set.SubmitStamp {
	if s == nil {
		return set.SubmitStamp{}
	}
	return *s
}

// splitBatches cuts inputs into the batches a submission hands the
// admission: whole units (a group's rollouts, which are consecutive), at
// most set.MaxBatchRollouts rollouts (one unit more, if a unit alone is
// larger), set.MaxBatchBytes of JSON and set.MaxBatchEnvs environments.
func splitBatches(inputs []rollout.Input) ([][]rollout.Input, error) {
	var out [][]rollout.Input
	var cur []rollout.Input
	size := 0
	envs := map[string]bool{}
	for i := 0; i < len(inputs); {
		unit := max(inputs[i].GroupSize, 1)
		if i+unit > len(inputs) {
			return nil, fmt.Errorf("rollout %s: its group of %d is cut short", inputs[i].RolloutID, unit)
		}
		u := inputs[i : i+unit]
		b, err := json.Marshal(u)
		if err != nil {
			return nil, fmt.Errorf("encode rollout %s: %w", u[0].RolloutID, err)
		}
		newEnvs := 0
		for _, in := range u {
			if !envs[in.Env.Name] {
				newEnvs++
			}
		}
		full := len(cur)+unit > set.MaxBatchRollouts || size+len(b) > set.MaxBatchBytes || len(envs)+newEnvs > set.MaxBatchEnvs
		if len(cur) > 0 && full {
			out = append(out, cur)
			cur, size, envs = nil, 0, map[string]bool{}
		}
		cur = append(cur, u...)
		size += len(b)
		for _, in := range u {
			envs[in.Env.Name] = true
		}
		i += unit
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out, nil
}

// BatchUpdateID is the update id of batch i of the submission stamped st:
// one per submission and batch, so a batch sent again is the same update.
func BatchUpdateID(st set.SubmitStamp, i int) string {
	id := st.RequestID
	if id == "" {
		id = "digest-" + st.Digest
	}
	return fmt.Sprintf("submit/%s/%d", id, i)
}

// enqueueSpec is one submission's hand-over to its set's admission.
type enqueueSpec struct {
	set         string
	inputs      []rollout.Input
	stamp       set.SubmitStamp
	maxInFlight int
	// resume: the admission exists (the same request made it): send only
	// the batches it does not hold.
	resume bool
}

// enqueue hands the inputs to the set's admission in batches, in order:
// the first with the admission's start (update with start), each next as
// one update. A submission made again (resume) sends only what the
// admission does not hold. It returns the rollouts this call handed over
// and those the admission held before.
func (c *Client) enqueue(ctx context.Context, s enqueueSpec) (sent, existing int, err error) {
	batches, err := splitBatches(s.inputs)
	if err != nil {
		return 0, 0, err
	}
	next := 0
	if s.resume {
		st, ok, err := queryAdmission(ctx, c.tc, s.set)
		if err != nil {
			return 0, 0, err
		}
		if ok {
			next = st.Received
		}
	}
	held := count(batches[:min(next, len(batches))])
	for ; next < len(batches); next++ {
		req := set.EnqueueRequest{Stamp: s.stamp, Batch: next, Batches: len(batches), Total: len(s.inputs), Inputs: batches[next]}
		if err := c.sendBatch(ctx, s, req, next == 0 && !s.resume); err != nil {
			return count(batches[:next]) - held, held, err
		}
		c.Failpoints.Hit(failpoint.SubmitBetweenBatches)
	}
	return len(s.inputs) - held, held, nil
}

func count(batches [][]rollout.Input) int {
	n := 0
	for _, b := range batches {
		n += len(b)
	}
	return n
}

// sendBatch sends one batch; withStart starts the admission with it.
func (c *Client) sendBatch(ctx context.Context, s enqueueSpec, req set.EnqueueRequest, withStart bool) error {
	upd := tclient.UpdateWorkflowOptions{
		WorkflowID: set.AdmissionWorkflowID(s.set), UpdateName: set.UpdateEnqueue, UpdateID: BatchUpdateID(s.stamp, req.Batch),
		Args: []any{req}, WaitForStage: tclient.WorkflowUpdateStageCompleted,
	}
	var h tclient.WorkflowUpdateHandle
	var err error
	if withStart {
		op := c.tc.NewWithStartWorkflowOperation(c.admissionStart(s, req), set.AdmissionWorkflowName, set.AdmissionInput{
			Set: s.set, TaskQueue: c.taskQueue, Stamp: s.stamp, MaxInFlight: s.maxInFlight,
			Batches: req.Batches, Total: req.Total,
		})
		h, err = c.tc.UpdateWithStartWorkflow(ctx, tclient.UpdateWithStartWorkflowOptions{StartWorkflowOperation: op, UpdateOptions: upd})
	} else {
		h, err = c.tc.UpdateWorkflow(ctx, upd)
	}
	if err == nil {
		err = h.Get(ctx, nil)
	}
	if err != nil {
		return batchError(s.set, req, err)
	}
	return nil
}

// admissionStart is how a submission starts its set's admission: on the
// control task queue, once per set (a set whose admission closed, its
// rollouts all done, is not submitted again).
func (c *Client) admissionStart(s enqueueSpec, req set.EnqueueRequest) tclient.StartWorkflowOptions {
	return tclient.StartWorkflowOptions{
		ID:                       set.AdmissionWorkflowID(s.set),
		TaskQueue:                checkpoint.ControlTaskQueue(c.taskQueue),
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		Memo:                     map[string]any{set.MemoSubmit: s.stamp},
		StaticSummary:            fmt.Sprintf("admission of set %s · %d rollouts in %d batches · at most %d at once", s.set, req.Total, req.Batches, s.maxInFlight),
	}
}

// batchError says why a batch was not queued: another submission owns the
// set (a conflict), the set's admission is over, or Temporal did not answer.
func batchError(name string, req set.EnqueueRequest, err error) error {
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	var app *temporal.ApplicationError
	switch {
	case errors.As(err, &already):
		return &ConflictError{Msg: fmt.Sprintf("set %q already exists and every rollout of it was admitted and finished; submit under a new --set name", name), Field: "set"}
	case errors.As(err, &app) && app.Type() == set.ErrSubmissionConflict:
		return &ConflictError{Msg: app.Message(), Field: "request_id"}
	}
	return fmt.Errorf("queue batch %d of %d of set %q: %w", req.Batch+1, req.Batches, name, err)
}

// queuedOf counts the rollouts of name its admission has not started, and
// those of each environment: zero for a set without admission.
func queuedOf(ctx context.Context, q admissionQuerier, name string) (int, map[string]int, error) {
	st, ok, err := queryAdmission(ctx, q, name)
	if err != nil || !ok {
		return 0, nil, err
	}
	return st.Queued, st.QueuedByEnv, nil
}

// HasAdmission says whether set has an admission, running or closed: a set
// whose admission exists is known even while visibility shows none of its
// rollouts yet (the admission starts them a moment after a submission
// returns, at most max_in_flight at once).
func (c *Client) HasAdmission(ctx context.Context, name string) (bool, error) {
	if err := rollout.ValidateSet(name); err != nil {
		return false, err
	}
	return hasAdmission(ctx, c.tc, name)
}

// admissionDescriber is the describe part of client.Client.
type admissionDescriber interface {
	DescribeWorkflow(ctx context.Context, workflowID, runID string) (*tclient.WorkflowExecutionDescription, error)
}

// hasAdmission describes name's admission; false when it has none.
func hasAdmission(ctx context.Context, d admissionDescriber, name string) (bool, error) {
	_, err := d.DescribeWorkflow(ctx, set.AdmissionWorkflowID(name), "")
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("look up the admission of set %q: %w", name, err)
	}
	return true, nil
}
