// Package envs defines what an environment is: the interface every environment
// package implements and the environment server hosts behind the participant
// protocol. It imports nothing of ours, so an environment can be written and
// tested on its own.
package envs

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Mode is how an environment's state survives a checkpoint. Environments opt in
// explicitly; one that declares nothing is treated as ModeRestartOnly, because
// claiming exportable state that is not would silently corrupt a restore.
type Mode string

const (
	// ModeExportRestore: Export captures the whole session state and Restore
	// rebuilds an identical session from it.
	ModeExportRestore Mode = "export_restore"
	// ModeRestartOnly: state cannot be exported; after a restore the rollout
	// starts over as a new attempt with a fresh session.
	ModeRestartOnly Mode = "restart_only"
	// ModeStateless: the session holds nothing but what Start derived from
	// the seed and task (a pure verifier). Its Export is that, small and
	// exact; a checkpoint carries it so the rollout continues at its
	// boundary after a restore instead of starting over.
	ModeStateless Mode = "stateless"
	// ModeReplay: state cannot be exported, but the same mutations applied
	// in the same order to a fresh session (Start with the same seed and
	// task, then every applied operation) rebuild it and answer each of
	// them exactly as the first time. After a restore the server re-applies
	// the rollout's recorded mutations and compares every answer with the
	// recorded one; equal all through, the rollout continues at its
	// boundary; any difference, and it starts over as a restart-only one
	// would. An environment declares it only when re-applying a mutation
	// has no effect outside the session (no mail sent twice).
	ModeReplay Mode = "replay"
)

// EffectiveMode returns m, or ModeRestartOnly when m is empty or unknown.
func EffectiveMode(m Mode) Mode {
	switch m {
	case ModeExportRestore, ModeRestartOnly, ModeStateless, ModeReplay:
		return m
	default:
		return ModeRestartOnly
	}
}

// Style is how an agent drives the environment.
type Style string

const (
	// StyleTools: the model answers with tool calls; each is one operation.
	StyleTools Style = "tools"
	// StyleGym: Gymnasium reset/step; the model's answer is the action given
	// to the single operation "step", which returns a dense reward.
	StyleGym Style = "gym"
)

// StepTool is the operation name of a Gymnasium-style step.
const StepTool = "step"

// Tool describes one operation, in the shape of an OpenAI function tool.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"` // JSON Schema object
}

// Spec is what an environment declares about itself.
type Spec struct {
	Name  string `json:"name"`
	Mode  Mode   `json:"mode"`
	Style Style  `json:"style"`
	Tools []Tool `json:"tools"`
	// TaskFormat, optional, says what task Start accepts, so a caller that
	// does not know the environment (a foreign one, served by a
	// participant in another language) can write a dataset for it.
	TaskFormat *TaskFormat `json:"task_format,omitempty"`
}

// TaskFormat describes the task JSON an environment's Start accepts: a
// JSON Schema, or a short description, with an example; each optional.
type TaskFormat struct {
	Description string          `json:"description,omitempty"`
	Schema      json.RawMessage `json:"schema,omitempty"`  // JSON Schema of the task
	Example     json.RawMessage `json:"example,omitempty"` // one task Start accepts
}

// Start is the beginning of an episode.
type Start struct {
	// Instructions is the system prompt for the agent.
	Instructions string `json:"instructions"`
	// Observation is the first user-visible observation (the task statement).
	Observation string `json:"observation"`
}

// Outcome is the result of one operation.
type Outcome struct {
	Observation string  `json:"observation"`
	Reward      float64 `json:"reward"` // dense reward of this step (gym style); 0 for tools
	Terminated  bool    `json:"terminated,omitempty"`
	Truncated   bool    `json:"truncated,omitempty"`
}

// Verdict is the score of a finished episode.
type Verdict struct {
	Reward  float64         `json:"reward"`
	Details json.RawMessage `json:"details,omitempty"`
}

// Environment creates sessions. Implementations must be safe for concurrent
// use; the server serialises calls on one Session.
type Environment interface {
	Spec() Spec
	// Start begins an episode for task with seed. Equal inputs give equal
	// sessions: recovery depends on it.
	Start(seed int64, task json.RawMessage) (Session, Start, error)
	// Restore rebuilds a session from Session.Export output. It validates
	// everything and returns an *Error with CodeBadState on any problem.
	// Restart-only environments return an error with CodeNotExportable.
	Restore(state json.RawMessage) (Session, error)
}

// Session is one episode's state. Methods are never called concurrently.
type Session interface {
	// Apply runs one operation. An *Error leaves the state unchanged.
	Apply(tool string, args json.RawMessage) (Outcome, error)
	// Verify scores the episode; it does not change state.
	Verify() (Verdict, error)
	// Export returns the complete state (deterministic JSON).
	Export() (json.RawMessage, error)
	// Close releases resources (processes, directories).
	Close() error
}

// Error codes an environment returns; the server maps them to HTTP 4xx.
const (
	CodeUnknownTool   = "unknown_tool"
	CodeBadArguments  = "bad_arguments"
	CodeIllegalAction = "illegal_action"
	CodeBadTask       = "bad_task"
	CodeBadState      = "bad_state"
	CodeNotExportable = "not_exportable"
	CodeEpisodeOver   = "episode_over"
)

// Error is a refusal by the environment that names the problem. The session
// state is unchanged when Apply returns one.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

// Errorf builds an *Error.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// CodeOf returns the code of an *Error in err's chain, or "".
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
