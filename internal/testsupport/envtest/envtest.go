// Package envtest is what the tests of environments, policies and
// environment servers share: a session's export, the counter's task and
// conversation, and the identity of a request. Only tests import it.
package envtest

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// Export is s's exported state.
func Export(t testing.TB, s envs.Session) json.RawMessage {
	t.Helper()
	b, err := s.Export()
	require.NoError(t, err, "Export")
	return b
}

// CounterTask is the counter environment's task statement.
func CounterTask(start, target int) string {
	return fmt.Sprintf("Increase the counter from %d to %d.\nTASK {\"start\":%d,\"target\":%d}", start, target, start, target)
}

// CounterConversation is the system message, the user's task and then,
// per observation, one assistant increment call followed by the tool
// message showing the observation.
func CounterConversation(task string, observations ...string) []envs.Message {
	msgs := []envs.Message{
		{Role: "system", Content: "You operate a counter."},
		{Role: "user", Content: task},
	}
	for i, obs := range observations {
		id := fmt.Sprintf("call_%d", i)
		msgs = append(msgs,
			envs.Message{Role: "assistant", ToolCalls: []envs.ToolCall{{ID: id, Name: counter.ToolIncrement, Arguments: `{"amount":1}`}}},
			envs.Message{Role: "tool", ToolCallID: id, Content: obs},
		)
	}
	return msgs
}

// ID is the identity of request req of attempt of rollout.
func ID(rollout string, attempt int, req string) protocol.Identity {
	return protocol.Identity{RolloutID: rollout, Attempt: attempt, RequestID: req}
}
