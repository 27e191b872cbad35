// Package rollout holds the Rollout workflow, the agent loop of one attempt
// of one rollout (tool-calling and Gymnasium step styles), and the group
// ledger (GroupLedger) of a dataset row's repeats, with their contract:
// inputs, results, update, signal and query names, the activities they call
// by name and those activities' input and result types, workflow IDs and
// search attributes. It does no I/O and reads no clock: every side effect is
// an activity (package activities/...), so its dependencies hold no logger,
// HTTP server, storage or model client.
package rollout

import (
	"fmt"
	"strconv"

	"encoding/json"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/internal/transcript"
)

// TaskQueue is the task queue rollouts and their activities run on.
const TaskQueue = "turnstile-rollouts"

// Workflow type names, as registered and as typed into the Temporal CLI.
const (
	WorkflowName = "Rollout"
)

// Message names of the Rollout workflow.
const (
	// QueryBoundary returns the rollout's current Boundary.
	QueryBoundary = "boundary"
	// QueryStatus returns the rollout's Status.
	QueryStatus = "status"
)

// Search attributes upserted by the Rollout workflow at every boundary, so an
// operator can filter rollouts in the Web UI or with `temporal workflow list
// --query 'RolloutSet="s1" AND RolloutPhase="model"'`.
const (
	SARolloutID      = "RolloutId"      // Keyword
	SARolloutSet     = "RolloutSet"     // Keyword
	SARolloutAttempt = "RolloutAttempt" // Int
	SARolloutTurn    = "RolloutTurn"    // Int
	SARolloutPhase   = "RolloutPhase"   // Keyword
	// Set at start, only for rollouts of a dataset (Input.Group not
	// empty), so rollouts started before these attributes were registered,
	// or on a server that lacks them, start exactly as before.
	SARolloutGroup  = "RolloutGroup"  // Keyword: the dataset row id
	SARolloutRepeat = "RolloutRepeat" // Int: the repeat index within the group
	// SARolloutEnv is the rollout's environment, set at start ("all running
	// workplace rollouts": RolloutEnv="workplace" AND ExecutionStatus="Running").
	SARolloutEnv = "RolloutEnv" // Keyword
	// SACheckpointID is the checkpoint a rollout is held for (parked, or a
	// restored run held until its restore resumes it) and the checkpoint of
	// a Checkpoint or Restore run ("everything held for checkpoint k42":
	// CheckpointId="k42").
	SACheckpointID = "CheckpointId" // Keyword
	// SARolloutProgressAt is the time (workflow time) of
	// the rollout's last phase or turn change, and SARolloutFinishedAt the
	// time it first held, completed or failed with a result: what a results
	// feed orders by and a watchdog measures progress with (SQL visibility
	// cannot ORDER BY, but it can filter and count by them). Datetime, not
	// Int: the SQL visibility stores have three Int columns, all taken.
	// Upserted only by
	// runs whose input asks for them (Input.ProgressAttributes), so a server
	// that lacks them never sees them.
	SARolloutProgressAt = "RolloutProgressAt" // Datetime
	SARolloutFinishedAt = "RolloutFinishedAt" // Datetime
	// SARolloutReceipt is the SHA-256 of the result a rollout holds for
	// acknowledgement (Receipt.SHA256), upserted with its phase
	// awaiting_ack by runs whose input asks for it (Input.ResultInStore)
	// once the result is in the transcript store under that digest: a
	// reader builds the held result and its receipt from visibility and the
	// store, without a query (a workflow task) of the run.
	SARolloutReceipt = "RolloutReceipt" // Keyword
)

// SearchAttributes are every search attribute turnstile sets, with their
// types: what `starter setup` registers on a cluster and temporal-dev.yaml
// registers on the dev server.
func SearchAttributes() map[string]enumspb.IndexedValueType {
	keyword, integer, datetime := enumspb.INDEXED_VALUE_TYPE_KEYWORD, enumspb.INDEXED_VALUE_TYPE_INT, enumspb.INDEXED_VALUE_TYPE_DATETIME
	return map[string]enumspb.IndexedValueType{
		SARolloutID: keyword, SARolloutSet: keyword, SARolloutAttempt: integer, SARolloutTurn: integer,
		SARolloutPhase: keyword, SARolloutGroup: keyword, SARolloutRepeat: integer, SARolloutEnv: keyword,
		SACheckpointID: keyword, SARolloutGroupStatus: keyword,
		SARolloutProgressAt: datetime, SARolloutFinishedAt: datetime, SARolloutReceipt: keyword,
	}
}

// Phase is where a rollout is.
type Phase string

// Phases of a rollout.
const (
	PhaseSeeding     Phase = "seeding"
	PhaseModel       Phase = "model"
	PhaseEnvironment Phase = "environment"
	PhaseVerifying   Phase = "verifying"
	PhaseParked      Phase = "parked"
	PhaseAwaitingAck Phase = "awaiting_ack"
	PhaseCompleted   Phase = "completed"
	PhaseFailed      Phase = "failed"
	// PhaseQueued is a rollout its set's admission workflow has not
	// started yet (package workflows/set): no run of it exists, so no
	// search attribute says it; readers take it from the admission.
	PhaseQueued Phase = "queued"
)

// WorkflowID returns the workflow ID of a rollout: one ID for every attempt,
// each attempt a new run.
func WorkflowID(rolloutID string) string { return workflowIDPrefix + rolloutID }

// workflowIDPrefix starts the workflow ID of every rollout.
const workflowIDPrefix = "rollout/"

// IDOf returns the rollout id of a rollout's workflow ID, and false for any
// other workflow ID.
func IDOf(workflowID string) (string, bool) { return strings.CutPrefix(workflowID, workflowIDPrefix) }

// EnvRef names an environment and, optionally, the server hosting it: a
// server the worker's operator configured, by name (Server), or a URL the
// worker's allowlist admits. Neither means the worker's default
// environment server; both is refused.
type EnvRef struct {
	Name string `json:"name"`
	URL  string `json:"url,omitempty"`
	// Server names one of the worker's configured environment servers
	// (TURNSTILE_ENV_SERVERS; "default" is TURNSTILE_ENV_URL).
	Server string `json:"server,omitempty"`
}

// PolicyRef names the policy model and, optionally, its OpenAI-compatible
// endpoint: one the worker's operator configured, by name (Endpoint), or a
// base URL the worker's allowlist admits. Neither means the worker's
// default endpoint; both is refused. The API key never travels in workflow
// input; the worker holds it.
type PolicyRef struct {
	Model   string `json:"model"`
	BaseURL string `json:"base_url,omitempty"`
	// Endpoint names one of the worker's configured model endpoints
	// (TURNSTILE_MODEL_ENDPOINTS; "default" is TURNSTILE_MODEL_BASE_URL).
	Endpoint string `json:"endpoint,omitempty"`
	// Version names the weights the trainer serves under Model (a step
	// number, an adapter name): recorded with every model call so a trainer
	// can compute staleness. A version the endpoint reports (header
	// X-Policy-Version or body field policy_version) takes precedence, since
	// it names what actually sampled.
	Version string `json:"version,omitempty"`
	// Continue says whether a model call cut by a crash or a checkpoint
	// goes on from its durable token prefix: "auto" (the default, also
	// when empty) continues through the endpoint's token-in route when it
	// has one; "never" starts the answer over, as calls did before
	// prefixes were kept. Prefixes are kept only with token capture
	// (Sampling.CaptureTokens). See ContinueAuto.
	Continue string `json:"continue,omitempty"`
	// ToolParser names the format a continued generation's text is read
	// back into a message with, as vLLM's --tool-call-parser does for a
	// whole one (the token-in route returns text, not a parsed message):
	// "hermes" or "turnstile" (the scripted policy server's). Empty: a cut
	// call cannot be continued and starts over. See ToolParserHermes.
	ToolParser string `json:"tool_parser,omitempty"`
}

// Sampling are the sampling parameters of every model call of a rollout. A
// nil field keeps the server's default (vLLM then applies the model's
// generation_config.json). They travel in each CallModel input, so history
// shows what was asked, and in a park record's input, so a restored attempt
// samples exactly as the original did.
type Sampling struct {
	Temperature *float64 `json:"temperature,omitempty"`
	TopP        *float64 `json:"top_p,omitempty"`
	MaxTokens   *int64   `json:"max_tokens,omitempty"`
	Stop        []string `json:"stop,omitempty"`
	// Seed overrides Input.Seed as the model's sampling seed.
	Seed *int64 `json:"seed,omitempty"`
	// ExtraBody is merged into the request body at the top level, as vLLM
	// expects its own fields (e.g. {"top_k": 20, "chat_template_kwargs":
	// {...}}); keys turnstile sets itself are refused.
	ExtraBody map[string]json.RawMessage `json:"extra_body,omitempty"`
	// CaptureTokens asks a vLLM-compatible server for prompt and generated
	// token ids and log-probs (logprobs, top_logprobs: 0, return_token_ids).
	// Opt-in: the OpenAI API refuses unknown request fields.
	CaptureTokens bool `json:"capture_tokens,omitempty"`
}

// Usage counts tokens.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
	Calls            int64 `json:"calls"`
}

// Add returns u + v.
func (u Usage) Add(v Usage) Usage {
	return Usage{
		PromptTokens:     u.PromptTokens + v.PromptTokens,
		CompletionTokens: u.CompletionTokens + v.CompletionTokens,
		TotalTokens:      u.TotalTokens + v.TotalTokens,
		Calls:            u.Calls + v.Calls,
	}
}

// ModelCallID is the id of a rollout's model call: unique per attempt and
// turn, and stable across retries of the activity.
func ModelCallID(rolloutID string, attempt, turn int) string {
	return rolloutID + "/a" + strconv.Itoa(attempt) + "/t" + strconv.Itoa(turn)
}

// Limits bound a rollout. Every budget is optional; its zero value keeps the
// behaviour rollouts had before budgets existed. Durations are JSON strings
// in Go's notation ("90s", "5m", "1h30m"); bare numbers are refused, so the
// unit is always written. A rollout that exhausts a budget fails with a
// non-retryable ErrBudgetExhausted whose message names the budget.
type Limits struct {
	// MaxTurns is the number of model calls after which the rollout stops
	// (tool style) or is truncated (gym style). Default 16.
	MaxTurns int `json:"max_turns,omitempty"`
	// ModelCallTimeout bounds one attempt of a model call. Default 5m.
	ModelCallTimeout Duration `json:"model_call_timeout,omitzero"`
	// EnvCallTimeout bounds one attempt of an environment call (seed, tool
	// call, step, verify); a timed-out attempt is retried with the same
	// request id, so only Deadline ends a rollout whose environment keeps
	// timing out. Default 15s.
	EnvCallTimeout Duration `json:"env_call_timeout,omitzero"`
	// ModelCallRetries is the maximum number of attempts of one model call
	// (1 = no retry), counting failures and timeouts alike. Default 0:
	// unlimited, since a model server that is down is usually back soon.
	ModelCallRetries int `json:"model_call_retries,omitempty"`
	// Deadline is the rollout's wall-clock budget, counted from its first
	// attempt's start and including time spent parked or checkpointed.
	// Default 0: none. An attempt its group retries (see GroupRetries)
	// starts over from the seed with a deadline of its own.
	Deadline Duration `json:"deadline,omitzero"`
	// DeadlineAt is the absolute deadline. The workflow sets it from Deadline
	// when the first attempt starts and carries it through continue-as-new,
	// park records and restores, so a later run never restarts the clock. A
	// caller may set it instead of Deadline; when set, it wins.
	DeadlineAt time.Time `json:"deadline_at,omitzero"`
	// GroupRetries is the retry budget of the rollout's group (Input.Group):
	// how many environment-level failures (a refusal, a crashed session, an
	// environment call that outlives the deadline), over all the group's
	// rollouts, start over as a new attempt with a fresh environment before
	// the group fails as a whole. Nil means DefaultGroupRetries; 0 retries
	// nothing. Every rollout of a group carries the same value; ignored
	// outside a group.
	GroupRetries *int `json:"group_retries,omitempty"`
	// EnvActivities says how the environment operations (seed, tool call or
	// step, verify) run: "local" (the default) as local activities inside
	// the workflow task, which saves the server an activity's events and a
	// matching round trip per operation, and is safe because the
	// environment server answers a retried request id from its stored
	// response; or "regular" as regular activities that heartbeat (see
	// EnvHeartbeatTimeout), for environments whose calls take long.
	EnvActivities string `json:"env_activities,omitempty"`
	// EnvHeartbeatTimeout is the heartbeat timeout of an environment
	// operation run as a regular activity: a worker that dies during one is
	// noticed after this long and the call is retried on another worker.
	// Default 5s.
	EnvHeartbeatTimeout Duration `json:"env_heartbeat_timeout,omitzero"`
	// WorkflowTaskTimeout is the workflow task timeout of the rollout's
	// runs (set at start; continue-as-new keeps it). A worker that dies
	// while a local environment operation runs is noticed after this long,
	// and another worker runs the operation again with the same request id.
	// Default 10s (Temporal's), at most 2m.
	WorkflowTaskTimeout Duration `json:"workflow_task_timeout,omitzero"`
}

// groupRetries is the group retry budget, default applied.
func (l Limits) groupRetries() int {
	if l.GroupRetries == nil {
		return DefaultGroupRetries
	}
	return *l.GroupRetries
}

// Duration is a time.Duration that travels in JSON as a Go duration string.
type Duration time.Duration

// MarshalJSON writes d as a Go duration string ("5m0s").
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a Go duration string; a bare number is refused, since
// seconds and nanoseconds would both be plausible readings of it.
func (d *Duration) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("duration %s: want a string such as \"90s\" or \"5m\"", data)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	*d = Duration(v)
	return nil
}

// Input starts one attempt of a rollout. It is plain JSON, so a user
// can type it into `temporal workflow start --type Rollout --input '…'`.
type Input struct {
	RolloutID string          `json:"rollout_id"`
	Set       string          `json:"set"`
	Attempt   int             `json:"attempt"`
	Task      json.RawMessage `json:"task"`
	Env       EnvRef          `json:"env"`
	Policy    PolicyRef       `json:"policy"`
	Seed      int64           `json:"seed"`
	Limits    Limits          `json:"limits,omitempty"`
	// Sampling is nil for the server's defaults.
	Sampling *Sampling `json:"sampling,omitempty"`
	// RequireAck holds the completed result until the pipeline acknowledges it.
	RequireAck bool `json:"require_ack,omitempty"`
	// Resume continues from a boundary (continue-as-new inside an attempt, or a
	// restored attempt); nil starts from the seed.
	Resume *Boundary `json:"resume,omitempty"`
	// HoldFor starts the run parked for this checkpoint id, until a resume
	// with the same id: a restore installs every attempt before any moves.
	HoldFor string `json:"hold_for,omitempty"`
	// Completed is a result completed by an earlier attempt and not yet
	// acknowledged when a checkpoint was cut: a restored run offers it again,
	// receipt unchanged, instead of running the rollout a second time.
	Completed *Result `json:"completed,omitempty"`
	// Group is the dataset row the rollout was drawn from and Repeat its
	// index among that row's repeats: the rollouts of one group are the
	// samples a GRPO trainer compares. Empty for rollouts not from a dataset.
	Group  string `json:"group,omitempty"`
	Repeat int    `json:"repeat,omitempty"`
	// GroupSize is the number of rollouts of the group, whose ids are
	// GroupRolloutID(Set, Group, 0..GroupSize-1). Set, the rollout reports
	// to its group's ledger (GroupWorkflowID): an environment-level failure
	// is retried as a new attempt while the group's budget lasts, and any
	// other failure fails the whole group. 0 (rollouts started before
	// groups had ledgers) keeps the rollout on its own.
	GroupSize int `json:"group_size,omitempty"`
	// Retry is the ledger's grant that started this attempt over from the
	// seed; nil for any attempt that is not a group retry.
	Retry *GroupGrant `json:"retry,omitempty"`
	// ProgressAttributes makes the run upsert SARolloutProgressAt and
	// SARolloutFinishedAt with its phase. The submitter sets it after
	// checking the namespace has them registered: an upsert of an unknown
	// attribute fails the workflow task over and over.
	ProgressAttributes bool `json:"progress_attributes,omitempty"`
	// ResultInStore makes a run that holds its result for acknowledgement
	// store it first in the transcript store (StoreResultName), under the
	// digest of its receipt, and upsert SARolloutReceipt with the phase
	// awaiting_ack. The submitter sets it after checking the namespace has
	// SARolloutReceipt registered. Runs without it (started before it
	// existed) are read by their status query.
	ResultInStore bool `json:"result_in_store,omitempty"`
	// StartedAt is when the first run of this rollout's chain started: the
	// run sets it, and a continue-as-new or a group retry carries it on,
	// while a restore starts a new chain without it. A set's fence record
	// is compared with it (SetFence.FencesRun). Submitters leave it unset.
	StartedAt *time.Time `json:"started_at,omitempty"`
	// ProgressEvery is the longest a working rollout goes without
	// publishing its turn and RolloutProgressAt while its phase does not
	// change (0: DefaultProgressEvery; MinProgressEvery..MaxProgressEvery).
	// A watchdog's stall window should be several times longer.
	ProgressEvery Duration `json:"progress_every,omitzero"`
	// Admission: the rollout was admitted by its set's admission workflow
	// (package workflows/set), which runs at most max_in_flight of the
	// set's rollouts at once; the run tells it when it stops working
	// (NotifyAdmissionName). Continue-as-new, group retries and restores
	// keep it. Submitters leave it unset; the trainer library sets it.
	Admission bool `json:"admission,omitempty"`
}

// Boundary is a rollout's state right after all of a turn's (or a tool
// call's) activities returned: the only place it may park or continue as new.
type Boundary struct {
	RolloutID string            `json:"rollout_id"`
	Attempt   int               `json:"attempt"`
	Turn      int               `json:"turn"` // model calls completed
	Head      transcript.Digest `json:"head"`
	Tools     transcript.Digest `json:"tools"`
	Style     envs.Style        `json:"style"`
	EnvMode   envs.Mode         `json:"env_mode"`
	Revision  int64             `json:"revision"` // environment state revision
	Seeded    bool              `json:"seeded"`
	// Pending is the model's answer whose tool calls are not all applied yet;
	// Cursor is the index of the next one to apply.
	Pending *PendingCall `json:"pending,omitempty"`
	Cursor  int          `json:"cursor,omitempty"`
	// LastCall is the id of the last committed model call: the parent of the next.
	LastCall string `json:"last_call,omitempty"`
	// Partial is the durable prefix of the next model call, cut by a
	// checkpoint's deadline: that call continues from it (after a resume or
	// a restore) instead of starting over.
	Partial *ModelPrefix   `json:"partial,omitempty"`
	Lineage []LineageEntry `json:"lineage,omitempty"`
	Usage   Usage          `json:"usage"`
	// Reward accumulates dense (gym) rewards.
	Reward float64 `json:"reward"`
	// StepRewards is the reward of every environment operation so far (a
	// tool call or gym step; a refused one counts 0), in order. Nil when
	// the rollout began before step rewards were kept: then they are not
	// recorded, rather than recorded in part.
	StepRewards []float64 `json:"step_rewards,omitzero"`
	Terminated  bool      `json:"terminated,omitempty"`
	Truncated   bool      `json:"truncated,omitempty"`
	Done        bool      `json:"done,omitempty"` // the agent loop finished; verify next
}

// PendingCall is a model answer kept in a boundary until all its tool calls
// are applied: a restored attempt applies the rest with the same request ids
// instead of asking the model again. Its JSON is part of the checkpoint
// format (checkpoints written before it had a name of its own hold the same
// fields).
type PendingCall struct {
	CallID       string                `json:"call_id"`
	Parent       string                `json:"parent,omitempty"`
	Head         transcript.Digest     `json:"head"`
	ToolCalls    []transcript.ToolCall `json:"tool_calls,omitempty"`
	FinishReason string                `json:"finish_reason,omitempty"`
	Usage        Usage                 `json:"usage"`
}

// LineageEntry links a model call to its parent. The token fields are set
// only when the call left a generation record (token capture, or a policy
// version); entries of checkpoints written before them decode unchanged.
type LineageEntry struct {
	CallID string `json:"call_id"`
	Parent string `json:"parent,omitempty"`
	// Generation names the call's transcript.Generation record (token ids,
	// log-probs); Tokens says whether it holds tokens.
	Generation transcript.Digest `json:"generation,omitempty"`
	Tokens     string            `json:"tokens,omitempty"`
	// PrefixBreak flags a call whose prompt tokens do not continue its
	// parent's prompt + generation, so a trainer never joins them silently.
	PrefixBreak       bool   `json:"prefix_break,omitempty"`
	PrefixBreakReason string `json:"prefix_break_reason,omitempty"`
	PolicyVersion     string `json:"policy_version,omitempty"`
	// Recovery, set only for a call that a crash or a checkpoint cut (see
	// GenerationRecovery): where it resumed, or that it started over.
	GenerationRecovery
}

// lineageEntry is the lineage entry of a model call's result.
func lineageEntry(res CallModelResult) LineageEntry {
	e := LineageEntry{CallID: res.CallID, Parent: res.Parent}
	if g := res.Generation; g != nil {
		e.Generation, e.Tokens, e.PolicyVersion = g.Record, g.Tokens, g.PolicyVersion
		e.PrefixBreak, e.PrefixBreakReason = g.PrefixBreak, g.PrefixBreakReason
		e.GenerationRecovery = g.GenerationRecovery
	}
	return e
}

// Result is the outcome of a rollout.
type Result struct {
	RolloutID  string            `json:"rollout_id"`
	Set        string            `json:"set"`
	Env        string            `json:"env"`
	Attempt    int               `json:"attempt"`
	Reward     float64           `json:"reward"`
	Turns      int               `json:"turns"`
	Usage      Usage             `json:"usage"`
	Head       transcript.Digest `json:"head"`
	Lineage    []LineageEntry    `json:"lineage"`
	Terminated bool              `json:"terminated,omitempty"`
	Truncated  bool              `json:"truncated,omitempty"`
	// StepRewards are the reward of each environment operation (see
	// Boundary.StepRewards); nil when not recorded.
	StepRewards []float64 `json:"step_rewards,omitzero"`
	// VerifyDetailsRef names the verifier's details (any JSON) in the
	// transcript store; empty when not recorded.
	VerifyDetailsRef transcript.Digest `json:"verify_details_ref,omitempty"`
	// Receipt identifies this result: its canonical digest, for acknowledgement.
	Receipt *Receipt `json:"receipt,omitempty"`
}

// Receipt proves which result was accepted.
type Receipt struct {
	RolloutID string `json:"rollout_id"`
	Attempt   int    `json:"attempt"`
	SHA256    string `json:"sha256"`
}

// TranscriptRefs are the transcript blobs a boundary and a held result
// reference: conversation heads (each names its chain), single blobs (the
// tool schema, verifier details) and the last chunk of an unfinished
// model call's durable prefix (empty when none).
func TranscriptRefs(b Boundary, res *Result) (heads, singles []transcript.Digest, prefix transcript.Digest) {
	add := func(list *[]transcript.Digest, d transcript.Digest) {
		if d != "" {
			*list = append(*list, d)
		}
	}
	add(&heads, b.Head)
	if b.Pending != nil {
		add(&heads, b.Pending.Head)
	}
	if res != nil {
		add(&heads, res.Head)
		add(&singles, res.VerifyDetailsRef)
	}
	add(&singles, b.Tools)
	if b.Partial != nil {
		prefix = b.Partial.Record
	}
	return heads, singles, prefix
}

// Status answers QueryStatus.
type Status struct {
	Phase    Phase    `json:"phase"`
	Boundary Boundary `json:"boundary"`
	Result   *Result  `json:"result,omitempty"`
}

// Update names of the Rollout workflow (the agent side of the checkpoint
// protocol).
const (
	// UpdatePark stops the rollout at its next boundary and returns its
	// ParkRecord. A model call still running at the deadline is cancelled and
	// the rollout parks at its previous boundary.
	UpdatePark = "park"
	// UpdateResume releases a parked rollout.
	UpdateResume = "resume"
	// UpdateAcknowledge releases a completed result held for acknowledgement.
	UpdateAcknowledge = "acknowledge"
)

// Signal and query forms of park and resume, for a coordinator that must not
// wait on every rollout's workflow task. An update is answered only when the
// rollout's next workflow task completes, and on a busy data plane that task
// queues behind every other rollout's: 1,000 updates took minutes. A signal
// is durable once the server has it, and the parked rollout's record is read
// by QueryParkRecord, which writes no history.
const (
	// SignalPark asks the rollout to park (a ParkRequest), exactly as
	// UpdatePark does; a park for a second checkpoint while one holds the
	// rollout is ignored, and QueryParkRecord then names the holder.
	SignalPark = "park-request"
	// SignalResume releases the rollout (a ResumeRequest), exactly as
	// UpdateResume does; a resume naming another checkpoint than the one
	// holding the rollout is ignored. A resume that comes before the
	// rollout reached its boundary ends a pending park update with
	// ErrNotParked, as the update does.
	SignalResume = "resume-request"
	// QueryParkRecord takes a checkpoint id and returns the ParkRecord of a
	// rollout parked (or completed and held) for it; otherwise it fails with
	// a message starting with NotParkedYet or HeldForOther.
	QueryParkRecord = "park-record"
)

// Prefixes of QueryParkRecord's failures.
const (
	// NotParkedYet: the rollout is held for the checkpoint but has not
	// reached a boundary yet (or has not seen the park signal).
	NotParkedYet = "not parked yet"
	// HeldForOther: the rollout is held for another checkpoint.
	HeldForOther = "held for another checkpoint"
)

// ParkUpdateID is the update id of checkpoint checkpointID's park request
// to each of its members: one id per checkpoint, so a retried request gets
// the same record back instead of parking twice.
func ParkUpdateID(checkpointID string) string { return checkpointID + "/park" }

// ResumeUpdateID is the update id that releases the rollouts parked or held
// for checkpointID (the checkpoint's own resume, a restore's, or an
// operator's): one id per checkpoint, so every sender's resume is the same
// update.
func ResumeUpdateID(checkpointID string) string { return checkpointID + "/resume" }

// ParkRequest asks a rollout to park for a checkpoint.
type ParkRequest struct {
	CheckpointID string `json:"checkpoint_id"`
	// Deadline is absolute: a model call still running then is cancelled.
	Deadline time.Time `json:"deadline"`
	// LeaseUntil is when the hold ends by itself if nothing released it: a
	// rollout parked past it resumes, as if its checkpoint had resumed it,
	// so a checkpoint whose coordinator vanished holds it for a bounded
	// time. A later park of the same checkpoint with a later lease renews
	// it. Zero holds until a resume (a set paused for a planned shutdown,
	// a restore's held runs).
	LeaseUntil time.Time `json:"lease_until,omitzero"`
}

// ParkRecord is a parked rollout's boundary record: everything a replacement
// attempt needs to continue, or the completed result still held.
type ParkRecord struct {
	CheckpointID string   `json:"checkpoint_id"`
	Set          string   `json:"set"`
	Input        Input    `json:"input"` // Resume is nil here; Boundary is the state
	Boundary     Boundary `json:"boundary"`
	Phase        Phase    `json:"phase"`
	Result       *Result  `json:"result,omitempty"` // completed, not yet acknowledged
}

// ResumeRequest releases a rollout parked for CheckpointID.
type ResumeRequest struct {
	CheckpointID string `json:"checkpoint_id"`
}

// AckRequest acknowledges a completed result by its receipt.
type AckRequest struct {
	Receipt Receipt `json:"receipt"`
}

// MemoEnv is the memo field holding a rollout's environment name, so a
// listing can group rollouts that failed without a result by environment.
const MemoEnv = "env"

// StartOptions are the options of the run of in's attempt on taskQueue. The
// first attempt refuses a workflow ID used before, so a second submit of
// the same set fails instead of running rollouts twice; a later attempt
// (a restore) is a new run of the closed ID. A run held for a checkpoint
// starts in PhaseParked at its boundary's turn. There is no workflow retry
// policy: a new attempt is a decision of the recovery machinery, not of the
// server.
func StartOptions(in Input, taskQueue string) client.StartWorkflowOptions {
	reuse, phase, turn := enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE, PhaseSeeding, 0
	if in.Attempt > 0 {
		reuse = enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE
	}
	if in.HoldFor != "" {
		phase = PhaseParked
	}
	if in.Resume != nil {
		turn = in.Resume.Turn
	}
	sa := []temporal.SearchAttributeUpdate{
		temporal.NewSearchAttributeKeyKeyword(SARolloutID).ValueSet(in.RolloutID),
		temporal.NewSearchAttributeKeyKeyword(SARolloutSet).ValueSet(in.Set),
		temporal.NewSearchAttributeKeyInt64(SARolloutAttempt).ValueSet(int64(in.Attempt)),
		temporal.NewSearchAttributeKeyInt64(SARolloutTurn).ValueSet(int64(turn)),
		temporal.NewSearchAttributeKeyKeyword(SARolloutPhase).ValueSet(string(phase)),
		temporal.NewSearchAttributeKeyKeyword(SARolloutEnv).ValueSet(in.Env.Name),
	}
	if in.HoldFor != "" {
		sa = append(sa, temporal.NewSearchAttributeKeyKeyword(SACheckpointID).ValueSet(in.HoldFor))
	}
	if in.Group != "" {
		sa = append(sa,
			temporal.NewSearchAttributeKeyKeyword(SARolloutGroup).ValueSet(in.Group),
			temporal.NewSearchAttributeKeyInt64(SARolloutRepeat).ValueSet(int64(in.Repeat)))
	}
	return client.StartWorkflowOptions{
		ID:                                       WorkflowID(in.RolloutID),
		TaskQueue:                                taskQueue,
		WorkflowIDConflictPolicy:                 enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowIDReusePolicy:                    reuse,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		TypedSearchAttributes:                    temporal.NewSearchAttributes(sa...),
		Memo:                                     map[string]any{MemoEnv: in.Env.Name},
		StaticSummary:                            fmt.Sprintf("rollout %s · env %s · policy %s · seed %d", in.RolloutID, in.Env.Name, in.Policy.Model, in.Seed),
		WorkflowTaskTimeout:                      time.Duration(in.Limits.WorkflowTaskTimeout),
	}
}

// MaxSetLen bounds a set name: rollout ids and workflow IDs grow from it.
const MaxSetLen = 100

// ValidateName checks an id or name that ends up in a workflow ID, a path
// component of the checkpoint directory or a visibility query: 1 to maxLen
// letters, digits, '.', '_' or '-', starting with a letter or digit, so it
// can hold no separator, no quote and no "..". what names it in the error.
func ValidateName(what, name string, maxLen int) error {
	ok := name != "" && len(name) <= maxLen
	for i, r := range name {
		alnum := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
		if !alnum && (i == 0 || (r != '.' && r != '_' && r != '-')) {
			ok = false
		}
	}
	if !ok {
		return fmt.Errorf("%s %q: want 1-%d letters, digits, '.', '_' or '-', starting with a letter or digit", what, name, maxLen)
	}
	return nil
}

// ValidateSet checks a set name.
func ValidateSet(set string) error { return ValidateName("set", set, MaxSetLen) }

// SetQuery is the visibility query for every run of every rollout of set.
// set must have passed ValidateSet, so it needs no escaping beyond quoting.
func SetQuery(set string) string { return fmt.Sprintf("%s = %q", SARolloutSet, set) }
