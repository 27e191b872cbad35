package set_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/testsupport"
	"github.com/turnstile-rl/turnstile/workflows/set"
)

// TestReplayRecordedHistories replays the SetAdmission histories recorded
// on a real dev server (refresh them with `TURNSTILE_UPDATE_REPLAY=1 go test
// ./integration -run TestAdmissionAtMostMaxInFlightInOrder`). A change to the
// workflow that would break an admission in flight fails here with a
// nondeterminism error.
func TestReplayRecordedHistories(t *testing.T) {
	seen := testsupport.ReplayRecordedHistories(t, map[string]any{set.AdmissionWorkflowName: set.SetAdmission})
	require.True(t, seen[set.AdmissionWorkflowName], "no recorded SetAdmission history")
}
