// Package gateway is turnstile's HTTP door for a training pipeline: REST and
// JSON over the Go client library (package client), with a long-poll
// results feed that hands finished rollouts to a trainer in completion
// order and keeps each held until its receipt is acknowledged.
//
// The gateway is stateless: everything it answers comes from Temporal (and
// the checkpoint and transcript directories), and every state-changing call
// is idempotent under the request_id its body carries, so any number of
// gateways may serve one set and a restarted gateway loses nothing.
//
// This file is the wire contract; openapi.json documents the same shapes and
// a test keeps the two in step.
package gateway

import (
	"encoding/json"
	"time"

	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// Error codes of an ErrorBody, each with one HTTP status.
const (
	CodeUnauthorized = "unauthorized" // 401
	CodeForbidden    = "forbidden"    // 403: the token's role may not use the route
	CodeBadRequest   = "bad_request"  // 400
	CodeNotFound     = "not_found"    // 404
	CodeConflict     = "conflict"     // 409
	CodeSetStalled   = "set_stalled"  // 409: the feed's watchdog saw no progress
	CodeUnavailable  = "unavailable"  // 503: Temporal, a worker or a directory is missing
)

// ErrorBody is every non-2xx answer.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
	// Health is set on a set_stalled error: what the watchdog saw.
	Health *Health `json:"health,omitempty"`
}

// ErrorDetail says what went wrong; Field is the JSON path of the request
// field at fault ("count", "receipts[2].sha256", "cursor"), or empty.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field"`
}

// SubmitRequest is POST /v1/sets: the fields of trainer.SubmitRequest in
// snake case. Exactly one of envs+count, rows or dataset_path.
type SubmitRequest struct {
	RequestID string `json:"request_id"`
	Set       string `json:"set"`
	// Envs and Count: Count rollouts, rollout i in Envs[i % len(Envs)].
	Envs  []string `json:"envs,omitempty"`
	Count int      `json:"count,omitempty"`
	Seed  int64    `json:"seed,omitempty"`
	// Rows (inline) or DatasetPath (a JSONL file under the gateway's
	// dataset root): a dataset, each row Repeats times as one group.
	Rows        []trainer.DatasetRow `json:"rows,omitempty"`
	DatasetPath string               `json:"dataset_path,omitempty"`
	Repeats     int                  `json:"repeats,omitempty"`
	Policy      string               `json:"policy,omitempty"`
	// PolicyEndpoint names a model endpoint the workers' operator
	// configured; ModelURL one by base URL, admitted only when configured
	// or allowlisted. Neither: the workers' default.
	PolicyEndpoint string `json:"policy_endpoint,omitempty"`
	ModelURL       string `json:"model_url,omitempty"`
	// EnvServer names an environment server the workers' operator
	// configured; EnvURL one by URL, admitted only when configured or
	// allowlisted. Neither: the workers' default.
	EnvServer string            `json:"env_server,omitempty"`
	EnvURL    string            `json:"env_url,omitempty"`
	MaxTurns  int               `json:"max_turns,omitempty"`
	Sampling  *rollout.Sampling `json:"sampling,omitempty"`
	Limits    *SubmitLimits     `json:"limits,omitempty"`
	// RequireAck holds every result until acknowledged; default true (the
	// feed delivers held results).
	RequireAck *bool `json:"require_ack,omitempty"`
	// MaxInFlight bounds how many of the set's rollouts run at once; the
	// set's admission starts the others in order as these finish (a
	// dataset's groups whole). 0: the default (trainer.DefaultMaxInFlight).
	MaxInFlight int `json:"max_in_flight,omitempty"`
}

// SubmitLimits are a set's budgets; durations are Go duration strings
// ("90s", "5m").
type SubmitLimits struct {
	ModelCallTimeout string `json:"model_call_timeout,omitempty"`
	EnvCallTimeout   string `json:"env_call_timeout,omitempty"`
	ModelCallRetries int    `json:"model_call_retries,omitempty"`
	Deadline         string `json:"deadline,omitempty"`
}

// SubmitResponse says what the set holds after the call: Started rollouts
// this call started, Existing ones an earlier call with the same request
// started (a repeat starts nothing and reports them all as existing).
type SubmitResponse struct {
	Set       string `json:"set"`
	RequestID string `json:"request_id"`
	Rollouts  int    `json:"rollouts"`
	Started   int    `json:"started"`
	Existing  int    `json:"existing"`
	// MaxInFlight is the set's max_in_flight at submission.
	MaxInFlight int `json:"max_in_flight"`
}

// MaxInFlightRequest is POST /v1/sets/{set}/max_in_flight: how many of the
// set's rollouts may run at once from now on. A raise starts queued
// rollouts at once; a cut lets the running ones finish.
type MaxInFlightRequest struct {
	RequestID   string `json:"request_id"`
	MaxInFlight int    `json:"max_in_flight"`
}

// AdmissionResponse is the set's admission after the change: its
// max_in_flight, how many rollouts run and how many wait queued.
type AdmissionResponse struct {
	Set         string `json:"set"`
	MaxInFlight int    `json:"max_in_flight"`
	Running     int    `json:"running"`
	Queued      int    `json:"queued"`
	Total       int    `json:"total"`
}

// SetResponse is GET /v1/sets/{set}: the set's summary and health.
type SetResponse struct {
	Set     string               `json:"set"`
	Overall trainer.Summary      `json:"overall"`
	ByEnv   []trainer.EnvSummary `json:"by_env"`
	Health  Health               `json:"health"`
}

// Health is what a trainer needs to decide whether to keep waiting (see
// trainer.Health for each field).
type Health = trainer.Health

// FeedResponse is GET /v1/sets/{set}/feed.
type FeedResponse struct {
	// Items are export lines (docs/trajectory.schema.json) of finished
	// rollouts in completion order: held results with their receipt, and
	// failed rollouts with their failure.
	Items []json.RawMessage `json:"items"`
	// Cursor resumes the feed after the last item (or where this poll
	// stopped looking); pass it back unchanged.
	Cursor string `json:"cursor"`
	Health Health `json:"health"`
	// Done: nothing runs and nothing is left to deliver after the cursor.
	Done bool `json:"done"`
}

// ResultsResponse is GET /v1/sets/{set}/results: one page of finished
// rollouts.
type ResultsResponse struct {
	Results []ResultRecord `json:"results"`
	// NextPageToken is empty on the last page.
	NextPageToken string `json:"next_page_token"`
}

// ResultRecord is one finished rollout: its result (with receipt) or its
// failure.
type ResultRecord struct {
	RolloutID string          `json:"rollout_id"`
	Status    string          `json:"status"`
	Held      bool            `json:"held"`
	Attempt   int             `json:"attempt"`
	Env       string          `json:"env"`
	Result    *rollout.Result `json:"result,omitempty"`
	Failure   string          `json:"failure,omitempty"`
}

// Receipt is rollout.Receipt: an acknowledgement names the result it
// accepts.
type Receipt = rollout.Receipt

// AckRequest is POST /v1/sets/{set}/acks.
type AckRequest struct {
	RequestID string    `json:"request_id"`
	Receipts  []Receipt `json:"receipts"`
}

// AckResponse counts what the acknowledgement did; Receipts counts the
// results now accepted (the same on a repeat).
type AckResponse struct {
	Receipts     int `json:"receipts"`
	Acknowledged int `json:"acknowledged"`
	Already      int `json:"already"`
	Closed       int `json:"closed"`
}

// PolicyVersionRequest is POST /v1/sets/{set}/policy_version: the trainer's
// current policy version; running rollouts whose oldest model call was
// sampled more than MaxLag versions earlier are stale.
type PolicyVersionRequest struct {
	RequestID string `json:"request_id"`
	Version   int64  `json:"version"`
	MaxLag    int64  `json:"max_lag"`
	// Action is "cancel" (stop stale rollouts, freeing model capacity) or
	// "flag" (only report them).
	Action string `json:"action"`
}

// Staleness actions.
const (
	ActionCancel = "cancel"
	ActionFlag   = "flag"
)

// PolicyVersionResponse counts stale rollouts and lists them.
type PolicyVersionResponse struct {
	Version   int64          `json:"version"`
	Checked   int            `json:"checked"`
	Stale     int            `json:"stale"`
	Cancelled int            `json:"cancelled"`
	Flagged   int            `json:"flagged"`
	Rollouts  []StaleRollout `json:"rollouts"`
}

// StaleRollout is one stale running rollout.
type StaleRollout = trainer.StaleRollout

// CheckpointRequest is POST /v1/checkpoints; the checkpoint goes under the
// gateway's checkpoint root. Timeout or Deadline (RFC 3339), not both.
type CheckpointRequest struct {
	RequestID    string   `json:"request_id"`
	CheckpointID string   `json:"checkpoint_id"`
	Set          string   `json:"set"`
	Participants []string `json:"participants"`
	Timeout      string   `json:"timeout,omitempty"`
	Deadline     string   `json:"deadline,omitempty"`
	StayPaused   bool     `json:"stay_paused,omitempty"`
}

// RestoreRequest is POST /v1/restores.
type RestoreRequest struct {
	RequestID    string   `json:"request_id"`
	CheckpointID string   `json:"checkpoint_id"`
	RestoreID    string   `json:"restore_id,omitempty"`
	Participants []string `json:"participants"`
}

// StartedResponse names a Checkpoint or Restore run: started by this call,
// or Existing (an earlier call with the same request started it).
type StartedResponse struct {
	ID         string `json:"id"`
	WorkflowID string `json:"workflow_id"`
	RunID      string `json:"run_id"`
	Existing   bool   `json:"existing"`
}

// Run statuses of a coordinator workflow.
const (
	RunRunning   = "running"
	RunCompleted = "completed"
	RunFailed    = "failed"
)

// CheckpointStatus is GET /v1/checkpoints/{id}.
type CheckpointStatus struct {
	ID         string                       `json:"id"`
	WorkflowID string                       `json:"workflow_id"`
	RunID      string                       `json:"run_id"`
	Status     string                       `json:"status"`
	Result     *checkpoint.CheckpointResult `json:"result,omitempty"`
	Error      string                       `json:"error,omitempty"`
}

// RestoreStatus is GET /v1/restores/{id}.
type RestoreStatus struct {
	ID         string                    `json:"id"`
	WorkflowID string                    `json:"workflow_id"`
	RunID      string                    `json:"run_id"`
	Status     string                    `json:"status"`
	Result     *checkpoint.RestoreResult `json:"result,omitempty"`
	Error      string                    `json:"error,omitempty"`
}

// ResumeRequest is POST /v1/resumes: release a checkpoint taken with
// stay_paused (the gateway holds the environment servers' control token).
type ResumeRequest struct {
	RequestID    string   `json:"request_id"`
	Set          string   `json:"set"`
	CheckpointID string   `json:"checkpoint_id"`
	Participants []string `json:"participants"`
}

// ResumeResponse is trainer.ResumeSummary.
type ResumeResponse = trainer.ResumeSummary

// HealthzResponse is GET /healthz.
type HealthzResponse struct {
	OK bool `json:"ok"`
}

// WatchdogRequest is POST /v1/sets/{set}/watchdog: automatic recovery of
// the set's environment servers, its checkpoints read under the gateway's
// checkpoint root. Durations are Go durations; empty (and misses 0) take
// the library's defaults.
type WatchdogRequest struct {
	RequestID    string   `json:"request_id"`
	Participants []string `json:"participants"`
	Standby      []string `json:"standby,omitempty"`
	Every        string   `json:"every,omitempty"`
	Timeout      string   `json:"timeout,omitempty"`
	Misses       int      `json:"misses,omitempty"`
	Bound        string   `json:"bound,omitempty"`
}

// WatchdogResponse is a set's watchdog: its phase, the servers it
// watches, what it declared dead and recovered, and whether it holds the
// set's checkpoint schedule paused for a recovery.
type WatchdogResponse struct {
	Set          string                   `json:"set"`
	Phase        string                   `json:"phase"`
	Watched      []string                 `json:"watched"`
	StandbyUsed  int                      `json:"standby_used"`
	Declarations []checkpoint.Declaration `json:"declarations"`
	ScheduleHeld bool                     `json:"schedule_held"`
	Rounds       int                      `json:"rounds"`
}

// ScheduleRequest is POST /v1/sets/{set}/schedule: a checkpoint of the
// set every Every under the gateway's checkpoint root, each tagged Tag,
// the Keep newest (and every pinned one) kept when Keep > 0.
type ScheduleRequest struct {
	RequestID    string   `json:"request_id"`
	Every        string   `json:"every"`
	Participants []string `json:"participants"`
	Timeout      string   `json:"timeout,omitempty"`
	Tag          string   `json:"tag,omitempty"`
	Keep         int      `json:"keep,omitempty"`
	Paused       bool     `json:"paused,omitempty"`
}

// ScheduleResponse is a set's checkpoint schedule as Temporal describes
// it. Recent are its latest fires, oldest first.
type ScheduleResponse struct {
	ID       string         `json:"id"`
	Set      string         `json:"set"`
	Every    string         `json:"every"`
	Tag      string         `json:"tag"`
	Keep     int            `json:"keep"`
	Paused   bool           `json:"paused"`
	Note     string         `json:"note"`
	Fired    int            `json:"fired"`
	Skipped  int            `json:"skipped"`
	Recent   []ScheduledRun `json:"recent"`
	Next     []time.Time    `json:"next"`
	Existing bool           `json:"existing"`
}

// ScheduledRun is one checkpoint a schedule started: its checkpoint id
// (the directory under the checkpoint root) and its Checkpoint workflow.
type ScheduledRun struct {
	CheckpointID string `json:"checkpoint_id"`
	WorkflowID   string `json:"workflow_id"`
}

// ScheduleTagRequest is POST /v1/sets/{set}/schedule/tag: the tag the
// next scheduled checkpoints carry (the trainer's step); empty clears it.
type ScheduleTagRequest struct {
	RequestID string `json:"request_id"`
	Tag       string `json:"tag"`
}

// ScheduleNoteRequest is POST /v1/sets/{set}/schedule/pause and
// /unpause: the note says why (Temporal shows it with the schedule).
type ScheduleNoteRequest struct {
	RequestID string `json:"request_id"`
	Note      string `json:"note,omitempty"`
}

// ScheduleTriggerRequest is POST /v1/sets/{set}/schedule/trigger.
type ScheduleTriggerRequest struct {
	RequestID string `json:"request_id"`
}

// StopRequest is DELETE /v1/sets/{set}/watchdog and
// DELETE /v1/sets/{set}/schedule.
type StopRequest struct {
	RequestID string `json:"request_id"`
}

// StoppedResponse answers a DELETE of a set's watchdog or schedule.
type StoppedResponse struct {
	Set     string `json:"set"`
	Stopped bool   `json:"stopped"`
}

// PinRequest is POST /v1/sets/{set}/pins: keep every committed checkpoint
// of the set tagged Tag (or whose id is Tag) whatever the retention.
type PinRequest struct {
	RequestID string `json:"request_id"`
	Tag       string `json:"tag"`
}

// PinResponse lists the checkpoints pinned.
type PinResponse struct {
	Set    string   `json:"set"`
	Tag    string   `json:"tag"`
	Pinned []string `json:"pinned"`
}
