package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/catalog"
	"github.com/turnstile-rl/turnstile/rollout"
)

// DefaultMaxTurns is the limit of env's rollouts when --max-turns is not
// given: the environment's own (its catalog entry says why that much), else
// the workflow's default.
func DefaultMaxTurns(env string) int {
	if e, ok := catalog.Lookup(env); ok {
		return e.MaxTurns
	}
	return rollout.DefaultMaxTurns
}

// ScriptedPolicy is the model name of env's scripted policy on the policy
// server ("scripted-counter", …): the model a rollout uses when --policy is
// not given. The catalog's tests check the policy server offers it for every
// environment the starter accepts.
func ScriptedPolicy(env string) string { return envs.ScriptedModel(env) }

// ParseEnvs splits a comma-separated --env value ("counter,blackjack") into
// environment names, in the order given. Every name must be in the catalog;
// empty and repeated names are refused.
func ParseEnvs(value string) ([]string, error) {
	known := catalog.Names()
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
	all := catalog.All()
	parts := make([]string, 0, len(all))
	for _, e := range all {
		parts = append(parts, fmt.Sprintf("%s %d", e.Name, e.MaxTurns))
	}
	return strings.Join(parts, ", ")
}
