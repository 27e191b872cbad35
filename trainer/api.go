// Package trainer is the Go API of turnstile for a training pipeline: submit
// a set of rollouts (or a dataset, each row repeated as one group), wait for
// it, list and summarize it, read its results, export its trajectories,
// acknowledge them, and checkpoint, restore and resume the set. The starter
// CLI is flags and printing over this package.
//
//	import "github.com/turnstile-rl/turnstile/trainer"
//
//	tc, err := client.Dial(client.Options{}) // go.temporal.io/sdk/client
//	ts := trainer.New(tc, rollout.TaskQueue)
//	res, err := ts.Submit(ctx, trainer.SubmitRequest{Set: "s1", Count: 64, Envs: []string{"counter"}})
//	err = ts.Wait(ctx, trainer.WaitRequest{Set: "s1", Inputs: res.Inputs})
//	sum, err := ts.Summary(ctx, "s1")
//
//	rows, err := trainer.ReadDataset(f) // JSONL; every bad row reported at once
//	res, err = ts.Submit(ctx, trainer.SubmitRequest{Set: "d1", Rows: rows, Repeats: 8})
//	store, err := trainer.OpenTranscripts(ctx, dir) // the workers' TURNSTILE_TRANSCRIPT_DIR
//	stats, err := ts.Export(ctx, "d1", store, w)
package trainer

import (
	"encoding/json"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	tclient "go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// Client runs turnstile's pipeline and operator steps against a Temporal
// client. It holds no state of its own beyond its configuration, so one
// Client may be used from many goroutines.
type Client struct {
	tc        tclient.Client
	taskQueue string
	// OnStart, when set, is called as soon as a Checkpoint or Restore
	// workflow has started, before any wait for its result, so an operator
	// learns its id while it runs.
	OnStart func(Started)
	// newControl builds the control-plane client of an environment server
	// (a fake in tests).
	newControl func(url, token string) controlResumer
	// Failpoints, when armed, kill this process at named places of a
	// submission or an acknowledgement (crash tests; the starter and the
	// gateway arm them from TURNSTILE_FAILPOINTS; nil: unarmed).
	Failpoints *failpoint.Set
}

// New returns a Client that starts rollouts and coordinator workflows on
// taskQueue through tc. tc stays the caller's to close.
func New(tc tclient.Client, taskQueue string) *Client {
	return &Client{
		tc:        tc,
		taskQueue: taskQueue,
		newControl: func(url, token string) controlResumer {
			return protocol.NewControlClient(url, token, nil)
		},
	}
}

// TaskQueue is the task queue the client starts workflows on.
func (c *Client) TaskQueue() string { return c.taskQueue }

// SubmitRequest is one submission of a set of rollouts.
type SubmitRequest struct {
	Set   string
	Count int
	// Sampling applies to every rollout of the set (a dataset row's own
	// sampling replaces it for that row); nil leaves the endpoint's
	// defaults.
	Sampling *rollout.Sampling
	// Envs are the environments of the set; rollout i runs in
	// Envs[i % len(Envs)].
	Envs []string
	// EnvServer names the environment server of every rollout among the
	// workers' configured ones (TURNSTILE_ENV_SERVERS); EnvURL names one by
	// URL, which the workers admit only when it is a configured server's or
	// an allowlist's (TURNSTILE_ALLOWED_ENV_URLS). Neither: the workers'
	// default; not both.
	EnvServer string `json:",omitempty"`
	EnvURL    string
	// Policy is the model of every rollout; empty means each rollout's
	// environment's scripted policy ("scripted-<env>").
	Policy string
	// PolicyEndpoint names the model endpoint among the workers'
	// configured ones (TURNSTILE_MODEL_ENDPOINTS); ModelURL names one by
	// base URL (admitted like EnvURL, by TURNSTILE_ALLOWED_MODEL_URLS).
	// Neither: the workers' default; not both.
	PolicyEndpoint string `json:",omitempty"`
	ModelURL       string
	Seed           int64
	// MaxTurns limits every rollout; 0 means each environment's default
	// (DefaultMaxTurns).
	MaxTurns   int
	RequireAck bool
	// ProgressEvery is how often a working rollout publishes its progress
	// time at most (rollout.Input.ProgressEvery; 0: the rollout's default).
	// A health window shorter than it would call a working set stalled, so
	// a watcher with a short window submits with at most half of it.
	ProgressEvery time.Duration
	// Budgets of every rollout (rollout.Limits); zero keeps each default:
	// rollout.DefaultModelCallTimeout, rollout.DefaultEnvCallTimeout,
	// unlimited model-call attempts, no deadline.
	ModelCallTimeout time.Duration
	EnvCallTimeout   time.Duration
	ModelCallRetries int
	Deadline         time.Duration
	// Rows, when set, submit a dataset instead of Count rollouts of Envs:
	// each row Repeats times, as one group (see DatasetRow). Count, Envs
	// and Seed must then be zero; Policy, ModelURL and MaxTurns are the
	// defaults of rows that set none.
	Rows    []DatasetRow
	Repeats int
	// GroupRetries is the retry budget of each of a dataset's groups (see
	// rollout.Limits.GroupRetries): environment-level failures retried as
	// new attempts, over all of a group's rollouts, before the group fails
	// as a whole. Nil means rollout.DefaultGroupRetries; dataset only.
	GroupRetries *int
	// Declared are the environments the request's environment server
	// declares (Declare fetches them): a dataset row may name one that is
	// not in the catalog. Nil admits catalog environments only.
	Declared []envs.Spec `json:"-"`
	// RequestID, when set, makes Submit idempotent under it: every rollout
	// started carries it in its memo (MemoSubmit, with a digest of the
	// request), and a set whose rollouts carry the same request id and
	// digest is completed (rollouts not started yet are started, the
	// others counted as Existing) instead of refused.
	RequestID string `json:"-"`
	// MaxInFlight bounds how many of the set's rollouts run at once: the
	// set's admission (a workflow of its own) starts the rest in order as
	// others finish; 0 means DefaultMaxInFlight. It is not part of the
	// request's digest: it may change while the set runs (SetMaxInFlight).
	MaxInFlight int `json:"-"`
	// AutoRecover, when set, turns on automatic recovery for the set: once
	// its rollouts are queued, Submit starts the set's watchdog (see
	// AutoRecover and StartWatchdog). Its settings are checked before
	// anything starts. Not part of the request's digest.
	AutoRecover *AutoRecover `json:"-"`
}

// SubmitResult is what a submission handed to its set's admission.
type SubmitResult struct {
	// Inputs are the attempt-0 inputs of every rollout, in index order.
	Inputs []rollout.Input
	// Started counts the rollouts this call queued at the set's admission
	// (each starts as soon as max_in_flight allows); below len(Inputs) only
	// when Submit failed. Existing counts those an earlier submission of
	// the same request (RequestID) had queued.
	Started  int
	Existing int
	// MaxInFlight is the set's max_in_flight at submission.
	MaxInFlight int
	// Watchdog is the set's watchdog, when AutoRecover was set.
	Watchdog *Started
}

// WaitRequest is what Wait waits for.
type WaitRequest struct {
	Set string
	// Inputs are the set's rollouts (SubmitResult.Inputs).
	Inputs []rollout.Input
	// RequireAck: the set holds its results for acknowledgement, so wait
	// until every rollout holds one (or has closed), not until all close.
	RequireAck bool
	// Progress, when set, is told about each rollout done.
	Progress Progress
}

// Progress counts rollouts done for a reader.
type Progress interface {
	Increment()
	// Finish ends the display; ok is false when the wait failed.
	Finish(ok bool)
}

// RolloutRecord is what visibility (and, for closed runs, the run's result)
// tells about the latest run of one rollout.
type RolloutRecord struct {
	RolloutID  string
	WorkflowID string
	RunID      string
	Status     enumspb.WorkflowExecutionStatus
	Phase      string
	Attempt    int64
	Turn       int64
	Start      time.Time
	Close      time.Time // zero while running
	// Env is the rollout's environment: from its result, its memo
	// (rollout.MemoEnv), or its start input.
	Env string
	// Result is set for a completed run once fetched (and for a running
	// one holding its result for acknowledgement, in Results); Err for a
	// run that closed any other way.
	Result *rollout.Result
	Err    string
	// Fenced is set for a run that stopped FencedByRestore: a restore of
	// the set rolled back the world it started in. Readers leave it out.
	Fenced bool
	// heldSHA is the run's rollout.SARolloutReceipt: the digest its held
	// result is stored under ("" for a run that named none).
	heldSHA string
}

// StatusCounts counts the latest runs of a set by phase and by execution
// status.
type StatusCounts struct {
	Phases   map[string]int `json:"phases"`
	Statuses map[string]int `json:"statuses"`
}

// Summary condenses a set from the latest run of each of its rollouts and
// its admission: Rollouts = Completed + Failed + Running + Queued.
// Completed counts latest runs closed Completed (acknowledged, or never
// held); a held result is still Running. Health counts runs instead (see
// Health).
type Summary struct {
	Rollouts  int `json:"rollouts"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`  // closed any way but completed: failed, terminated, timed out, canceled
	Running   int `json:"running"` // not closed: working, parked, or holding a result
	// Queued rollouts wait in the set's admission: not started yet (phase
	// queued).
	Queued int `json:"queued"`
	// Means over completed rollouts whose result was read.
	MeanReward float64 `json:"mean_reward"`
	MeanTurns  float64 `json:"mean_turns"`
	// Rollout time of the latest run (close − start), over completed
	// rollouts; in JSON as p50_ms and p95_ms.
	P50 time.Duration `json:"-"`
	P95 time.Duration `json:"-"`
}

// EnvSummary condenses the rollouts of one environment of a set.
type EnvSummary struct {
	Env       string `json:"env"`
	Rollouts  int    `json:"rollouts"`
	Completed int    `json:"completed"`
	Failed    int    `json:"failed"`
	Running   int    `json:"running"`
	Queued    int    `json:"queued"`
	// Passed counts completed rollouts whose reward passes (see Passed).
	Passed int `json:"passed"`
	// Means over completed rollouts whose result was read.
	MeanReward float64 `json:"mean_reward"`
	MeanTurns  float64 `json:"mean_turns"`
}

// SetSummary is a set condensed overall and per environment.
type SetSummary struct {
	Overall Summary      `json:"overall"`
	ByEnv   []EnvSummary `json:"by_env"`
}

// ReceiptLine is one receipt read from a receipts file, with its line
// number for messages.
type ReceiptLine struct {
	Line    int
	Receipt rollout.Receipt
}

// AckRequest acknowledges results of a set: the receipts given (validated
// as a whole batch first), or, with AllCompleted, every result held for
// acknowledgement with its current receipt.
type AckRequest struct {
	Set          string
	Receipts     []ReceiptLine
	AllCompleted bool
	// Field, when set, names the receipts in messages as elements of a JSON
	// array of that name instead of by line (the gateway's "receipts":
	// line 3 is "receipts[2]"), and a ConflictError names the first bad
	// one, with its field at fault ("receipts[2].sha256"), in its Field.
	Field string
	// RequestID, when set, makes the acknowledgement idempotent under it
	// across processes: once it has succeeded, the same request (same set,
	// request id and receipts) answers the same summary again without
	// acknowledging anything, and another request under the same id is a
	// ConflictError (see AckRecordWorkflowID).
	RequestID string
}

// HeldState is what a rollout holds now: its latest run's phase and the
// result it holds for acknowledgement (running) or completed with
// (closed).
type HeldState struct {
	WorkflowID string
	Running    bool
	Phase      rollout.Phase
	Result     *rollout.Result
	// Err is why a closed run has no result.
	Err string
}

// AckPlan is a validated batch.
type AckPlan struct {
	// Set is the set the receipts are of.
	Set string
	// Send are the receipts to acknowledge, in rollout id order.
	Send []rollout.Receipt
	// Already are rollouts whose result with that receipt was accepted
	// before (acknowledged, or never held): nothing to send.
	Already []string
}

// AckSummary counts what an acknowledgement did.
type AckSummary struct {
	// Acknowledged receipts are recorded now in the set's acknowledgement
	// ledger (their rollouts are released afterwards, off the caller's
	// path); Already ones were accepted before (recorded, released, or
	// never held).
	Acknowledged int `json:"acknowledged"`
	Already      int `json:"already"`
	// Closed counts rollouts that closed before their acknowledgement
	// reached them; an acknowledgement through the ledger reports none
	// (the field stays for the answers recorded before it).
	Closed int `json:"closed"`
}

// CheckpointRequest is one coordinated checkpoint of a set.
type CheckpointRequest struct {
	Set          string
	CheckpointID string
	// Root is the directory the checkpoint goes under; a relative one is
	// made absolute against the working directory.
	Root         string
	Participants []string
	// Timeout (a duration) or Deadline (absolute) bounds the cut; exactly
	// one is set.
	Timeout    time.Duration
	Deadline   time.Time
	StayPaused bool
	// Tag is the trainer step or policy version the checkpoint belongs to
	// (TAG.json beside its manifest); Keep > 0 applies the set's retention
	// after the commit (the Keep newest checkpoints and the pinned ones
	// stay). A checkpoint on each trainer step is a Checkpoint with the
	// step as its tag.
	Tag  string
	Keep int
}

// RestoreRequest is one restore of a committed checkpoint.
type RestoreRequest struct {
	CheckpointID string
	// RestoreID names the restore (empty: the checkpoint id); restoring a
	// checkpoint a second time takes a new one.
	RestoreID    string
	Root         string
	Participants []string
}

// Started names a coordinator workflow that has started.
type Started struct {
	WorkflowID string `json:"workflow_id"`
	RunID      string `json:"run_id"`
	TaskQueue  string `json:"task_queue"`
}

// ResumeRequest releases a checkpoint taken with StayPaused.
type ResumeRequest struct {
	Set          string
	CheckpointID string
	Participants []string
	// ControlToken is the environment servers' control token (see
	// ControlToken).
	ControlToken string
	// TokenFor, when set, gives the control token of each participant
	// instead (a server may have one of its own) and may refuse one that
	// is not a configured destination: an error stops the resume before
	// anything is sent.
	TokenFor func(url string) (string, error)
}

// ResumeSummary counts what a resume did.
type ResumeSummary struct {
	Participants int `json:"participants"` // environment servers resumed
	Rollouts     int `json:"rollouts"`     // running rollouts sent the resume update
	Closed       int `json:"closed"`       // rollouts that closed before the update reached them
}

// MarshalJSON writes the durations as whole milliseconds (p50_ms, p95_ms),
// the way every other turnstile JSON output spells a duration.
func (s Summary) MarshalJSON() ([]byte, error) {
	type plain Summary
	return json.Marshal(struct {
		plain
		P50Millis int64 `json:"p50_ms"`
		P95Millis int64 `json:"p95_ms"`
	}{plain(s), s.P50.Milliseconds(), s.P95.Milliseconds()})
}
