package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/arithmetic"
	"github.com/turnstile-rl/turnstile/envs/blackjack"
	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/envs/sandbox"
	"github.com/turnstile-rl/turnstile/envs/workplace"
	"github.com/turnstile-rl/turnstile/tasks"
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
	if err != nil {
		t.Fatalf("start %s task %s: %v", spec.Name, task, err)
	}
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
		case err != nil:
			t.Fatalf("%s apply %s: %v", spec.Name, tool, err)
		}
		return out
	}
	for ep.turns < limit && !ep.done {
		ep.turns++
		resp, err := pol.Respond(envs.PolicyRequest{Messages: msgs, Tools: tools, Seed: seed, Imperfection: imperfection})
		if err != nil {
			t.Fatalf("%s policy, turn %d: %v", spec.Name, ep.turns, err)
		}
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
		if err != nil {
			t.Fatalf("%s verify: %v", spec.Name, err)
		}
		ep.reward = v.Reward
	}
	return ep
}

// TestDefaultMaxTurnsLetScriptedPoliciesFinish plays generated tasks of every
// environment with its scripted policy: a perfect policy must finish (and,
// in tool style, pass) within the environment's default limit, and so must
// the demo's imperfect one (0.2), whose mistakes may take extra turns.
func TestDefaultMaxTurnsLetScriptedPoliciesFinish(t *testing.T) {
	cases := []struct {
		env   envs.Environment
		pol   envs.Policy
		tasks int
	}{
		{counter.New(), counter.Policy{}, 200},
		{blackjack.New(), blackjack.Policy{}, 400},
		{workplace.New(), workplace.Policy{}, 120},
		{sandbox.New(), sandbox.Policy{}, 24}, // a subprocess per write: keep it small
		{arithmetic.New(), arithmetic.Policy{}, 200},
	}
	covered := map[string]bool{}
	for _, c := range cases {
		name := c.env.Spec().Name
		covered[name] = true
		if ScriptedPolicy(name) != modelOf(c.pol) {
			t.Errorf("%s: ScriptedPolicy = %q, want %q", name, ScriptedPolicy(name), modelOf(c.pol))
		}
		limit := DefaultMaxTurns(name)
		t.Run(name, func(t *testing.T) {
			most := 0
			for i := range c.tasks {
				task, err := tasks.Generate(name, 7, i)
				if err != nil {
					t.Fatal(err)
				}
				for _, imperfection := range []float64{0, 0.2} {
					ep := play(t, c.env, c.pol, RolloutSeed(7, i), task, imperfection, limit)
					if !ep.done {
						t.Fatalf("task %d %s (imperfection %v) not finished in %d turns", i, task, imperfection, limit)
					}
					if imperfection == 0 && c.env.Spec().Style == envs.StyleTools && !Passed(name, ep.reward) {
						t.Errorf("task %d %s: perfect policy scored %v", i, task, ep.reward)
					}
					most = max(most, ep.turns)
				}
			}
			t.Logf("%s: at most %d turns over %d tasks (limit %d)", name, most, c.tasks, limit)
		})
	}
	for _, env := range tasks.Envs() {
		if !covered[env] {
			t.Errorf("environment %s has a task generator but no case here", env)
		}
		if _, ok := envMaxTurns[env]; !ok {
			t.Errorf("environment %s has no default max turns", env)
		}
	}
}

// modelOf is the model name the policy server registers pol under.
func modelOf(pol envs.Policy) string {
	switch pol.(type) {
	case counter.Policy:
		return envs.ScriptedModel(counter.Name)
	case blackjack.Policy:
		return envs.ScriptedModel(blackjack.Name)
	case workplace.Policy:
		return envs.ScriptedModel(workplace.Name)
	case sandbox.Policy:
		return envs.ScriptedModel(sandbox.Name)
	case arithmetic.Policy:
		return envs.ScriptedModel(arithmetic.Name)
	}
	return fmt.Sprintf("%T", pol)
}
