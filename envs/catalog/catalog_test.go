package catalog_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/catalog"
	"github.com/turnstile-rl/turnstile/internal/policy"
)

// TestEntriesComplete fails when an environment misses any part a binary
// needs: the environment server, the task generator, the starter's limits
// and pass rule and the policy server all read these entries, and a missing
// part would otherwise only show as a silent default at run time.
func TestEntriesComplete(t *testing.T) {
	registry := policy.Registry(catalog.Policies())
	for _, e := range catalog.All() {
		t.Run(e.Name, func(t *testing.T) {
			require.NoError(t, e.Validate())
			// The starter asks for the model by the convention's name, the
			// policy server must answer to it with this entry's policy.
			model := envs.ScriptedModel(e.Name)
			p, err := registry.Lookup(model)
			require.NoError(t, err, "policy server registry")
			require.IsType(t, e.Policy, p, "model %q serves another policy than the entry's", model)
			if !e.Hosted() {
				// Its host starts the generated tasks in its own tests
				// (clients/python/examples/participant for notes).
				return
			}
			env := e.New()
			for _, seed := range []int64{0, 7, -3} {
				for index := range 4 {
					startTask(t, e, env, seed, index)
				}
			}
		})
	}
}

// startTask generates a task and starts (then closes) a session on it: a
// generated task the environment refuses would fail every rollout of it.
func startTask(t *testing.T, e envs.Entry, env envs.Environment, seed int64, index int) {
	t.Helper()
	task, err := e.Task(seed, index)
	require.NoError(t, err, "task (seed %d, index %d)", seed, index)
	sess, start, err := env.Start(seed, task)
	require.NoError(t, err, "Start refuses generated task %s (seed %d, index %d)", task, seed, index)
	defer sess.Close()
	assert.NotEqual(t, "", start.Observation, "task %s: empty first observation", task)
}

func TestNamesUniqueAndSorted(t *testing.T) {
	names := catalog.Names()
	require.NotEmpty(t, names, "empty catalog")
	assert.True(t, slices.IsSorted(names), "Names() = %v, not sorted", names)
	assert.Len(t, slices.Compact(slices.Clone(names)), len(names), "Names() = %v: a name is listed twice", names)
	models := catalog.Policies()
	assert.Len(t, models, len(names), "%d policies for %d environments: two entries share a model name", len(models), len(names))
}

func TestLookup(t *testing.T) {
	tests := []struct {
		name   string
		wantOK bool
	}{
		{"counter", true},
		{"blackjack", true},
		{"chess", false},
		{"", false},
		{"Counter", false}, // names are exact
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, ok := catalog.Lookup(tt.name)
			require.Equal(t, tt.wantOK, ok, "Lookup(%q) = %q, %v; want ok %v", tt.name, e.Name, ok, tt.wantOK)
			if ok {
				require.Equal(t, tt.name, e.Name, "Lookup(%q)", tt.name)
			}
			_, err := catalog.Find(tt.name)
			require.Equal(t, tt.wantOK, err == nil, "Find(%q) error %v, want ok %v", tt.name, err, tt.wantOK)
			if err != nil {
				assert.ErrorContains(t, err, "counter", "Find(%q) error does not list the known environments", tt.name)
			}
		})
	}
}

// TestEntryDetails pins what users see of the existing entries: the default
// turn limits, the dense-reward rule and the model names (recorded histories
// and users' inputs hold them). A new environment needs no row here:
// TestEntriesComplete checks it has every part.
func TestEntryDetails(t *testing.T) {
	tests := []struct {
		env      string
		maxTurns int
		dense    bool
		model    string
	}{
		{"arithmetic", 4, false, "scripted-arithmetic"},
		{"blackjack", 64, true, "scripted-blackjack"},
		{"counter", 16, false, "scripted-counter"},
		{"notes", 12, false, "scripted-notes"},
		{"sandbox", 12, false, "scripted-sandbox"},
		{"workplace", 24, false, "scripted-workplace"},
	}
	for _, tt := range tests {
		t.Run(tt.env, func(t *testing.T) {
			e, err := catalog.Find(tt.env)
			require.NoError(t, err)
			require.Equal(t, tt.maxTurns, e.MaxTurns, "max turns %d, dense %v, model %q; want %d, %v, %q", e.MaxTurns, e.DenseReward, e.Model(), tt.maxTurns, tt.dense, tt.model)
			require.Equal(t, tt.dense, e.DenseReward, "max turns %d, dense %v, model %q; want %d, %v, %q", e.MaxTurns, e.DenseReward, e.Model(), tt.maxTurns, tt.dense, tt.model)
			require.Equal(t, tt.model, e.Model(), "max turns %d, dense %v, model %q; want %d, %v, %q", e.MaxTurns, e.DenseReward, e.Model(), tt.maxTurns, tt.dense, tt.model)
		})
	}
}

func TestTurnLimitsNameEveryEnvironment(t *testing.T) {
	got := catalog.TurnLimits()
	for _, e := range catalog.All() {
		assert.Contains(t, got, fmt.Sprintf("%s %d", e.Name, e.MaxTurns), "TurnLimits() = %q lacks %s %d", got, e.Name, e.MaxTurns)
	}
}
