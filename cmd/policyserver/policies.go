package main

import "github.com/turnstile-rl/turnstile/policy"

// policies is the registry this server offers. Adding a scripted policy is
// one line here.
func policies() policy.Registry {
	return policy.Registry{
		policy.CounterModel:    policy.Counter{},
		policy.BlackjackModel:  policy.Blackjack{},
		policy.WorkplaceModel:  policy.Workplace{},
		policy.SandboxModel:    policy.Sandbox{},
		policy.ArithmeticModel: policy.Arithmetic{},
	}
}
