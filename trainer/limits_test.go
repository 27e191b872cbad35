package trainer

import (
	"cmp"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/catalog"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// episode is what playing one generated task in-process gave.
type episode struct {
	turns  int // model calls, as the Rollout workflow counts them
	done   bool
	reward float64 // verdict (tools) or summed step rewards (gym)
}

// play runs env's scripted policy against an in-process session the way the
// Rollout workflow drives one (system + task statement, then one model call
// per turn; tool style ends on an answer without tool calls, gym style when
// the step terminates), for at most limit turns.
func play(t *testing.T, env envs.Environment, pol envs.Policy, seed int64, task json.RawMessage, imperfection float64, limit int) episode {
	t.Helper()
	spec := env.Spec()
	sess, start, err := env.Start(seed, task)
	require.NoError(t, err, "start %s task %s", spec.Name, task)
	defer sess.Close()
	var tools []string
	for _, tool := range spec.Tools {
		tools = append(tools, tool.Name)
	}
	msgs := []envs.Message{{Role: "system", Content: start.Instructions}, {Role: "user", Content: start.Observation}}
	var ep episode
	apply := func(tool string, args json.RawMessage) envs.Outcome {
		out, err := sess.Apply(tool, args)
		var refusal *envs.Error
		switch {
		case errors.As(err, &refusal):
			return envs.Outcome{Observation: "error: " + refusal.Code + ": " + refusal.Message}
		default:
			require.NoError(t, err, "%s apply %s", spec.Name, tool)
		}
		return out
	}
	for ep.turns < limit && !ep.done {
		ep.turns++
		resp, err := pol.Respond(envs.PolicyRequest{Messages: msgs, Tools: tools, Seed: seed, Imperfection: imperfection})
		require.NoError(t, err, "%s policy, turn %d", spec.Name, ep.turns)
		if spec.Style == envs.StyleGym {
			msgs = append(msgs, envs.Message{Role: "assistant", Content: resp.Content})
			args, _ := json.Marshal(map[string]string{"action": resp.Content})
			out := apply(envs.StepTool, args)
			msgs = append(msgs, envs.Message{Role: "user", Content: out.Observation})
			ep.reward += out.Reward
			ep.done = out.Terminated || out.Truncated
			continue
		}
		msgs = append(msgs, envs.Message{Role: "assistant", Content: resp.Content, ToolCalls: resp.ToolCalls})
		if len(resp.ToolCalls) == 0 {
			ep.done = true
		}
		for _, call := range resp.ToolCalls {
			out := apply(call.Name, json.RawMessage(call.Arguments))
			msgs = append(msgs, envs.Message{Role: "tool", ToolCallID: call.ID, Content: out.Observation})
			if out.Terminated || out.Truncated {
				ep.done = true
			}
		}
	}
	if spec.Style != envs.StyleGym {
		v, err := sess.Verify()
		require.NoError(t, err, "%s verify", spec.Name)
		ep.reward = v.Reward
	}
	return ep
}

// TestDefaultMaxTurnsLetScriptedPoliciesFinish plays generated tasks of every
// environment in the catalog with its scripted policy, seeded as the starter
// seeds rollouts: a perfect policy must finish (and, in tool style, pass)
// within the environment's default limit, and so must the demo's imperfect
// one (0.2), whose mistakes may take extra turns.
func TestDefaultMaxTurnsLetScriptedPoliciesFinish(t *testing.T) {
	const defaultTasks = 200
	// Tasks played per environment where the default does not fit: more for
	// blackjack, whose episodes vary most; few for sandbox, which runs a
	// subprocess per write.
	tasksOf := map[string]int{"blackjack": 400, "workplace": 120, "sandbox": 24}
	for _, e := range catalog.All() {
		limit := DefaultMaxTurns(e.Name)
		n := cmp.Or(tasksOf[e.Name], defaultTasks)
		t.Run(e.Name, func(t *testing.T) {
			if !e.Hosted() {
				t.Skipf("%s runs in %s, whose Go test plays its tasks with this limit", e.Name, e.Remote)
			}
			env := e.New()
			most := 0
			for i := range n {
				task, err := catalog.Task(e.Name, 7, i)
				require.NoError(t, err)
				for _, imperfection := range []float64{0, 0.2} {
					ep := play(t, env, e.Policy, RolloutSeed(7, i), task, imperfection, limit)
					require.True(t, ep.done, "task %d %s (imperfection %v) not finished in %d turns", i, task, imperfection, limit)
					if imperfection == 0 && env.Spec().Style == envs.StyleTools {
						assert.True(t, Passed(e.Name, ep.reward), "task %d %s: perfect policy scored %v", i, task, ep.reward)
					}
					most = max(most, ep.turns)
				}
			}
			t.Logf("%s: at most %d turns over %d tasks (limit %d)", e.Name, most, n, limit)
		})
	}
}

// TestLimitsReadTheCatalog checks the starter's defaults come from the
// catalog, and what an environment the catalog lacks gets.
func TestLimitsReadTheCatalog(t *testing.T) {
	tests := []struct {
		env      string
		maxTurns int
		model    string
	}{
		{"counter", 16, "scripted-counter"},
		{"blackjack", 64, "scripted-blackjack"},
		{"workplace", 24, "scripted-workplace"},
		{"sandbox", 12, "scripted-sandbox"},
		{"arithmetic", 4, "scripted-arithmetic"},
		{"chess", rollout.DefaultMaxTurns, "scripted-chess"},
	}
	for _, tt := range tests {
		t.Run(tt.env, func(t *testing.T) {
			assert.Equal(t, tt.maxTurns, DefaultMaxTurns(tt.env), "DefaultMaxTurns(%q)", tt.env)
			got := ScriptedPolicy(tt.env)
			assert.Equal(t, tt.model, got, "ScriptedPolicy(%q) = %q, want %q", tt.env, got, tt.model)
		})
	}
}
