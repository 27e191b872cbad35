package testsupport

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// ReplayRecordedHistories replays every history recorded in testdata/*.json
// against the workflows of a package, by workflow type name, and returns the
// types it replayed. Only the workflow a history ran is registered, under its
// name: a history of a type missing from workflows fails instead of passing,
// and a change that would break runs in flight fails with a nondeterminism
// error.
func ReplayRecordedHistories(t *testing.T, workflows map[string]any) map[string]bool {
	t.Helper()
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
			fn, ok := workflows[typ]
			require.True(t, ok, "history of workflow type %q, which this package does not define", typ)
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflowWithOptions(fn, workflow.RegisterOptions{Name: typ})
			seen[typ] = true
			require.NoError(t, r.ReplayWorkflowHistory(nil, hist))
		})
	}
	return seen
}
