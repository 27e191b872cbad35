// Package catalog lists every environment turnstile knows. The environment
// server hosts its entries, the starter generates their tasks, takes their
// default turn limits and pass rules, and the policy server serves their
// scripted policies, so adding an environment is its package plus one line in
// All, and catalog_test fails if the new entry lacks a part.
package catalog

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/arithmetic"
	"github.com/turnstile-rl/turnstile/envs/blackjack"
	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/envs/notes"
	"github.com/turnstile-rl/turnstile/envs/sandbox"
	"github.com/turnstile-rl/turnstile/envs/workplace"
)

// All returns every entry, sorted by name. Adding an environment is one line
// here. A fresh slice each call: callers may not change the catalog.
func All() []envs.Entry {
	entries := []envs.Entry{
		arithmetic.Entry(),
		blackjack.Entry(),
		counter.Entry(),
		notes.Entry(),
		sandbox.Entry(),
		workplace.Entry(),
	}
	slices.SortFunc(entries, func(a, b envs.Entry) int { return strings.Compare(a.Name, b.Name) })
	return entries
}

// Names returns the environments' names, sorted.
func Names() []string {
	all := All()
	names := make([]string, len(all))
	for i, e := range all {
		names[i] = e.Name
	}
	return names
}

// HostedNames returns the names of the environments the Go environment
// server can host (the rest run in other participants), sorted.
func HostedNames() []string {
	var names []string
	for _, e := range All() {
		if e.Hosted() {
			names = append(names, e.Name)
		}
	}
	return names
}

// Lookup returns the entry of the environment called name.
func Lookup(name string) (envs.Entry, bool) {
	for _, e := range All() {
		if e.Name == name {
			return e, true
		}
	}
	return envs.Entry{}, false
}

// Find is Lookup with an error that lists the known environments, for
// callers that refuse an unknown name.
func Find(name string) (envs.Entry, error) {
	e, ok := Lookup(name)
	if !ok {
		return envs.Entry{}, fmt.Errorf("unknown environment %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	return e, nil
}

// Task returns the task of rollout index of a set seeded with seed, for
// environment env. Equal arguments give equal bytes.
func Task(env string, seed int64, index int) (json.RawMessage, error) {
	e, err := Find(env)
	if err != nil {
		return nil, err
	}
	return e.Task(seed, index)
}

// Policies returns every scripted policy by its model name
// ("scripted-counter", …), as the policy server offers them.
func Policies() map[string]envs.Policy {
	all := All()
	out := make(map[string]envs.Policy, len(all))
	for _, e := range all {
		out[e.Model()] = e.Policy
	}
	return out
}

// TurnLimits lists every environment's default turn limit, for help texts:
// "arithmetic 4, blackjack 64, …".
func TurnLimits() string {
	all := All()
	parts := make([]string, 0, len(all))
	for _, e := range all {
		parts = append(parts, fmt.Sprintf("%s %d", e.Name, e.MaxTurns))
	}
	return strings.Join(parts, ", ")
}
