package set_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/turnstile-rl/turnstile/workflows/set"
)

// TestReplayRecordedHistories replays the SetAdmission histories recorded
// on a real dev server (refresh them with `TURNSTILE_UPDATE_REPLAY=1 go test
// ./integration -run TestAdmissionAtMostMaxInFlightInOrder`). A change to the
// workflow that would break an admission in flight fails here with a
// nondeterminism error.
func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no recorded histories in testdata")
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			require.NoError(t, err)
			hist, err := client.HistoryFromJSON(bytes.NewReader(data), client.HistoryJSONOptions{})
			require.NoError(t, err)
			events := hist.GetEvents()
			require.NotEmpty(t, events)
			typ := events[0].GetWorkflowExecutionStartedEventAttributes().GetWorkflowType().GetName()
			require.Equal(t, set.AdmissionWorkflowName, typ, "history of another workflow type")
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflowWithOptions(set.SetAdmission, workflow.RegisterOptions{Name: typ})
			require.NoError(t, r.ReplayWorkflowHistory(nil, hist))
		})
	}
}
