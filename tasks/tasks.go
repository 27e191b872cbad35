// Package tasks generates the task of each rollout in a set, per environment.
// A task is the JSON an environment's Start receives; it is a pure function of
// (environment, seed, index), so a set submitted twice, or a rollout restarted
// from scratch, gets the same task.
package tasks

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"

	"github.com/turnstile-rl/turnstile/envs/arithmetic"
	"github.com/turnstile-rl/turnstile/envs/blackjack"
	"github.com/turnstile-rl/turnstile/envs/sandbox"
	"github.com/turnstile-rl/turnstile/envs/workplace"
)

// Generator builds the task of one rollout from its own random source.
type Generator func(r *rand.Rand) (any, error)

// generators is the table of environments that have a task generator. Adding
// an environment (blackjack, workplace, sandbox, arithmetic) is one entry.
var generators = map[string]Generator{
	"counter":    counterTask,
	"blackjack":  func(r *rand.Rand) (any, error) { return blackjack.GenerateTask(r.Int64(), 0), nil },
	"workplace":  func(r *rand.Rand) (any, error) { return workplace.GenerateTask(r.Int64(), r.IntN(1_000_000)), nil },
	"sandbox":    func(r *rand.Rand) (any, error) { return sandbox.GenerateTask(r.Int64(), 0), nil },
	"arithmetic": func(r *rand.Rand) (any, error) { return arithmetic.GenerateTask(r.Int64(), 0), nil },
}

// CounterTask is the task of the counter environment: count up to Target.
type CounterTask struct {
	Target int `json:"target"`
}

// Counter targets are drawn from [counterMinTarget, counterMaxTarget].
const (
	counterMinTarget = 2
	counterMaxTarget = 8
)

func counterTask(r *rand.Rand) (any, error) {
	return CounterTask{Target: counterMinTarget + r.IntN(counterMaxTarget-counterMinTarget+1)}, nil
}

// Envs returns the environments that have a task generator, sorted.
func Envs() []string {
	names := make([]string, 0, len(generators))
	for name := range generators {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Generate returns the task of rollout index of a set seeded with seed, for
// environment env. Equal arguments give equal bytes.
func Generate(env string, seed int64, index int) (json.RawMessage, error) {
	gen, ok := generators[env]
	if !ok {
		return nil, fmt.Errorf("no task generator for environment %q (known: %s)", env, strings.Join(Envs(), ", "))
	}
	if index < 0 {
		return nil, fmt.Errorf("task index %d: must not be negative", index)
	}
	// The two PCG words keep each (seed, index) its own stream: neighbouring
	// indexes of one seed do not share a sequence shifted by one.
	r := rand.New(rand.NewPCG(uint64(seed), uint64(index)))
	task, err := gen(r)
	if err != nil {
		return nil, fmt.Errorf("generate %s task %d (seed %d): %w", env, index, seed, err)
	}
	b, err := json.Marshal(task)
	if err != nil {
		return nil, fmt.Errorf("encode %s task %d: %w", env, index, err)
	}
	return b, nil
}
