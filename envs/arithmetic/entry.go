package arithmetic

import (
	"encoding/json"
	"math/rand/v2"

	"github.com/turnstile-rl/turnstile/envs"
)

// Entry is the arithmetic environment's line in the catalog (envs/catalog).
func Entry() envs.Entry {
	return envs.Entry{
		Name:         Name,
		New:          func() envs.Environment { return New() },
		GenerateTask: generateTask,
		// One answer, then "done": 2; the rest is room for a refused answer.
		MaxTurns: 4,
		Policy:   Policy{},
	}
}

// generateTask draws a seed and returns task 0 of the task set it seeds.
func generateTask(r *rand.Rand) (json.RawMessage, error) { return GenerateTask(r.Int64(), 0), nil }
