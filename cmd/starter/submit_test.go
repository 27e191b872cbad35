package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runStarter runs the starter's command line without a Temporal server
// (--dry-run, or a refusal before connecting).
func runStarter(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestSubmitModes(t *testing.T) {
	dir := t.TempDir()
	rows := filepath.Join(dir, "rows.jsonl")
	require.NoError(t, os.WriteFile(rows, []byte(`{"id":"a","env":"counter","task":{"target":3}}`+"\n"+`{"env":"blackjack","task":{"rounds":3}}`+"\n"), 0o600))
	bad := filepath.Join(dir, "bad.jsonl")
	require.NoError(t, os.WriteFile(bad, []byte(`{"env":"chess","task":{}}`+"\n"+`not json`+"\n"), 0o600))
	tests := []struct {
		args []string
		want string // in the output, or in the error
		ok   bool
	}{
		{[]string{"--tasks", rows, "--repeats", "3"}, "would start 6 rollouts of set s1", true},
		{[]string{"--tasks", rows, "--repeats", "3"}, "in 2 groups of 3, each with a retry budget of 2", true},
		{[]string{"--tasks", rows, "--repeats", "2", "--group-retries", "5"}, "in 2 groups of 2, each with a retry budget of 5", true},
		{[]string{"--tasks", rows, "--group-retries", "-1"}, "--group-retries -1", false},
		{[]string{"--count", "2", "--env", "counter", "--group-retries", "1"}, "--group-retries needs --tasks", false},
		{[]string{"--count", "2", "--env", "counter"}, "2 × counter", true},
		{[]string{"--tasks", rows, "--env", "counter"}, "[env tasks] were all set", false},
		{[]string{"--tasks", rows, "--count", "2"}, "were all set", false},
		{[]string{"--tasks", rows, "--seed", "2"}, "were all set", false},
		{[]string{"--env", "counter", "--repeats", "2"}, "--repeats needs --tasks", false},
		{[]string{"--tasks", rows, "--repeats", "0"}, "--repeats 0", false},
		{[]string{"--tasks", bad}, "line 1: env: unknown environment \"chess\"", false},
		{[]string{"--tasks", bad}, "line 2: bad JSON", false},
		{[]string{"--tasks", filepath.Join(dir, "missing.jsonl")}, "--tasks: open", false},
	}
	for _, tt := range tests {
		out, err := runStarter(t, append([]string{"submit", "--set", "s1", "--dry-run"}, tt.args...)...)
		if !assert.Equal(t, tt.ok, err == nil, "%v: err = %v, want ok %v\n%s", tt.args, err, tt.ok, out) {
			continue
		}
		got := out
		if err != nil {
			got = err.Error()
		}
		assert.Contains(t, got, tt.want, "%v: %q, want it to mention %q", tt.args, got, tt.want)
	}
}
