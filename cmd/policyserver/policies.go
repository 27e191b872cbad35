package main

import (
	"github.com/turnstile-rl/turnstile/envs/catalog"
	"github.com/turnstile-rl/turnstile/internal/policy"
)

// policies is the registry this server offers: the scripted policy of every
// environment in the catalog, under its model name ("scripted-counter", …),
// and the generic one that drives any environment by the script its task
// carries ("scripted", policy.Script).
func policies() policy.Registry {
	reg := policy.Registry(catalog.Policies())
	reg[policy.ScriptModel] = policy.Script{}
	return reg
}
