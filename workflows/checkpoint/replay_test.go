package checkpoint_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/testsupport"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
)

// TestReplayRecordedHistories replays the Checkpoint, Restore and Watchdog
// histories recorded on a real dev server (refresh them with
// `TURNSTILE_UPDATE_REPLAY=1 go test ./integration -run
// 'TestRecordedCoordinatorHistoriesReplay|TestAutoRecoverKilledServer'`; the
// Watchdog's records a declaration and its recovery). A change to either workflow that
// would break a checkpoint or a restore in flight fails here with a
// nondeterminism error.
func TestReplayRecordedHistories(t *testing.T) {
	seen := testsupport.ReplayRecordedHistories(t, map[string]any{
		checkpoint.CheckpointWorkflowName: checkpoint.Checkpoint,
		checkpoint.RestoreWorkflowName:    checkpoint.Restore,
		checkpoint.WatchdogWorkflowName:   checkpoint.Watchdog,
	})
	require.True(t, seen[checkpoint.CheckpointWorkflowName], "no recorded Checkpoint history")
	require.True(t, seen[checkpoint.RestoreWorkflowName], "no recorded Restore history")
	require.True(t, seen[checkpoint.WatchdogWorkflowName], "no recorded Watchdog history")
}
