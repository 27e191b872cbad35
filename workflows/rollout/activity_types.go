package rollout

// The inputs and results of the rollout's activities: what workflow history
// records, so none of them grows with the conversation (conversations travel
// as transcript heads). What a checkpoint keeps is defined in api.go, apart
// from these, so changing an activity's output never changes the checkpoint
// schema by accident.

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/internal/transcript"
	"go.temporal.io/sdk/temporal"
)

// Activity names, as registered on the worker.
const (
	StartEnvironmentName   = "StartEnvironment"
	CallModelName          = "CallModel"
	OperateEnvironmentName = "OperateEnvironment"
	VerifyName             = "Verify"
	AuthoriseAttemptName   = "AuthoriseAttempt"
	// StoreResultName stores a held result in the transcript store (a
	// local activity of the Rollout workflow; see Input.ResultInStore).
	StoreResultName = "StoreResult"
)

// StoreResultInput is a result to store: its canonical JSON without the
// receipt (what Receipt.SHA256 digests) is written under that digest.
type StoreResultInput struct {
	Result Result `json:"result"`
}

// Application error types the workflow tells apart.
const (
	// ErrStaleAttempt: the environment server has installed a higher attempt
	// for this rollout; this attempt is fenced off and must stop.
	ErrStaleAttempt = "StaleAttempt"
	// ErrParked: admission is closed for a checkpoint; nothing was applied.
	// The workflow waits and re-sends the same request id.
	ErrParked = "Parked"
	// ErrModelRequest: the model endpoint rejected the request (a 4xx other
	// than 429); retrying cannot help.
	ErrModelRequest = "ModelBadRequest"
	// ErrEnvironment: the environment server refused the request for a reason
	// that a retry cannot fix (unknown task, revision mismatch, conflict).
	ErrEnvironment = "EnvironmentRefused"
	// ErrSessionLost: the environment server does not know the session
	// this attempt started: it lost its state (a server restarted empty at
	// its address answers 404 unknown_session, or 409 attempt_not_installed
	// to an attempt above 0). Retried within the call's budget, since a recovery may
	// be moving the rollout to a restored server (the watchdog's, once the
	// restarted server answers); a run that runs out of the budget fails
	// as an environment failure, which a group retries.
	ErrSessionLost = "EnvironmentSessionLost"
	// ErrDestinationRefused: the environment server, model endpoint,
	// participant or object store an input names is not a destination the
	// worker's operator configured for the secret it would carry; nothing
	// was sent. The message names the setting that would allow it.
	ErrDestinationRefused = "DestinationRefused"
)

// DestinationRefused is the non-retryable error of a refused destination:
// no retry changes the worker's configuration.
func DestinationRefused(err error) error {
	return temporal.NewNonRetryableApplicationError(err.Error(), ErrDestinationRefused, nil)
}

// StartEnvironmentInput seeds the rollout's environment session.
type StartEnvironmentInput struct {
	RolloutID string          `json:"rollout_id"`
	Attempt   int             `json:"attempt"`
	Env       EnvRef          `json:"env"`
	Seed      int64           `json:"seed"`
	Task      json.RawMessage `json:"task"`
	// Retry is the group's grant when this attempt is a group retry: a new
	// attempt whose session the environment has never seen.
	Retry *GroupGrant `json:"retry,omitempty"`
	// Fence, for a rollout of a set, is the run chain the activity checks
	// against the set's fence record before it sends anything: a run a
	// restore fenced fails ErrFencedByRestore.
	Fence *SetFenceCheck `json:"fence,omitempty"`
}

// AuthoriseAttemptInput names the attempt of a rollout to install on its
// environment server for a fresh start (a start-over).
type AuthoriseAttemptInput struct {
	RolloutID string `json:"rollout_id"`
	Attempt   int    `json:"attempt"`
	Env       EnvRef `json:"env"`
}

// StartEnvironmentResult is the seeded session: the conversation so far
// (instructions and first observation) and the tool schema, as references.
type StartEnvironmentResult struct {
	Head     transcript.Digest `json:"head"`
	Tools    transcript.Digest `json:"tools"` // []envs.Tool as JSON in the transcript store
	Revision int64             `json:"revision"`
	Style    envs.Style        `json:"style"`
	Mode     envs.Mode         `json:"mode"`
}

// CallModelInput asks the policy for the next message.
type CallModelInput struct {
	RolloutID string            `json:"rollout_id"`
	Attempt   int               `json:"attempt"`
	Turn      int               `json:"turn"`
	Head      transcript.Digest `json:"head"`
	Tools     transcript.Digest `json:"tools"`
	Style     envs.Style        `json:"style"`
	Policy    PolicyRef         `json:"policy"`
	Seed      int64             `json:"seed"`
	Sampling  *Sampling         `json:"sampling,omitempty"`
	// Parent is the model-call id of the previous call in this rollout's
	// lineage, across attempts; empty for the first.
	Parent string `json:"parent,omitempty"`
	// Prefix is the durable prefix of this turn's call that a checkpoint
	// cut (Boundary.Partial): the call continues from it. A retried
	// activity finds a newer one in its heartbeat details.
	Prefix *ModelPrefix `json:"prefix,omitempty"`
}

// CallModelResult is the stored answer. In gym style the answer's text is
// returned as one ToolCall of envs.StepTool with arguments {"action": text}.
// It is the answer as a boundary keeps it (PendingCall, whose fields its
// JSON holds flat); what the activity reports beyond that goes beside it
// here, never into the checkpoint schema.
type CallModelResult struct {
	PendingCall
	// Generation summarises the call's generation record; nil when there is
	// none (no token capture and no policy version).
	Generation *GenerationRef `json:"generation,omitempty"`
}

// GenerationRef names a model call's transcript.Generation record and says
// what it holds in counts: the tokens themselves stay in the transcript
// store, so a turn's history does not grow with them, and so do their
// prompt and sequence digests, which the workflow never reads (each cost a
// captured turn about 90 bytes of history; results recorded with them
// still decode).
type GenerationRef struct {
	Record           transcript.Digest `json:"record"`
	Tokens           string            `json:"tokens"` // transcript.TokensPresent, …
	PromptTokens     int               `json:"prompt_tokens,omitempty"`
	GenerationTokens int               `json:"generation_tokens,omitempty"`
	// PrefixBreak: the prompt does not continue the parent's prompt +
	// generation (see transcript.CheckPrefix); the reason says how.
	PrefixBreak       bool   `json:"prefix_break,omitempty"`
	PrefixBreakReason string `json:"prefix_break_reason,omitempty"`
	PolicyVersion     string `json:"policy_version,omitempty"`
	GenerationRecovery
}

// OperateEnvironmentInput applies one tool call or step.
type OperateEnvironmentInput struct {
	RolloutID        string              `json:"rollout_id"`
	Attempt          int                 `json:"attempt"`
	RequestID        string              `json:"request_id"`
	ExpectedRevision int64               `json:"expected_revision"`
	Env              EnvRef              `json:"env"`
	Style            envs.Style          `json:"style"`
	Head             transcript.Digest   `json:"head"`
	Call             transcript.ToolCall `json:"call"`
}

// OperateEnvironmentResult is the outcome. The observation itself is in the
// transcript store under Head; only its effects travel here.
type OperateEnvironmentResult struct {
	Head       transcript.Digest `json:"head"`
	Revision   int64             `json:"revision"`
	Reward     float64           `json:"reward,omitempty"`
	Terminated bool              `json:"terminated,omitempty"`
	Truncated  bool              `json:"truncated,omitempty"`
	// Refusal is set when the environment refused the operation (unknown
	// tool, bad arguments, illegal action). The refusal is shown to the model
	// as the tool output; the revision is unchanged.
	Refusal string `json:"refusal,omitempty"`
	// Replayed tells that the server returned its stored response.
	Replayed bool `json:"replayed,omitempty"`
}

// VerifyInput scores the episode; verify is terminal at the server.
type VerifyInput struct {
	RolloutID        string `json:"rollout_id"`
	Attempt          int    `json:"attempt"`
	RequestID        string `json:"request_id"`
	ExpectedRevision int64  `json:"expected_revision"`
	Env              EnvRef `json:"env"`
	// StoreDetails puts the verdict's details in the transcript store and
	// returns their digest instead of the details themselves, which stay
	// out of workflow history.
	StoreDetails bool `json:"store_details,omitempty"`
}

// VerifyResult is the verdict.
type VerifyResult struct {
	Reward  float64         `json:"reward"`
	Details json.RawMessage `json:"details,omitempty"`
	// DetailsRef names the details (JSON; null when the environment gave
	// none) in the transcript store, when the input asked for that.
	DetailsRef transcript.Digest `json:"details_ref,omitempty"`
}

// Further application error types, beside those above. Each is
// non-retryable: retrying the same input cannot give another answer.
const (
	// ErrBadInput: the activity input is malformed (empty id, bad digest,
	// unknown style). Nothing was sent anywhere.
	ErrBadInput = "BadActivityInput"
	// ErrModelEmpty: the model endpoint answered without any choice.
	ErrModelEmpty = "ModelEmptyAnswer"
	// ErrModelAnswerOverLimit: the model endpoint's answer is over a limit
	// of the worker (its size, or its tool calls in one turn); nothing of
	// it was stored.
	ErrModelAnswerOverLimit = "ModelAnswerOverLimit"
	// ErrTranscript: the transcript store does not hold, or cannot decode,
	// what the input names. Corrupt state fails closed.
	ErrTranscript = "TranscriptUnavailable"
)

// BadInput is a non-retryable error naming what is wrong with an input.
func BadInput(format string, args ...any) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(format, args...), ErrBadInput, nil)
}

// CheckIdentity checks the rollout id and attempt every activity input
// carries.
func CheckIdentity(rolloutID string, attempt int) error {
	if strings.TrimSpace(rolloutID) == "" {
		return BadInput("empty rollout id")
	}
	if attempt < 0 {
		return BadInput("rollout %s: negative attempt %d", rolloutID, attempt)
	}
	return nil
}

// CheckDigest checks a digest an input names.
func CheckDigest(what string, d transcript.Digest) error {
	if err := d.Validate(); err != nil {
		return BadInput("%s: %v", what, err)
	}
	return nil
}

// CheckStyle checks an input's interaction style.
func CheckStyle(s envs.Style) error {
	switch s {
	case envs.StyleTools, envs.StyleGym:
		return nil
	default:
		return BadInput("unknown style %q (want %q or %q)", s, envs.StyleTools, envs.StyleGym)
	}
}

// StoreError classifies a transcript-store failure: a missing or corrupt blob
// does not heal by retrying, so it stops the rollout; other I/O errors may pass.
func StoreError(what string, err error) error {
	if errors.Is(err, transcript.ErrNotFound) || errors.Is(err, transcript.ErrCorrupt) {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s: %v", what, err), ErrTranscript, nil)
	}
	return fmt.Errorf("%s: %w", what, err)
}
