package main

import (
	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/arithmetic"
	"github.com/turnstile-rl/turnstile/envs/blackjack"
	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/envs/sandbox"
	"github.com/turnstile-rl/turnstile/envs/workplace"
)

// knownEnvs is the registry of environments this binary can host, by name.
// Adding an environment is one line here.
func knownEnvs() map[string]func() envs.Environment {
	return map[string]func() envs.Environment{
		counter.Name:    func() envs.Environment { return counter.New() },
		blackjack.Name:  func() envs.Environment { return blackjack.New() },
		workplace.Name:  func() envs.Environment { return workplace.New() },
		sandbox.Name:    func() envs.Environment { return sandbox.New() },
		arithmetic.Name: func() envs.Environment { return arithmetic.New() },
	}
}
