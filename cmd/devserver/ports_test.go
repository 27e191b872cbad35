package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every port the dev server listens on can be set, by flag or in the
// settings file, so a second server (a test, another checkout) runs beside
// the developer's without a collision.
func TestPortsByFlagAndFile(t *testing.T) {
	repoFile := filepath.Join("..", "..", "temporal-dev.yaml")
	data, err := os.ReadFile(repoFile)
	require.NoError(t, err)
	withPorts := strings.NewReplacer(`metrics-port: ""`, `metrics-port: "19091"`, `http-port: ""`, `http-port: "17243"`).Replace(string(data))
	require.NotEqual(t, string(data), withPorts, "temporal-dev.yaml no longer has empty metrics-port and http-port lines to replace")
	fileWithPorts := filepath.Join(t.TempDir(), "temporal-dev.yaml")
	require.NoError(t, os.WriteFile(fileWithPorts, []byte(withPorts), 0o644))
	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     []string // substrings of stdout
		absent   []string
		wantErr  string // substring of stderr
	}{
		{
			name:   "the repository's file leaves both to the CLI",
			args:   []string{"--config", repoFile},
			absent: []string{"--metrics-port", "--http-port"},
		},
		{
			name: "flags",
			args: []string{"--config", repoFile, "--port", "17233", "--ui-port", "18233", "--metrics-port", "19090", "--http-port", "17234"},
			want: []string{"--port 17233 --ui-port 18233 --metrics-port 19090 --http-port 17234 "},
		},
		{
			name: "file",
			args: []string{"--config", fileWithPorts},
			want: []string{"--metrics-port 19091 --http-port 17243 "},
		},
		{
			name: "flags override the file",
			args: []string{"--config", fileWithPorts, "--http-port", "17300"},
			want: []string{"--metrics-port 19091 --http-port 17300 "},
		},
		{
			name: "headless keeps the other ports",
			args: []string{"--config", repoFile, "--headless", "--metrics-port", "19090", "--http-port", "17234"},
			want: []string{"--headless --metrics-port 19090 --http-port 17234 "},
		},
		{name: "http port clashes with the frontend", args: []string{"--config", repoFile, "--http-port", "7233"}, wantCode: 2, wantErr: "http-port 7233 is the same port as port"},
		{name: "metrics port clashes with the UI", args: []string{"--config", repoFile, "--metrics-port", "8233"}, wantCode: 2, wantErr: "metrics-port 8233 is the same port as ui-port"},
		{name: "not a port", args: []string{"--config", repoFile, "--http-port", "70000"}, wantCode: 2, wantErr: "http-port 70000 is not a port"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(append(tt.args, "--print-flags"), &stdout, &stderr)
			require.Equal(t, tt.wantCode, code, "exit code %d, want %d; stderr: %s", code, tt.wantCode, stderr.String())
			for _, w := range tt.want {
				assert.Contains(t, stdout.String(), w, "stdout %q does not contain %q", stdout.String(), w)
			}
			for _, a := range tt.absent {
				assert.NotContains(t, stdout.String(), a, "stdout %q contains %q", stdout.String(), a)
			}
			assert.False(t, tt.wantErr != "" && !strings.Contains(stderr.String(), tt.wantErr), "stderr %q does not contain %q", stderr.String(), tt.wantErr)
		})
	}
}

// --help names every port flag.
func TestHelpNamesPorts(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"--help"}, &stdout, &stderr)
	require.Equal(t, 0, code, "exit code")
	for _, f := range []string{"-port", "-ui-port", "-metrics-port", "-http-port"} {
		assert.Contains(t, stderr.String()+stdout.String(), f, "--help does not name %s", f)
	}
}
