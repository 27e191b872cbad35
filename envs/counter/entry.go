package counter

import (
	"encoding/json"
	"math/rand/v2"

	"github.com/turnstile-rl/turnstile/envs"
)

// Entry is the counter environment's line in the catalog (envs/catalog).
func Entry() envs.Entry {
	return envs.Entry{
		Name:         Name,
		New:          func() envs.Environment { return New() },
		GenerateTask: generateTask,
		// Targets 2..8 from 0, one increment per turn, then "done": 9 at
		// most; the rest is room for refused calls and for other policies.
		MaxTurns: 16,
		Policy:   Policy{},
	}
}

// Generated targets are drawn from [minTaskTarget, maxTaskTarget]: a few
// turns each, so sets finish quickly yet episodes differ in length.
const (
	minTaskTarget = 2
	maxTaskTarget = 8
)

// generateTask draws a target and leaves start and padding to their
// defaults. The task holds the target alone: sets already submitted and the
// recorded fixtures hold exactly these bytes.
func generateTask(r *rand.Rand) (json.RawMessage, error) {
	return json.Marshal(struct {
		Target int `json:"target"`
	}{Target: minTaskTarget + r.IntN(maxTaskTarget-minTaskTarget+1)})
}
