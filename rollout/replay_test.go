package rollout_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/turnstile-rl/turnstile/rollout"
)

// TestReplayRecordedHistories replays histories recorded on a real dev server
// (refresh them with `TURNSTILE_UPDATE_REPLAY=1 go test ./integration -run
// TestRecordedHistoryReplays`). A change to the Rollout workflow that would
// break runs in flight fails here with a nondeterminism error.
func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no recorded histories in testdata")
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflowWithOptions(rollout.Rollout, workflow.RegisterOptions{Name: rollout.WorkflowName})
			require.NoError(t, r.ReplayWorkflowHistoryFromJSONFile(nil, f))
		})
	}
}
