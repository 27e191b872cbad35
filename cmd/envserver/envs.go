package main

import (
	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/counter"
)

// knownEnvs is the registry of environments this binary can host, by name.
// Adding an environment is one line here.
func knownEnvs() map[string]func() envs.Environment {
	return map[string]func() envs.Environment{
		counter.Name: func() envs.Environment { return counter.New() },
	}
}
