package repocheck_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWorkflowPackagesLinkNoIO: workflow code is deterministic and its
// packages' dependency graph holds no logger, model client, object-store
// client or checkpoint artifact code; only activities may pull those in.
func TestWorkflowPackagesLinkNoIO(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "./workflows/...")
	cmd.Dir = "../.."
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go list -deps ./workflows/...: %s", out)
	forbidden := []string{"go.uber.org/zap", "github.com/openai/openai-go", "gocloud.dev", "github.com/aws/",
		"github.com/turnstile-rl/turnstile/internal/artifact", "github.com/turnstile-rl/turnstile/internal/storage",
		"github.com/turnstile-rl/turnstile/internal/transcriptstore", "github.com/turnstile-rl/turnstile/activities/"}
	var found []string
	for _, dep := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if strings.HasPrefix(dep, f) {
				found = append(found, dep)
			}
		}
	}
	require.Empty(t, found, "workflow packages link I/O packages")
}
