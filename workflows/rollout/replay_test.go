package rollout_test

import (
	"testing"

	"github.com/turnstile-rl/turnstile/internal/testsupport"
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
	testsupport.ReplayRecordedHistories(t, map[string]any{
		rollout.WorkflowName:      rollout.Rollout,
		rollout.GroupWorkflowName: rollout.GroupLedger,
	})
}
