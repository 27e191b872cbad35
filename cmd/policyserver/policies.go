package main

import (
	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/arithmetic"
	"github.com/turnstile-rl/turnstile/envs/blackjack"
	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/envs/sandbox"
	"github.com/turnstile-rl/turnstile/envs/workplace"
	"github.com/turnstile-rl/turnstile/policy"
)

// policies is the registry this server offers. Adding a scripted policy is
// one line here.
func policies() policy.Registry {
	return policy.Registry{
		envs.ScriptedModel(counter.Name):    counter.Policy{},
		envs.ScriptedModel(blackjack.Name):  blackjack.Policy{},
		envs.ScriptedModel(workplace.Name):  workplace.Policy{},
		envs.ScriptedModel(sandbox.Name):    sandbox.Policy{},
		envs.ScriptedModel(arithmetic.Name): arithmetic.Policy{},
	}
}
