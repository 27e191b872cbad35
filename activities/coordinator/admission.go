package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/turnstile-rl/turnstile/activities/bookkeeping"
	"github.com/turnstile-rl/turnstile/internal/artifact"
	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
	"github.com/turnstile-rl/turnstile/workflows/set"
)

// A set's admission (workflow set.AdmissionWorkflowName) starts its queued
// rollouts as others finish. A checkpoint holds it while it cuts the set:
// the rollouts it runs are members of the cut, and the rollouts it has not
// started are recorded as not started, in submission order (the queued
// section of the agents artifact); the checkpoint's resume, or its abort,
// releases it. A restore ends the admission of the world it replaces and
// starts a new one from the checkpoint's queue, held until the restore
// resumes the set.

// memoRestoredBy is the memo field of an admission a restore started,
// naming the restore.
const memoRestoredBy = "restored_by"

// AdmissionEntry is the admission of a set at a checkpoint's cut, in its
// aggregate manifest: how far its submission had come and how many
// rollouts it had not started (the queued section holds them).
type AdmissionEntry struct {
	Stamp       set.SubmitStamp `json:"stamp"`
	MaxInFlight int             `json:"max_in_flight"`
	Batches     int             `json:"batches"`
	Received    int             `json:"received"`
	Total       int             `json:"total"`
	Enqueued    int             `json:"enqueued"`
	Queued      int             `json:"queued"`
}

// holdAdmission stops the set's admission for the checkpoint and returns
// what it runs and what waits; found is false when the set has no running
// admission (none, or every rollout of it admitted and finished).
func holdAdmission(ctx context.Context, tc client.Client, name, checkpointID string) (set.AdmissionSnapshot, bool, error) {
	h, err := tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: set.AdmissionWorkflowID(name), UpdateID: set.HoldUpdateID(checkpointID), UpdateName: set.UpdateHold,
		Args: []any{set.HoldRequest{CheckpointID: checkpointID}}, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	var snap set.AdmissionSnapshot
	if err == nil {
		err = h.Get(ctx, &snap)
	}
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		return snap, false, nil
	case err != nil:
		return snap, false, fmt.Errorf("hold the admission of set %s: %w", name, err)
	}
	return snap, true, nil
}

// releaseAdmission ends the checkpoint's hold of the set's admission. An
// admission that is gone, or held for another checkpoint, is left alone.
func releaseAdmission(ctx context.Context, tc client.Client, name, checkpointID string) error {
	err := tc.SignalWorkflow(ctx, set.AdmissionWorkflowID(name), "", set.SignalRelease, set.ReleaseRequest{CheckpointID: checkpointID})
	var nf *serviceerror.NotFound
	if err != nil && !errors.As(err, &nf) {
		return fmt.Errorf("release the admission of set %s: %w", name, err)
	}
	return nil
}

// stagedSet is the set a checkpoint's prepare staged, "" before it did.
func stagedSet(ctx context.Context, dir storage.Store, checkpointID string) (string, error) {
	sp, err := readStagedParticipants(ctx, dir, checkpointID)
	if errors.Is(err, storage.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return sp.Set, nil
}

// readStagedAdmission reads the admission snapshot a checkpoint's freeze
// staged; found is false when the set had no admission.
func readStagedAdmission(ctx context.Context, dir storage.Store, checkpointID string) (set.AdmissionSnapshot, bool, error) {
	var snap set.AdmissionSnapshot
	_, err := readJSONStrict(ctx, at(dir, checkpoint.StagingAdmission), &snap)
	switch {
	case errors.Is(err, storage.ErrNotExist):
		return snap, false, nil
	case err != nil:
		return snap, false, err
	case snap.CheckpointID != checkpointID:
		return snap, false, fmt.Errorf("%s is of checkpoint %q, not %q", at(dir, checkpoint.StagingAdmission), snap.CheckpointID, checkpointID)
	}
	return snap, true, nil
}

// queuedKey is the key of a queued rollout in the queued section: its
// submission index, zero-padded, so the keys sort in submission order.
func queuedKey(index int) string { return fmt.Sprintf("%09d", index) }

// queuedSection reads the queued inputs of a held admission from the
// transcript store, in submission order, as the queued section.
func (c *Coordinator) queuedSection(ctx context.Context, snap set.AdmissionSnapshot) (artifact.Section, error) {
	sec := artifact.Section{Name: checkpoint.SectionQueued, Records: []artifact.Record{}}
	if len(snap.Queue) > 0 && c.Store == nil {
		return sec, rollout.BadInput("coordinator: no transcript store configured")
	}
	for _, b := range snap.Queue {
		batch, err := bookkeeping.LoadBatch(ctx, c.Store, b.Ref)
		if err != nil {
			return sec, fmt.Errorf("queued rollouts of set %s: %w", snap.Set, err)
		}
		if len(batch) != b.Count {
			return sec, rollout.BadInput("queued batch %s of set %s holds %d rollouts, the admission says %d", b.Ref, snap.Set, len(batch), b.Count)
		}
		for i := b.Admitted; i < b.Count; i++ {
			data, err := json.Marshal(batch[i])
			if err != nil {
				return sec, fmt.Errorf("encode queued rollout %s: %w", batch[i].RolloutID, err)
			}
			sec.Records = append(sec.Records, artifact.Record{Key: queuedKey(b.First + i), Data: data})
		}
	}
	return sec, nil
}

// admissionEntry is the manifest's account of a held admission.
func admissionEntry(snap set.AdmissionSnapshot, queued int) *AdmissionEntry {
	return &AdmissionEntry{
		Stamp: snap.Stamp, MaxInFlight: snap.MaxInFlight, Batches: snap.Batches, Received: snap.Received,
		Total: snap.Total, Enqueued: snap.Enqueued, Queued: queued,
	}
}

// queuedRollout is one rollout a checkpoint recorded as not started.
type queuedRollout struct {
	index int
	input rollout.Input
}

// loadQueued reads and checks the queued section: every record decodes as
// a rollout of the set, under its submission index, in order, and as many
// as the manifest counts.
func (lc *loadedCheckpoint) loadQueued(ctx context.Context, agents *artifact.Checkpoint, checkpointID string) error {
	m := lc.manifest
	recs, err := agents.Section(ctx, checkpoint.SectionQueued)
	if err != nil {
		return invalidCheckpoint("checkpoint %s: queued: %v", checkpointID, err)
	}
	last := -1
	for _, r := range recs {
		idx, err := strconv.Atoi(r.Key)
		if err != nil || idx <= last || r.Key != queuedKey(idx) {
			return invalidCheckpoint("checkpoint %s: queued rollout key %q is not a submission index after %d", checkpointID, r.Key, last)
		}
		last = idx
		var in rollout.Input
		if err := json.Unmarshal(r.Data, &in); err != nil {
			return invalidCheckpoint("checkpoint %s: queued rollout %s: %v", checkpointID, r.Key, err)
		}
		if in.Set != m.Set || in.RolloutID == "" || in.Attempt != 0 || in.Resume != nil || in.Completed != nil {
			return invalidCheckpoint("checkpoint %s: queued rollout %s (%q of set %q) is not a fresh rollout of set %q", checkpointID, r.Key, in.RolloutID, in.Set, m.Set)
		}
		lc.queued = append(lc.queued, queuedRollout{index: idx, input: in})
	}
	if m.Admission == nil || len(recs) != m.Admission.Queued {
		return invalidCheckpoint("checkpoint %s: %d queued rollouts, MANIFEST.json counts %v", checkpointID, len(recs), m.Admission)
	}
	return nil
}

// replaceAdmission ends the set's admission, unless restore rid started
// it: it belongs to the world the restore replaces (the checkpoint holds
// its queue). It runs before the fence is written, so every rollout it
// started is fenced.
func replaceAdmission(ctx context.Context, tc client.Client, name, rid string) error {
	desc, err := tc.DescribeWorkflow(ctx, set.AdmissionWorkflowID(name), "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("describe the admission of set %s: %w", name, err)
	}
	info := desc.RawResponse.GetWorkflowExecutionInfo()
	if info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING || restoredBy(info.GetMemo().GetFields()) == rid {
		return nil
	}
	err = tc.TerminateWorkflow(ctx, set.AdmissionWorkflowID(name), info.GetExecution().GetRunId(), "restore "+rid+" replaces the set's world; its checkpoint holds the queue")
	if err != nil && !errors.As(err, &nf) {
		return fmt.Errorf("end the admission of set %s: %w", name, err)
	}
	return nil
}

func restoredBy(memo map[string]*commonpb.Payload) string {
	var rid string
	if p, ok := memo[memoRestoredBy]; ok {
		_ = converter.GetDefaultDataConverter().FromPayload(p, &rid)
	}
	return rid
}

// requeueSpec is what a restore queues again.
type requeueSpec struct {
	tc                client.Client
	rid, checkpointID string
	taskQueue         string
	lc                *loadedCheckpoint
	af                attemptsFile
	moved             map[string]string
}

// requeue starts the set's new admission from the checkpoint: its queued
// rollouts queued again in submission order (a rollout the replaced world
// started after the cut comes as the attempt the plan gave it), the
// restored rollouts it admitted running, held for the checkpoint until the
// restore resumes the set. A re-run of the same restore finds it started.
// It returns how many rollouts it queued.
func (c *Coordinator) requeue(ctx context.Context, s requeueSpec) (int, error) {
	a, name := s.lc.manifest.Admission, s.lc.manifest.Set
	if a == nil {
		return 0, nil
	}
	if mine, err := restoredAdmission(ctx, s.tc, name, s.rid); err != nil || mine {
		return len(s.lc.queued), err
	}
	queue, err := c.storeQueued(ctx, s)
	if err != nil {
		return 0, err
	}
	in := set.AdmissionInput{
		Set: name, TaskQueue: s.taskQueue, Stamp: a.Stamp, MaxInFlight: a.MaxInFlight,
		Batches: a.Batches, Received: a.Received, Total: a.Total, Enqueued: a.Enqueued,
		Queue: queue, Running: restoredRunning(s.lc, s.af), Hold: s.checkpointID, RestoredBy: s.rid,
	}
	_, err = s.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       set.AdmissionWorkflowID(name),
		TaskQueue:                checkpoint.ControlTaskQueue(s.taskQueue),
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_TERMINATE_EXISTING,
		Memo:                     map[string]any{set.MemoSubmit: a.Stamp, memoRestoredBy: s.rid},
		StaticSummary:            fmt.Sprintf("admission of set %s · restored by %s from checkpoint %s · %d queued", name, s.rid, s.checkpointID, len(s.lc.queued)),
	}, set.AdmissionWorkflowName, in)
	if err != nil {
		return 0, fmt.Errorf("start the admission of set %s: %w", name, err)
	}
	return len(s.lc.queued), nil
}

// restoredAdmission says whether the set's admission runs, started by
// restore rid.
func restoredAdmission(ctx context.Context, tc client.Client, name, rid string) (bool, error) {
	desc, err := tc.DescribeWorkflow(ctx, set.AdmissionWorkflowID(name), "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("describe the admission of set %s: %w", name, err)
	}
	info := desc.RawResponse.GetWorkflowExecutionInfo()
	return info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING && restoredBy(info.GetMemo().GetFields()) == rid, nil
}

// storeQueued puts the checkpoint's queued rollouts in the transcript
// store as batches of whole units, and returns the queue of the new
// admission.
func (c *Coordinator) storeQueued(ctx context.Context, s requeueSpec) ([]set.QueuedBatch, error) {
	if len(s.lc.queued) > 0 && c.Store == nil {
		return nil, rollout.BadInput("coordinator: no transcript store configured")
	}
	var queue []set.QueuedBatch
	for from := 0; from < len(s.lc.queued); {
		to := from
		for to < len(s.lc.queued) && to-from < set.MaxBatchRollouts {
			to += max(s.lc.queued[to].input.GroupSize, 1)
		}
		to = min(to, len(s.lc.queued))
		inputs := make([]rollout.Input, 0, to-from)
		for _, q := range s.lc.queued[from:to] {
			in := q.input
			if at, ok := s.af.Attempts[in.RolloutID]; ok {
				in.Attempt = at // started after the cut, and fenced: it comes back above
			}
			inputs = append(inputs, RemapEnvURL(in, s.moved))
		}
		data, err := json.Marshal(inputs)
		if err != nil {
			return nil, fmt.Errorf("encode queued rollouts: %w", err)
		}
		ref, err := c.Store.Put(ctx, data)
		if err != nil {
			return nil, rollout.StoreError("queued rollouts", err)
		}
		b, err := set.BatchOf(string(ref), s.lc.queued[from].index, s.lc.manifest.Set, inputs)
		if err != nil {
			return nil, invalidCheckpoint("checkpoint %s: queued rollouts %d..%d: %v", s.checkpointID, from, to-1, err)
		}
		queue = append(queue, b)
		from = to
	}
	return queue, nil
}

// restoredRunning are the restored rollouts the new admission counts as
// running: those its predecessor admitted (their runs report to it) that
// work again, not those offering a held result.
func restoredRunning(lc *loadedCheckpoint, af attemptsFile) []set.RunningRollout {
	var out []set.RunningRollout
	for _, id := range af.Start {
		rec := lc.parked[id]
		if rec.Input.Admission && restoreKind(rec) != checkpoint.RestoreOfferAgain {
			out = append(out, set.RunningRollout{RolloutID: id, Attempt: af.Attempts[id]})
		}
	}
	return out
}
