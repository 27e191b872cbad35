package set

import (
	"fmt"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// A set's admission (workflow type SetAdmission, ID AdmissionWorkflowID)
// owns the queue of the set's rollouts and runs at most MaxInFlight of them
// at once: a submission hands it the rollouts' inputs in batches (update
// UpdateEnqueue), it starts them in submission order through the
// AdmitRollouts activity as room allows, a group's rollouts together, and
// each rollout it started tells it when it stops working (signal
// SignalFinished, sent by the rollout's NotifyAdmission local activity).
// The queue lives in Temporal, not in the submitting process: a submitter
// that dies loses nothing, and a submission sent again under the same
// request id completes the queue instead of doubling it.
//
// Its history stays small: the inputs of a batch pass through history once
// (the update's argument), then live in the transcript store (a local
// activity writes them; its marker records only their digest), and the
// state carries the digests of the batches not yet admitted, the rollouts
// running and counts; it continues as new when Temporal suggests it.
const (
	AdmissionWorkflowName = "SetAdmission"
	admissionIDPrefix     = "admission/"
)

// AdmissionWorkflowID is the workflow ID of set's admission.
func AdmissionWorkflowID(set string) string { return admissionIDPrefix + set }

// Bounds of admission.
const (
	// MaxMaxInFlight bounds max_in_flight.
	MaxMaxInFlight = 100_000
	// MaxBatchRollouts and MaxBatchBytes bound one batch of a submission
	// (a group is never split, so a batch may hold one group beyond the
	// count); the bytes are the JSON of its inputs.
	MaxBatchRollouts = 256
	MaxBatchBytes    = 512 << 10
	// MaxBatches bounds the batches of one submission.
	MaxBatches = 100_000
	// MaxBatchEnvs bounds the distinct environments of one batch (each
	// queued rollout keeps its environment as one byte).
	MaxBatchEnvs = 255
)

// Message names of the SetAdmission workflow.
const (
	// UpdateEnqueue hands the admission one batch of a submission (an
	// EnqueueRequest); it answers an EnqueueResult. Batches come in order:
	// one already received is accepted again and changes nothing, one
	// beyond the next is refused.
	UpdateEnqueue = "enqueue"
	// UpdateMaxInFlight changes max_in_flight (a MaxInFlightRequest) and
	// answers the AdmissionStatus; a raise starts queued rollouts at once.
	UpdateMaxInFlight = "max-in-flight"
	// UpdateHold stops admission for a checkpoint (a HoldRequest) once no
	// start is in flight, and answers the AdmissionSnapshot of that moment:
	// the rollouts it runs and the queue. A second hold for another
	// checkpoint is refused while one holds.
	UpdateHold = "hold"
	// SignalRelease ends the hold of the checkpoint named (a
	// ReleaseRequest); one of another checkpoint is ignored.
	SignalRelease = "release"
	// SignalFinished is a rollout's notice (rollout.AdmissionNotice).
	SignalFinished = "rollout-finished"
	// QueryStatus answers the AdmissionStatus.
	QueryStatus = "status"
)

// Activities the SetAdmission workflow runs (package
// activities/bookkeeping).
const (
	// StoreAdmissionBatchName writes a batch's inputs to the transcript
	// store (a local activity: its input stays out of history).
	StoreAdmissionBatchName = "StoreAdmissionBatch"
	// AdmitRolloutsName starts rollouts of stored batches, in order.
	AdmitRolloutsName = "AdmitRollouts"
	// ReconcileAdmissionName finds which of the rollouts the admission
	// believes running have stopped working without a notice (a run
	// terminated, a notice lost).
	ReconcileAdmissionName = "ReconcileAdmission"
)

// ErrSubmissionConflict is the type of an enqueue refused because the set
// is being submitted by another request (another request id, or the same
// id with another body).
const ErrSubmissionConflict = "SubmissionConflict"

// MemoSubmit is the memo field naming the submission that made a set (a
// SubmitStamp): on its admission workflow and on every rollout it starts.
const MemoSubmit = "submit"

// SubmitStamp names a submission: its request id (empty when it had none)
// and a digest of the rest of the request, so a request id reused for
// another request is caught.
type SubmitStamp struct {
	RequestID string `json:"request_id"`
	Digest    string `json:"digest"`
}

// AdmissionInput starts (or continues as new) a set's admission: its whole
// state.
type AdmissionInput struct {
	Set string `json:"set"`
	// TaskQueue is where the rollouts run (the admission itself runs on the
	// control task queue).
	TaskQueue   string      `json:"task_queue"`
	Stamp       SubmitStamp `json:"stamp"`
	MaxInFlight int         `json:"max_in_flight"`
	// Batches is how many batches the submission has; Received how many
	// the admission holds; Total the rollouts of the whole submission and
	// Enqueued those of the batches received (the submission index of the
	// next batch's first rollout).
	Batches  int `json:"batches"`
	Received int `json:"received"`
	Total    int `json:"total"`
	Enqueued int `json:"enqueued"`
	// Queue holds the batches not wholly admitted, in order.
	Queue []QueuedBatch `json:"queue,omitempty"`
	// Running are the rollouts admitted that have not reported they stopped
	// working, with the attempt admitted; sorted by rollout id.
	Running []RunningRollout `json:"running,omitempty"`
	// Hold is the checkpoint that holds admission ("" when none).
	Hold   string          `json:"hold,omitempty"`
	Counts AdmissionCounts `json:"counts"`
	// RestoredBy names the restore that started this admission (a new
	// chain of runs); empty for a submission's.
	RestoredBy string `json:"restored_by,omitempty"`
}

// QueuedBatch is a batch of queued inputs in the transcript store: a JSON
// array of rollout.Input under the digest Ref.
type QueuedBatch struct {
	Ref string `json:"ref"`
	// First is the submission index of the batch's first rollout; Count
	// how many it holds; Admitted how many of them were admitted.
	First    int `json:"first"`
	Count    int `json:"count"`
	Admitted int `json:"admitted,omitempty"`
	// Unit is how many consecutive rollouts are admitted together: a
	// dataset row's group (its repeats), 1 outside datasets.
	Unit int `json:"unit"`
	// Envs are the batch's environments and EnvOf each rollout's, as an
	// index into Envs: what the set's summary counts queued rollouts by.
	Envs  []string `json:"envs"`
	EnvOf []byte   `json:"env_of"`
}

// Queued is how many of b's rollouts wait.
func (b QueuedBatch) Queued() int { return b.Count - b.Admitted }

// RunningRollout is a rollout admitted and working, with its attempt.
type RunningRollout struct {
	RolloutID string `json:"rollout_id"`
	Attempt   int    `json:"attempt"`
}

// AdmissionCounts count what an admission did over its runs.
type AdmissionCounts struct {
	// Admitted rollouts were handed to AdmitRollouts; Finished reported
	// they stopped working (or reconciliation found so); NotStarted could
	// not be started (an input Temporal refused for good).
	Admitted   int `json:"admitted"`
	Finished   int `json:"finished"`
	NotStarted int `json:"not_started"`
}

// AdmissionResult is what a closed admission did: every rollout of its
// submission was admitted and stopped working.
type AdmissionResult struct {
	Set    string          `json:"set"`
	Total  int             `json:"total"`
	Counts AdmissionCounts `json:"counts"`
}

// EnqueueRequest is one batch of a submission.
type EnqueueRequest struct {
	Stamp SubmitStamp `json:"stamp"`
	// Batch is this batch's index, Batches how many the submission has,
	// Total its rollouts.
	Batch   int             `json:"batch"`
	Batches int             `json:"batches"`
	Total   int             `json:"total"`
	Inputs  []rollout.Input `json:"inputs"`
}

// EnqueueResult says how many batches the admission holds after a batch.
type EnqueueResult struct {
	Received int `json:"received"`
	Batches  int `json:"batches"`
	Queued   int `json:"queued"`
}

// MaxInFlightRequest changes a set's max_in_flight.
type MaxInFlightRequest struct {
	MaxInFlight int `json:"max_in_flight"`
}

// HoldRequest holds a set's admission for a checkpoint.
type HoldRequest struct {
	CheckpointID string `json:"checkpoint_id"`
}

// ReleaseRequest ends the hold of a checkpoint.
type ReleaseRequest struct {
	CheckpointID string `json:"checkpoint_id"`
}

// HoldUpdateID is the update id of checkpointID's hold: one per
// checkpoint, so a retried hold gets the same snapshot.
func HoldUpdateID(checkpointID string) string { return checkpointID + "/admission-hold" }

// AdmissionSnapshot is the admission when a checkpoint held it: what runs
// (the checkpoint's members among them) and what waits, in order (the
// checkpoint records it as not started).
type AdmissionSnapshot struct {
	Set          string           `json:"set"`
	CheckpointID string           `json:"checkpoint_id"`
	Stamp        SubmitStamp      `json:"stamp"`
	MaxInFlight  int              `json:"max_in_flight"`
	Batches      int              `json:"batches"`
	Received     int              `json:"received"`
	Total        int              `json:"total"`
	Enqueued     int              `json:"enqueued"`
	Running      []RunningRollout `json:"running"`
	Queue        []QueuedBatch    `json:"queue"`
}

// AdmissionStatus answers QueryStatus: where a set's admission stands.
type AdmissionStatus struct {
	Set         string `json:"set"`
	MaxInFlight int    `json:"max_in_flight"`
	Running     int    `json:"running"`
	Queued      int    `json:"queued"`
	// QueuedByEnv counts the queued rollouts per environment.
	QueuedByEnv map[string]int `json:"queued_by_env"`
	Total       int            `json:"total"`
	// Enqueued counts the rollouts of the batches received; Total minus
	// Enqueued are still to arrive.
	Enqueued int             `json:"enqueued"`
	Batches  int             `json:"batches"`
	Received int             `json:"received"`
	Hold     string          `json:"hold,omitempty"`
	Counts   AdmissionCounts `json:"counts"`
}

// Complete says whether every batch of the submission was received.
func (s AdmissionStatus) Complete() bool { return s.Received >= s.Batches }

// Store-batch and admit activity contracts.

// StoreBatchInput is a batch to store.
type StoreBatchInput struct {
	Set    string          `json:"set"`
	Inputs []rollout.Input `json:"inputs"`
}

// StoreBatchResult names the stored batch.
type StoreBatchResult struct {
	Ref   string `json:"ref"`
	Count int    `json:"count"`
}

// AdmitSlice is a contiguous run of a stored batch to start: inputs
// [From, From+Count) of the batch Ref.
type AdmitSlice struct {
	Ref   string `json:"ref"`
	From  int    `json:"from"`
	Count int    `json:"count"`
}

// AdmitInput starts rollouts, in order.
type AdmitInput struct {
	Set       string       `json:"set"`
	TaskQueue string       `json:"task_queue"`
	Stamp     SubmitStamp  `json:"stamp"`
	Slices    []AdmitSlice `json:"slices"`
}

// AdmitResult counts the starts. Admitted are the rollouts that run now
// (started, or found started before by an earlier try), in order, with
// their attempt; NotStarted are rollouts Temporal refused for good (their
// slot is free again).
type AdmitResult struct {
	Started    int              `json:"started"`
	Existing   int              `json:"existing"`
	Admitted   []RunningRollout `json:"admitted"`
	NotStarted []NotStarted     `json:"not_started,omitempty"`
}

// NotStarted is a rollout that could not be started, and why.
type NotStarted struct {
	RolloutID string `json:"rollout_id"`
	Reason    string `json:"reason"`
}

// ReconcileInput asks which of Running stopped working.
type ReconcileInput struct {
	Set     string           `json:"set"`
	Running []RunningRollout `json:"running"`
}

// ReconcileResult are the rollouts of the input that no longer work: their
// run closed, holds its result, or does not exist.
type ReconcileResult struct {
	Finished []RunningRollout `json:"finished"`
}

// ValidateMaxInFlight checks a max_in_flight value (what names it in the
// error).
func ValidateMaxInFlight(what string, n int) error {
	if n < 1 || n > MaxMaxInFlight {
		return fmt.Errorf("%s %d: want 1..%d", what, n, MaxMaxInFlight)
	}
	return nil
}
