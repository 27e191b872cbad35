// Package policy serves scripted policies behind an OpenAI-compatible
// endpoint (cmd/policyserver), so an interrupted rollout can be compared with
// an uninterrupted one, and a real model is a configuration change away. The
// policies themselves live next to their environments (envs/…) and reach the
// server through the environment catalog.
package policy

import (
	"fmt"
	"sort"

	"github.com/turnstile-rl/turnstile/envs"
)

// Registry maps a model name ("scripted-counter", …) to a policy.
type Registry map[string]envs.Policy

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
func (r Registry) Lookup(model string) (envs.Policy, error) {
	p, ok := r[model]
	if !ok {
		return nil, fmt.Errorf("unknown model %q (have %v)", model, r.Names())
	}
	return p, nil
}
