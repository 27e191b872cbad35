package integration_test

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every binary follows one command-line convention (cmd/internal/cli):
// --help prints the usage, with the environment variables it reads, and
// exits 0; a bad flag exits 2. A script can tell a typo from a failure.
func TestBinariesHelpAndBadFlags(t *testing.T) {
	tests := []struct {
		bin, args string
		want      int
		mentions  []string
	}{
		{"envserver", "--help", 0, []string{"Usage: envserver", "-listen", "TURNSTILE_ENV_LISTEN", "TURNSTILE_CONTROL_TOKEN"}},
		{"envserver", "--no-such-flag", 2, []string{"flag provided but not defined"}},
		{"envserver", "--envs nope", 2, []string{"nope"}},
		{"policyserver", "--help", 0, []string{"Usage: policyserver", "-latency", "TURNSTILE_POLICY_LISTEN"}},
		{"policyserver", "--no-such-flag", 2, []string{"flag provided but not defined"}},
		{"worker", "--help", 0, []string{"Usage: worker", "TEMPORAL_ADDRESS", "TURNSTILE_TRANSCRIPT_DIR", "TURNSTILE_MODEL_BASE_URL"}},
		{"worker", "--no-such-flag", 2, []string{"flag provided but not defined"}},
		{"devserver", "--help", 0, []string{"Usage: devserver", "-ui-port"}},
		{"devserver", "--no-such-flag", 2, []string{"flag provided but not defined"}},
		{"starter", "--help", 0, []string{"submit", "checkpoint", "restore"}},
		{"starter", "submit --help", 0, []string{"--set", "--count"}},
		{"starter", "submit --no-such-flag", 2, []string{"unknown flag"}},
		{"starter", "no-such-command", 2, []string{"unknown command"}},
		{"starter", "submit --env counter", 2, []string{"required flag"}},
	}
	for _, tt := range tests {
		t.Run(tt.bin+" "+tt.args, func(t *testing.T) {
			cmd := exec.Command(filepath.Join(bins.dir, tt.bin), strings.Fields(tt.args)...)
			cmd.Dir = t.TempDir()
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else {
				require.NoError(t, err, "run")
			}
			require.Equal(t, tt.want, code, "exit %d, want %d; output:\n%s", code, tt.want, out.String())
			for _, m := range tt.mentions {
				assert.Contains(t, out.String(), m, "output lacks %q:\n%s", m, out.String())
			}
		})
	}
}
