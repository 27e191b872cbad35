package checkpoint_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
)

// TestReplayRecordedHistories replays the Checkpoint and Restore histories
// recorded on a real dev server (refresh them with
// `TURNSTILE_UPDATE_REPLAY=1 go test ./integration -run
// TestRecordedCoordinatorHistoriesReplay`). A change to either workflow that
// would break a checkpoint or a restore in flight fails here with a
// nondeterminism error.
func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no recorded histories in testdata")
	seen := map[string]bool{}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			require.NoError(t, err)
			hist, err := client.HistoryFromJSON(bytes.NewReader(data), client.HistoryJSONOptions{})
			require.NoError(t, err)
			events := hist.GetEvents()
			require.NotEmpty(t, events)
			typ := events[0].GetWorkflowExecutionStartedEventAttributes().GetWorkflowType().GetName()
			// Only the workflow the history ran is registered, under its
			// name: a history of an unknown type fails instead of passing.
			r := worker.NewWorkflowReplayer()
			switch typ {
			case checkpoint.CheckpointWorkflowName:
				r.RegisterWorkflowWithOptions(checkpoint.Checkpoint, workflow.RegisterOptions{Name: typ})
			case checkpoint.RestoreWorkflowName:
				r.RegisterWorkflowWithOptions(checkpoint.Restore, workflow.RegisterOptions{Name: typ})
			default:
				require.Failf(t, "not a coordinator workflow", "history of workflow type %q", typ)
			}
			seen[typ] = true
			require.NoError(t, r.ReplayWorkflowHistory(nil, hist))
		})
	}
	require.True(t, seen[checkpoint.CheckpointWorkflowName], "no recorded Checkpoint history")
	require.True(t, seen[checkpoint.RestoreWorkflowName], "no recorded Restore history")
}
