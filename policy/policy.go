// Package policy holds scripted policies: deterministic functions from a
// conversation and a seed to the next assistant message. The policy server
// (cmd/policyserver) serves them behind an OpenAI-compatible endpoint, so an
// interrupted rollout can be compared with an uninterrupted one, and a real
// model is a configuration change away.
package policy

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
)

// Message is one chat message as the policy sees it.
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

// Request is what a policy decides on.
type Request struct {
	Messages []Message
	Tools    []string // names of the tools offered
	Seed     int64
	// Imperfection is the probability, drawn deterministically from Seed and
	// the task, that the policy makes a mistake on this episode, so rewards vary.
	Imperfection float64
}

// Response is the next assistant message: tool calls, or a final answer.
type Response struct {
	Content   string
	ToolCalls []ToolCall
}

// Policy is a scripted policy. Respond must be a pure function of its request.
type Policy interface {
	Respond(req Request) (Response, error)
}

// Registry maps a model name ("scripted-counter", …) to a policy.
type Registry map[string]Policy

// Names returns the registered model names, sorted.
func (r Registry) Names() []string {
	names := make([]string, 0, len(r))
	for n := range r {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Lookup returns the policy for model.
func (r Registry) Lookup(model string) (Policy, error) {
	p, ok := r[model]
	if !ok {
		return nil, fmt.Errorf("unknown model %q (have %v)", model, r.Names())
	}
	return p, nil
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
