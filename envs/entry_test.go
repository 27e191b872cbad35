package envs_test

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
)

// namedEnv is an environment that only declares a name: enough for Validate.
type namedEnv struct{ name string }

func (e namedEnv) Spec() envs.Spec { return envs.Spec{Name: e.name} }
func (namedEnv) Start(int64, json.RawMessage) (envs.Session, envs.Start, error) {
	return nil, envs.Start{}, errors.New("not startable")
}
func (namedEnv) Restore(json.RawMessage) (envs.Session, error) {
	return nil, errors.New("not restorable")
}

// donePolicy answers "done" to everything.
type donePolicy struct{}

func (donePolicy) Respond(envs.PolicyRequest) (envs.PolicyResponse, error) {
	return envs.PolicyResponse{Content: "done"}, nil
}

// completeEntry is an entry with every part; each case below removes one.
func completeEntry() envs.Entry {
	return envs.Entry{
		Name: "toy",
		New:  func() envs.Environment { return namedEnv{name: "toy"} },
		GenerateTask: func(r *rand.Rand) (json.RawMessage, error) {
			return json.Marshal(map[string]int{"n": r.IntN(10)})
		},
		MaxTurns: 3,
		Policy:   donePolicy{},
	}
}

func TestValidateNamesTheMissingPart(t *testing.T) {
	tests := []struct {
		name  string
		spoil func(*envs.Entry)
		want  string // "" for valid
	}{
		{"complete", func(*envs.Entry) {}, ""},
		{"no name", func(e *envs.Entry) { e.Name = "" }, "no name"},
		{"no constructor", func(e *envs.Entry) { e.New = nil }, "no constructor"},
		{"hosted elsewhere", func(e *envs.Entry) { e.New, e.Remote = nil, "examples/x" }, ""},
		{"constructor and remote", func(e *envs.Entry) { e.Remote = "examples/x" }, "both a constructor and a remote host"},
		{"constructor returns nil", func(e *envs.Entry) { e.New = func() envs.Environment { return nil } }, "returned nil"},
		{"no task generator", func(e *envs.Entry) { e.GenerateTask = nil }, "no task generator"},
		{"zero turn limit", func(e *envs.Entry) { e.MaxTurns = 0 }, "turn limit 0"},
		{"negative turn limit", func(e *envs.Entry) { e.MaxTurns = -1 }, "turn limit -1"},
		{"no policy", func(e *envs.Entry) { e.Policy = nil }, "no scripted policy"},
		{"name mismatch", func(e *envs.Entry) { e.Name = "other" }, `calls itself "toy"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := completeEntry()
			tt.spoil(&e)
			err := e.Validate()
			if tt.want == "" {
				require.NoError(t, err, "Validate()")
			} else {
				require.ErrorContains(t, err, tt.want, "Validate()")
			}
		})
	}
}

func TestPassed(t *testing.T) {
	tests := []struct {
		dense  bool
		reward float64
		want   bool
	}{
		{false, 1, true},
		{false, 0.99, false},
		{false, 0, false},
		{true, 0.5, true},
		{true, 0, false},
		{true, -1, false},
	}
	for _, tt := range tests {
		e := envs.Entry{DenseReward: tt.dense}
		got := e.Passed(tt.reward)
		assert.Equal(t, tt.want, got, "dense %v: Passed(%v) = %v, want %v", tt.dense, tt.reward, got, tt.want)
	}
}

func TestTask(t *testing.T) {
	e := completeEntry()
	a, err := e.Task(5, 2)
	require.NoError(t, err)
	b, _ := e.Task(5, 2)
	require.Equal(t, string(b), string(a), "Task(5, 2) not deterministic: %s vs %s", a, b)
	failing := completeEntry()
	failing.GenerateTask = func(*rand.Rand) (json.RawMessage, error) { return nil, errors.New("boom") }
	invalid := completeEntry()
	invalid.GenerateTask = func(*rand.Rand) (json.RawMessage, error) { return json.RawMessage(`{"n":`), nil }
	missing := completeEntry()
	missing.GenerateTask = nil
	tests := []struct {
		name  string
		e     envs.Entry
		index int
		want  string
	}{
		{"negative index", e, -1, "-1"},
		{"generator fails", failing, 0, "boom"},
		{"generator returns invalid JSON", invalid, 0, "encode toy task"},
		{"no generator", missing, 0, "no task generator"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.e.Task(1, tt.index)
			require.ErrorContains(t, err, tt.want, "Task = %s, %v; want an error mentioning %q", got, err, tt.want)
		})
	}
}
