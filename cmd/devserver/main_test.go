package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRunPrintFlags(t *testing.T) {
	config := filepath.Join("..", "..", "temporal-dev.yaml")
	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     []string // substrings of stdout
		wantErr  string   // substring of stderr
	}{
		{
			name: "file as is",
			args: []string{"--config", config, "--print-flags"},
			want: []string{"temporal server start-dev --ip 127.0.0.1 --port 7233 --ui-port 8233 ",
				"--search-attribute RolloutAttempt=Int",
				"--dynamic-config-value system.enableActivityEagerExecution=true"},
		},
		{
			name: "overrides, quoted path",
			args: []string{"--config", config, "--port", "17233", "--headless", "--db-filename", "/tmp/a b.db", "--print-flags"},
			want: []string{"--port 17233 --headless --db-filename '/tmp/a b.db' --namespace default"},
		},
		{
			name: "explicit UI on",
			args: []string{"--config", config, "--headless=false", "--ui-port", "18233", "--print-flags"},
			want: []string{"--ui-port 18233"},
		},
		{name: "unknown env", args: []string{"--config", config, "--env", "prod", "--print-flags"}, wantCode: 2, wantErr: `environment "prod" not in`},
		{name: "bad port", args: []string{"--config", config, "--port", "99999", "--print-flags"}, wantCode: 2, wantErr: "port 99999 is not a port"},
		{name: "missing file", args: []string{"--config", "nope.yaml", "--print-flags"}, wantCode: 2, wantErr: "nope.yaml"},
		{name: "stray argument", args: []string{"--config", config, "extra"}, wantCode: 2, wantErr: "unexpected arguments"},
		{name: "unknown flag", args: []string{"--bogus"}, wantCode: 2, wantErr: "flag provided but not defined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tt.args, &stdout, &stderr)
			require.Equal(t, tt.wantCode, code, "exit code %d, want %d; stderr: %s", code, tt.wantCode, stderr.String())
			for _, w := range tt.want {
				assert.Contains(t, stdout.String(), w, "stdout %q does not contain %q", stdout.String(), w)
			}
			if tt.wantErr != "" {
				assert.Contains(t, stderr.String(), tt.wantErr, "stderr")
			}
		})
	}
}

// TestServeExitCode checks the launcher passes the CLI's arguments through
// and exits with its exit code.
func TestServeExitCode(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "temporal")
	script := "#!/bin/sh\necho \"args: $*\"\nexit 3\n"
	require.NoError(t, os.WriteFile(fake, []byte(script), 0o755))
	var stdout, stderr bytes.Buffer
	code := serve(fake, []string{"server", "start-dev", "--port", "1"}, &stdout, &stderr)
	require.Equal(t, 3, code, "exit code %d, want 3; stderr: %s", code, stderr.String())
	assert.Equal(t, "args: server start-dev --port 1\n", stdout.String(), "stdout")
}

func TestShellJoin(t *testing.T) {
	got := shellJoin([]string{"temporal", "--db-filename", "/tmp/it's here.db", "K=\"v\""})
	want := `temporal --db-filename '/tmp/it'\''s here.db' 'K="v"'`
	assert.Equal(t, want, got, "shellJoin = %s, want %s", got, want)
}
