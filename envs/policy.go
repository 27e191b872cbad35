package envs

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
)

// The types below are what a scripted policy sees and answers. They live
// here, next to Environment, so each environment package can hold its own
// scripted policy without importing the policy server (which would import
// every environment back).

// scriptedModelPrefix + an environment's name is the model name of its
// scripted policy on the policy server ("scripted-counter", …). Users pass
// these names and recorded histories hold them, so they must not change.
const scriptedModelPrefix = "scripted-"

// ScriptModel is the model name of the generic scripted policy on the
// policy server: it drives any environment by the script its task carries
// (internal/policy.Script), the default policy of an environment that is
// not in the catalog.
const ScriptModel = "scripted"

// ScriptedModel is the model name of env's scripted policy. It is the only
// place the naming convention is spelled out.
func ScriptedModel(env string) string { return scriptedModelPrefix + env }

// Message is one chat message as a scripted policy sees it.
type Message struct {
	Role       string     `json:"role"`
	Content    string     `json:"content,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

// ToolCall is a function call.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// PolicyRequest is what a scripted policy decides on.
type PolicyRequest struct {
	Messages []Message
	Tools    []string // names of the tools offered
	Seed     int64
	// Imperfection is the probability, drawn deterministically from Seed and
	// the task, that the policy makes a mistake on this episode, so rewards vary.
	Imperfection float64
}

// PolicyResponse is the next assistant message: tool calls, or a final answer.
type PolicyResponse struct {
	Content   string
	ToolCalls []ToolCall
}

// Policy is a scripted policy. Respond must be a pure function of its
// request: an interrupted rollout is compared with an uninterrupted one.
type Policy interface {
	Respond(req PolicyRequest) (PolicyResponse, error)
}

// EpisodeRand returns a generator seeded from seed and the episode's first
// user message, so every decision in an episode is reproducible and
// independent of how many turns came before a restart.
func EpisodeRand(seed int64, msgs []Message, salt string) *rand.Rand {
	h := sha256.New()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(seed))
	h.Write(b[:])
	h.Write([]byte(salt))
	for _, m := range msgs {
		if m.Role == "user" {
			h.Write([]byte(m.Content))
			break
		}
	}
	sum := h.Sum(nil)
	return rand.New(rand.NewPCG(binary.BigEndian.Uint64(sum[:8]), binary.BigEndian.Uint64(sum[8:16])))
}

// CallID derives a deterministic tool-call id from the conversation length
// and index, so equal conversations get equal ids.
func CallID(msgs []Message, index int) string {
	h := sha256.New()
	for _, m := range msgs {
		b, _ := json.Marshal(m)
		h.Write(b)
	}
	fmt.Fprintf(h, "#%d", index)
	return fmt.Sprintf("call_%x", h.Sum(nil)[:8])
}

// ToolReplies counts the tool messages of a conversation: for a scripted
// policy that makes one tool call per turn, the index of its next step.
func ToolReplies(msgs []Message) int {
	n := 0
	for _, m := range msgs {
		if m.Role == "tool" {
			n++
		}
	}
	return n
}
