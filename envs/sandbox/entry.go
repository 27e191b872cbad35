package sandbox

import (
	"encoding/json"
	"math/rand/v2"

	"github.com/turnstile-rl/turnstile/envs"
)

// Entry is the sandbox environment's line in the catalog (envs/catalog).
func Entry() envs.Entry {
	return envs.Entry{
		Name:         Name,
		New:          func() envs.Environment { return New() },
		GenerateTask: generateTask,
		// One write_file per expected file (1..3), then "done": 4 at most; the
		// rest is room for refused calls and for other policies.
		MaxTurns: 12,
		Policy:   Policy{},
	}
}

// generateTask draws a seed and returns task 0 of the task set it seeds.
func generateTask(r *rand.Rand) (json.RawMessage, error) { return GenerateTask(r.Int64(), 0), nil }
