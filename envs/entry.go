package envs

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
)

// Entry is everything the binaries need to know about one environment: the
// environment server hosts it, the starter generates its tasks, limits its
// turns and scores its results, and the policy server serves its scripted
// policy. Each environment package exports one (func Entry() envs.Entry) and
// the catalog lists them, so adding an environment touches no registry
// elsewhere; Validate and the catalog's tests catch a missing part.
type Entry struct {
	// Name is the environment's name on the wire; it must equal New().Spec().Name.
	Name string
	// New constructs the environment, for the Go environment server to host
	// it. Nil for an environment another participant hosts (Remote).
	New func() Environment
	// Remote names where an environment not built into the Go server is
	// hosted (e.g. "clients/python/examples/participant"). The catalog still holds
	// its task generator, turn limit and scripted policy, so the starter
	// and the policy server serve it like any other; exactly one of New
	// and Remote is set.
	Remote string
	// GenerateTask draws one task from r; the result is what Start accepts.
	// It must use nothing but r, so a task is a pure function of the draws.
	GenerateTask func(r *rand.Rand) (json.RawMessage, error)
	// MaxTurns is a rollout's model-call limit when none is given: room for
	// the scripted policy to finish generated tasks, with retries.
	MaxTurns int
	// DenseReward marks environments scored by a sum of per-step rewards (gym
	// style) rather than a verdict of 1 for success; see Passed.
	DenseReward bool
	// Policy is the scripted policy, served as ScriptedModel(Name).
	Policy Policy
}

// Hosted reports whether the Go environment server can host the
// environment (it has a constructor), rather than another participant.
func (e Entry) Hosted() bool { return e.New != nil }

// Model is the model name of the entry's scripted policy.
func (e Entry) Model() string { return ScriptedModel(e.Name) }

// Passed reports whether a completed rollout with reward counts as a pass:
// reward > 0 for dense-reward environments (more won than lost), reward >= 1
// (a successful verdict) for the rest.
func (e Entry) Passed(reward float64) bool {
	if e.DenseReward {
		return reward > 0
	}
	return reward >= 1
}

// Task returns the task of rollout index of a set seeded with seed. Equal
// arguments give equal bytes: a set submitted twice, or a rollout restarted
// from scratch, gets the same task.
func (e Entry) Task(seed int64, index int) (json.RawMessage, error) {
	if e.GenerateTask == nil {
		return nil, fmt.Errorf("environment %q has no task generator", e.Name)
	}
	if index < 0 {
		return nil, fmt.Errorf("task index %d: must not be negative", index)
	}
	// The two PCG words keep each (seed, index) its own stream: neighbouring
	// indexes of one seed do not share a sequence shifted by one.
	r := rand.New(rand.NewPCG(uint64(seed), uint64(index)))
	task, err := e.GenerateTask(r)
	if err != nil {
		return nil, fmt.Errorf("generate %s task %d (seed %d): %w", e.Name, index, seed, err)
	}
	// Marshal validates and compacts the generator's JSON, as the task
	// generators' output always went through it; the bytes stay the same.
	b, err := json.Marshal(task)
	if err != nil {
		return nil, fmt.Errorf("encode %s task %d: %w", e.Name, index, err)
	}
	return b, nil
}

// Validate reports the first missing or inconsistent part of the entry.
// It constructs the environment once to compare its declared name.
func (e Entry) Validate() error {
	switch {
	case e.Name == "":
		return errors.New("catalog entry has no name")
	case e.New == nil && e.Remote == "":
		return fmt.Errorf("environment %q: no constructor", e.Name)
	case e.New != nil && e.Remote != "":
		return fmt.Errorf("environment %q: both a constructor and a remote host (%s)", e.Name, e.Remote)
	case e.GenerateTask == nil:
		return fmt.Errorf("environment %q: no task generator", e.Name)
	case e.MaxTurns <= 0:
		return fmt.Errorf("environment %q: default turn limit %d is not positive", e.Name, e.MaxTurns)
	case e.Policy == nil:
		return fmt.Errorf("environment %q: no scripted policy", e.Name)
	}
	if !e.Hosted() {
		return nil // its host checks the name (clients/python/examples/participant's tests)
	}
	env := e.New()
	if env == nil {
		return fmt.Errorf("environment %q: constructor returned nil", e.Name)
	}
	if got := env.Spec().Name; got != e.Name {
		return fmt.Errorf("environment %q: constructed environment calls itself %q", e.Name, got)
	}
	return nil
}
