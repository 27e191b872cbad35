package workplace

import (
	"encoding/json"
	"math/rand/v2"

	"github.com/turnstile-rl/turnstile/envs"
)

// Entry is the workplace environment's line in the catalog (envs/catalog).
func Entry() envs.Entry {
	return envs.Entry{
		Name:         Name,
		New:          func() envs.Environment { return New() },
		GenerateTask: generateTask,
		// One planned tool call per turn, then "done": 6 at most measured; the
		// rest is room for refused calls and for other policies.
		MaxTurns: 24,
		Policy:   Policy{},
	}
}

// generateTask draws the seed and the index of a task; both go into the task
// (its task_id), so tasks of different draws never share an id.
func generateTask(r *rand.Rand) (json.RawMessage, error) {
	return GenerateTask(r.Int64(), r.IntN(1_000_000)), nil
}
