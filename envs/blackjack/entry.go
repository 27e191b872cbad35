package blackjack

import (
	"encoding/json"
	"math/rand/v2"

	"github.com/turnstile-rl/turnstile/envs"
)

// Entry is the blackjack environment's line in the catalog (envs/catalog).
func Entry() envs.Entry {
	return envs.Entry{
		Name:         Name,
		New:          func() envs.Environment { return New() },
		GenerateTask: generateTask,
		// Gym style, one step per turn, 2..8 hands of 1+ steps: 18 at most
		// measured; the rest is room for refused actions and other policies.
		MaxTurns: 64,
		// A sum of per-step rewards: winning more hands than losing is a pass.
		DenseReward: true,
		Policy:      Policy{},
	}
}

// generateTask draws a seed and returns task 0 of the task set it seeds.
func generateTask(r *rand.Rand) (json.RawMessage, error) { return GenerateTask(r.Int64(), 0), nil }
