package rollout_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// TestReplayRecordedHistories replays histories recorded on a real dev server
// (refresh them with `TURNSTILE_UPDATE_REPLAY=1 go test ./integration -run
// 'TestRecordedHistoryReplays|TestGroupRetriesOnServer'`): a parked and
// resumed rollout, a group member's attempt retried by its group, and group
// ledgers that failed and completed. A change to the Rollout or RolloutGroup
// workflow that would break runs in flight fails here with a
// nondeterminism error.
func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no recorded histories in testdata")
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflowWithOptions(rollout.Rollout, workflow.RegisterOptions{Name: rollout.WorkflowName})
			r.RegisterWorkflowWithOptions(rollout.GroupLedger, workflow.RegisterOptions{Name: rollout.GroupWorkflowName})
			require.NoError(t, r.ReplayWorkflowHistoryFromJSONFile(nil, f))
		})
	}
}
