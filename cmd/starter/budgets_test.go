package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// TestSubmitBudgetFlags: the budget flags default to the values rollouts had
// before budgets existed, and a bad one is refused by name on --dry-run.
func TestSubmitBudgetFlags(t *testing.T) {
	cmd := newSubmitCmd(&globals{})
	f := cmd.Flags()
	for flag, want := range map[string]string{
		"model-timeout": rollout.DefaultModelCallTimeout.String(),
		"env-timeout":   rollout.DefaultEnvCallTimeout.String(),
		"model-retries": "0",
		"deadline":      "0s",
	} {
		got := f.Lookup(flag).DefValue
		assert.Equal(t, want, got, "--%s default %s, want %s", flag, got, want)
	}

	for _, tt := range []struct {
		args []string
		want string // "" = accepted
	}{
		{[]string{"--model-timeout", "2m", "--env-timeout", "30s", "--model-retries", "3", "--deadline", "1h"}, ""},
		{[]string{"--deadline", "10ms"}, "--deadline 10ms"},
		{[]string{"--model-retries", "-1"}, "--model-retries -1"},
	} {
		cmd := newSubmitCmd(&globals{})
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append([]string{"--set", "s1", "--env", "counter", "--dry-run"}, tt.args...))
		err := cmd.Execute()
		if tt.want == "" {
			assert.NoError(t, err, "%v", tt.args)
		} else {
			assert.ErrorContains(t, err, tt.want, "%v", tt.args)
		}
	}
}
