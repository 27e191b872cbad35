package main

import (
	"github.com/turnstile-rl/turnstile/envs/catalog"
	"github.com/turnstile-rl/turnstile/internal/policy"
)

// policies is the registry this server offers: the scripted policy of every
// environment in the catalog, under its model name ("scripted-counter", …).
func policies() policy.Registry { return policy.Registry(catalog.Policies()) }
