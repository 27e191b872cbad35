// Package activities holds every side effect of a rollout: model calls through
// the official openai-go SDK, environment calls, and transcript storage. The
// inputs and results here are what workflow history records, so none of them
// grows with the conversation: conversations travel as transcript heads.
package rollout

import (
	"encoding/json"
	"strconv"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/transcript"
)

// Activity names, as registered on the worker.
const (
	StartEnvironmentName   = "StartEnvironment"
	CallModelName          = "CallModel"
	OperateEnvironmentName = "OperateEnvironment"
	VerifyName             = "Verify"
)

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
	// that a retry cannot fix (unknown session, revision mismatch, conflict).
	ErrEnvironment = "EnvironmentRefused"
)

// EnvRef names an environment and, optionally, the server hosting it. An
// empty URL means the worker's default environment server.
type EnvRef struct {
	Name string `json:"name"`
	URL  string `json:"url,omitempty"`
}

// PolicyRef names the policy model and, optionally, its OpenAI-compatible
// base URL. An empty BaseURL means the worker's default endpoint. The API key
// never travels in workflow input; the worker holds it.
type PolicyRef struct {
	Model   string `json:"model"`
	BaseURL string `json:"base_url,omitempty"`
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

// StartEnvironmentInput seeds the rollout's environment session.
type StartEnvironmentInput struct {
	RolloutID string          `json:"rollout_id"`
	Attempt   int             `json:"attempt"`
	Env       EnvRef          `json:"env"`
	Seed      int64           `json:"seed"`
	Task      json.RawMessage `json:"task"`
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
	// Parent is the model-call id of the previous call in this rollout's
	// lineage, across attempts; empty for the first.
	Parent string `json:"parent,omitempty"`
}

// CallModelResult is the stored answer. In gym style the answer's text is
// returned as one ToolCall of envs.StepTool with arguments {"action": text}.
type CallModelResult struct {
	CallID       string                `json:"call_id"`
	Parent       string                `json:"parent,omitempty"`
	Head         transcript.Digest     `json:"head"`
	ToolCalls    []transcript.ToolCall `json:"tool_calls,omitempty"`
	FinishReason string                `json:"finish_reason,omitempty"`
	Usage        Usage                 `json:"usage"`
}

// ModelCallID is the id of a rollout's model call: unique per attempt and
// turn, and stable across retries of the activity.
func ModelCallID(rolloutID string, attempt, turn int) string {
	return rolloutID + "/a" + itoa(attempt) + "/t" + itoa(turn)
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
}

// VerifyResult is the verdict.
type VerifyResult struct {
	Reward  float64         `json:"reward"`
	Details json.RawMessage `json:"details,omitempty"`
}

func itoa(n int) string {
	return strconv.Itoa(n)
}
