package policy_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/internal/policy"
)

// TestScriptPlaysTheTaskScript: the generic policy answers turn i with the
// calls of the script's turn i, then with the answer, whatever the tools.
func TestScriptPlaysTheTaskScript(t *testing.T) {
	first := []envs.Message{
		{Role: "system", Content: "Keep a stack."},
		{Role: "user", Content: "Push and pop.\nSCRIPT {\"turns\":[[{\"name\":\"push\",\"arguments\":{ \"value\": 3 }},{\"name\":\"push\",\"arguments\":{\"value\":4}}],[{\"name\":\"pop\",\"arguments\":{}}]],\"answer\":\"7\"}"},
	}
	res, err := policy.Script{}.Respond(envs.PolicyRequest{Messages: first})
	require.NoError(t, err)
	require.Len(t, res.ToolCalls, 2)
	assert.Equal(t, []string{"push", "push"}, []string{res.ToolCalls[0].Name, res.ToolCalls[1].Name})
	assert.Equal(t, `{"value":3}`, res.ToolCalls[0].Arguments, "arguments are compact JSON")
	assert.NotEqual(t, res.ToolCalls[0].ID, res.ToolCalls[1].ID)

	again, err := policy.Script{}.Respond(envs.PolicyRequest{Messages: first})
	require.NoError(t, err)
	assert.Equal(t, res, again, "a pure function of the conversation")

	second := append(first, envs.Message{Role: "assistant", ToolCalls: res.ToolCalls},
		envs.Message{Role: "tool", ToolCallID: res.ToolCalls[0].ID, Content: "ok"},
		envs.Message{Role: "tool", ToolCallID: res.ToolCalls[1].ID, Content: "ok"})
	res, err = policy.Script{}.Respond(envs.PolicyRequest{Messages: second})
	require.NoError(t, err)
	require.Len(t, res.ToolCalls, 1)
	assert.Equal(t, "pop", res.ToolCalls[0].Name)
	assert.Equal(t, "{}", res.ToolCalls[0].Arguments)

	third := append(second, envs.Message{Role: "assistant", ToolCalls: res.ToolCalls}, envs.Message{Role: "tool", Content: "4"})
	res, err = policy.Script{}.Respond(envs.PolicyRequest{Messages: third})
	require.NoError(t, err)
	assert.Equal(t, envs.PolicyResponse{Content: "7"}, res)
}

// TestScriptListFormAnswersDone: a bare list of turns ends with "done".
func TestScriptListFormAnswersDone(t *testing.T) {
	msgs := []envs.Message{{Role: "user", Content: `SCRIPT []`}}
	res, err := policy.Script{}.Respond(envs.PolicyRequest{Messages: msgs})
	require.NoError(t, err)
	assert.Equal(t, envs.PolicyResponse{Content: policy.DefaultScriptAnswer}, res)
}

// TestScriptRefusesABadScript names what is wrong.
func TestScriptRefusesABadScript(t *testing.T) {
	for _, tc := range []struct{ name, content, want string }{
		{"no line", "Push 3.", `no "SCRIPT" line`},
		{"not JSON", "SCRIPT [[{", "bad SCRIPT line"},
		{"unknown field", `SCRIPT {"turns":[],"answr":"x"}`, "unknown field"},
		{"no name", `SCRIPT [[{"arguments":{}}]]`, "turn 0 call 0: no tool name"},
		{"arguments not an object", `SCRIPT [[{"name":"pop","arguments":3}]]`, "tool pop: arguments must be a JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := policy.Script{}.Respond(envs.PolicyRequest{Messages: []envs.Message{{Role: "user", Content: tc.content}}})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
