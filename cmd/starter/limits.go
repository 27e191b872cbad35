package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/turnstile-rl/turnstile/rollout"
	"github.com/turnstile-rl/turnstile/tasks"
)

// envMaxTurns is the model-call limit of a rollout when --max-turns is not
// given, per environment. Each leaves room (for refusals answered with a
// retry, and for other policies) above what the scripted policy needs to
// finish generated tasks; limits_test.go plays them and checks. Measured
// most over those tasks, at imperfection 0 and 0.2:
//
//   - counter: targets 2..8 from 0, one increment per turn, then "done": 9;
//   - blackjack: gym style, one step per turn, 2..8 hands of 1+ steps: 18;
//   - workplace: one planned tool call per turn, then "done": 6;
//   - sandbox: one write_file per expected file (1..3), then "done": 4;
//   - arithmetic: one answer, then "done": 2.
var envMaxTurns = map[string]int{
	"counter":    16,
	"blackjack":  64,
	"workplace":  24,
	"sandbox":    12,
	"arithmetic": 4,
}

// DefaultMaxTurns is the limit of env's rollouts when --max-turns is not
// given: the environment's own, else the workflow's default.
func DefaultMaxTurns(env string) int {
	if n, ok := envMaxTurns[env]; ok {
		return n
	}
	return rollout.DefaultMaxTurns
}

// scriptedPolicyPrefix + env is the scripted policy of env on the policy
// server ("scripted-counter", …): the model a rollout uses when --policy is
// not given.
const scriptedPolicyPrefix = "scripted-"

// ScriptedPolicy is the model name of env's scripted policy.
func ScriptedPolicy(env string) string { return scriptedPolicyPrefix + env }

// ParseEnvs splits a comma-separated --env value ("counter,blackjack") into
// environment names, in the order given. Every name must have a task
// generator; empty and repeated names are refused.
func ParseEnvs(value string) ([]string, error) {
	known := tasks.Envs()
	if strings.TrimSpace(value) == "" {
		return nil, fmt.Errorf("--env is required: one or more of %s, comma-separated", strings.Join(known, ", "))
	}
	var out []string
	for i, name := range strings.Split(value, ",") {
		name = strings.TrimSpace(name)
		switch {
		case name == "":
			return nil, fmt.Errorf("--env %q: name %d is empty", value, i+1)
		case !slices.Contains(known, name):
			return nil, fmt.Errorf("--env %q: no task generator for environment %q (known: %s)", value, name, strings.Join(known, ", "))
		case slices.Contains(out, name):
			return nil, fmt.Errorf("--env %q: %q is listed twice", value, name)
		}
		out = append(out, name)
	}
	return out, nil
}

// maxTurnsDefaults lists the per-environment defaults for --help:
// "arithmetic 4, blackjack 64, …".
func maxTurnsDefaults() string {
	parts := make([]string, 0, len(envMaxTurns))
	for _, env := range tasks.Envs() {
		parts = append(parts, fmt.Sprintf("%s %d", env, DefaultMaxTurns(env)))
	}
	return strings.Join(parts, ", ")
}
