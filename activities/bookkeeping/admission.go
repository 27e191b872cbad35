package bookkeeping

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/internal/fanout"
	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/internal/visibility"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
	"github.com/turnstile-rl/turnstile/workflows/set"
)

// describeConcurrency bounds the describes of one reconciliation.
const describeConcurrency = 16

// BatchStore keeps a set's queued inputs: the transcript store (what
// transcriptstore.Store does).
type BatchStore interface {
	Put(ctx context.Context, data []byte) (transcript.Digest, error)
	Get(ctx context.Context, d transcript.Digest) ([]byte, error)
}

// AdmissionActivities are the activities of a set's admission (workflow
// SetAdmission) and the notice a rollout sends it. Register a pointer to it
// on the worker beside Activities.
type AdmissionActivities struct {
	Client client.Client
	Store  BatchStore
	// Starter starts the admitted rollouts; nil means NewStarter(Client).
	Starter RolloutStarter
}

func (a *AdmissionActivities) starter() RolloutStarter {
	if a.Starter != nil {
		return a.Starter
	}
	return NewStarter(a.Client)
}

// StoreAdmissionBatch writes a batch's inputs to the transcript store, as
// one JSON array, and returns its digest. It runs as a local activity of
// the admission's enqueue update, so the inputs pass through history once
// (the update's argument), not twice.
func (a *AdmissionActivities) StoreAdmissionBatch(ctx context.Context, in set.StoreBatchInput) (set.StoreBatchResult, error) {
	if err := rollout.ValidateSet(in.Set); err != nil {
		return set.StoreBatchResult{}, rollout.BadInput("store admission batch: %v", err)
	}
	if len(in.Inputs) == 0 {
		return set.StoreBatchResult{}, rollout.BadInput("store admission batch of set %s: no inputs", in.Set)
	}
	if a.Store == nil {
		return set.StoreBatchResult{}, rollout.BadInput("store admission batch: the worker has no transcript store")
	}
	data, err := json.Marshal(in.Inputs)
	if err != nil {
		return set.StoreBatchResult{}, rollout.BadInput("encode admission batch of set %s: %v", in.Set, err)
	}
	d, err := a.Store.Put(ctx, data)
	if err != nil {
		return set.StoreBatchResult{}, rollout.StoreError("admission batch of set "+in.Set, err)
	}
	return set.StoreBatchResult{Ref: string(d), Count: len(in.Inputs)}, nil
}

// AdmitRollouts starts the rollouts of the slices, in order, with the
// submission's stamp in their memo. A rollout started before (by an earlier
// try of this activity, or by the submission itself) counts as existing.
func (a *AdmissionActivities) AdmitRollouts(ctx context.Context, in set.AdmitInput) (set.AdmitResult, error) {
	if err := rollout.ValidateSet(in.Set); err != nil {
		return set.AdmitResult{}, rollout.BadInput("admit rollouts: %v", err)
	}
	if in.TaskQueue == "" {
		return set.AdmitResult{}, rollout.BadInput("admit rollouts of set %s: no task queue", in.Set)
	}
	inputs, err := a.load(ctx, in)
	if err != nil {
		return set.AdmitResult{}, err
	}
	outcomes, err := a.starter().Start(ctx, inputs, StartSpec{TaskQueue: in.TaskQueue, Stamp: in.Stamp})
	if err != nil {
		return set.AdmitResult{}, fmt.Errorf("admit rollouts of set %s: %w", in.Set, err)
	}
	res := set.AdmitResult{Admitted: []set.RunningRollout{}}
	for i, o := range outcomes {
		id := inputs[i].RolloutID
		switch {
		case o.Refused != nil:
			res.NotStarted = append(res.NotStarted, set.NotStarted{RolloutID: id, Reason: o.Refused.Error()})
			continue
		case o.Existing:
			res.Existing++
		default:
			res.Started++
		}
		res.Admitted = append(res.Admitted, set.RunningRollout{RolloutID: id, Attempt: o.Attempt})
	}
	activity.GetLogger(ctx).Info("admitted rollouts", "set", in.Set, "started", res.Started, "existing", res.Existing, "not_started", len(res.NotStarted))
	return res, nil
}

// load reads the inputs of the slices from the store, in order.
func (a *AdmissionActivities) load(ctx context.Context, in set.AdmitInput) ([]rollout.Input, error) {
	if a.Store == nil {
		return nil, rollout.BadInput("admit rollouts: the worker has no transcript store")
	}
	var out []rollout.Input
	for _, s := range in.Slices {
		batch, err := LoadBatch(ctx, a.Store, s.Ref)
		if err != nil {
			return nil, err
		}
		if s.From < 0 || s.Count < 1 || s.From+s.Count > len(batch) {
			return nil, rollout.BadInput("admit rollouts of set %s: slice %d+%d of a batch of %d", in.Set, s.From, s.Count, len(batch))
		}
		for _, b := range batch[s.From : s.From+s.Count] {
			b.Admission = true
			out = append(out, b)
		}
	}
	return out, nil
}

// LoadBatch reads a stored batch of inputs. A batch the store does not hold
// (or that does not decode) is a bad input: no retry brings it back.
func LoadBatch(ctx context.Context, st BatchStore, ref string) ([]rollout.Input, error) {
	d := transcript.Digest(ref)
	if err := d.Validate(); err != nil {
		return nil, rollout.BadInput("admission batch %q: %v", ref, err)
	}
	data, err := st.Get(ctx, d)
	if errors.Is(err, storage.ErrNotExist) {
		return nil, rollout.BadInput("admission batch %s is not in the transcript store", ref)
	}
	if err != nil {
		return nil, rollout.StoreError("admission batch "+ref, err)
	}
	var batch []rollout.Input
	if err := json.Unmarshal(data, &batch); err != nil {
		return nil, rollout.BadInput("admission batch %s: %v", ref, err)
	}
	return batch, nil
}

// NotifyAdmission signals a rollout's notice to its set's admission. An
// admission that is gone (its set done) has nothing to learn.
func (a *AdmissionActivities) NotifyAdmission(ctx context.Context, n rollout.AdmissionNotice) error {
	if err := rollout.ValidateSet(n.Set); err != nil {
		return rollout.BadInput("admission notice: %v", err)
	}
	err := a.Client.SignalWorkflow(ctx, set.AdmissionWorkflowID(n.Set), "", set.SignalFinished, n)
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("notice of %s to the admission of set %s: %w", n.RolloutID, n.Set, err)
	}
	return nil
}

// ReconcileAdmission finds which of the rollouts an admission believes
// running stopped working: visibility lists the set's working runs, and
// each rollout it does not list is described (visibility lags behind a run
// that just started). A rollout whose run closed, holds its result, or does
// not exist has stopped.
func (a *AdmissionActivities) ReconcileAdmission(ctx context.Context, in set.ReconcileInput) (set.ReconcileResult, error) {
	if err := rollout.ValidateSet(in.Set); err != nil {
		return set.ReconcileResult{}, rollout.BadInput("reconcile admission: %v", err)
	}
	working := map[string]bool{}
	filter := fmt.Sprintf(`ExecutionStatus = "Running" AND %s != %q`, rollout.SARolloutPhase, rollout.PhaseAwaitingAck)
	err := visibility.ListSet(ctx, a.Client, in.Set, filter, func(info *workflowpb.WorkflowExecutionInfo) error {
		if id, ok := rollout.IDOf(info.GetExecution().GetWorkflowId()); ok {
			working[id] = true
		}
		return nil
	})
	if err != nil {
		return set.ReconcileResult{}, fmt.Errorf("reconcile admission of set %s: %w", in.Set, err)
	}
	var unlisted []set.RunningRollout
	for _, r := range in.Running {
		if !working[r.RolloutID] {
			unlisted = append(unlisted, r)
		}
	}
	stopped := make([]bool, len(unlisted))
	err = fanout.Each(ctx, len(unlisted), describeConcurrency, func(ctx context.Context, i int) error {
		activity.RecordHeartbeat(ctx, i)
		s, err := stoppedWorking(ctx, a.Client, unlisted[i].RolloutID)
		stopped[i] = s
		return err
	})
	if err != nil {
		return set.ReconcileResult{}, fmt.Errorf("reconcile admission of set %s: %w", in.Set, err)
	}
	res := set.ReconcileResult{Finished: []set.RunningRollout{}}
	for i, r := range unlisted {
		if stopped[i] {
			res.Finished = append(res.Finished, r)
		}
	}
	return res, nil
}

// stoppedWorking describes a rollout's current run: closed, holding its
// result, or missing.
func stoppedWorking(ctx context.Context, c client.Client, id string) (bool, error) {
	desc, err := c.DescribeWorkflow(ctx, rollout.WorkflowID(id), "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("describe %s: %w", rollout.WorkflowID(id), err)
	}
	info := desc.RawResponse.GetWorkflowExecutionInfo()
	if info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return true, nil
	}
	phase, _ := visibility.SAKeyword(info.GetSearchAttributes(), rollout.SARolloutPhase)
	return phase == string(rollout.PhaseAwaitingAck), nil
}
