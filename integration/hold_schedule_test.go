package integration_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/activities/coordinator"
	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// TestWatchdogHoldsSchedule: the watchdog's HoldSchedule activity, against
// a real schedule: a hold pauses it with the watchdog's note and repeats
// idempotently, a release unpauses it; a schedule someone else paused is
// neither held nor released; a set without a schedule holds nothing.
func TestWatchdogHoldsSchedule(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	c := newCluster(t)
	c.startTemporal()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tc := trainer.New(c.client, rollout.TaskQueue)
	_, err := tc.CreateSchedule(ctx, trainer.ScheduleRequest{
		Set: "held", Root: filepath.Join(c.dir, "checkpoints"), Participants: []string{"http://127.0.0.1:1"}, Every: time.Hour, Timeout: time.Minute,
	})
	require.NoError(t, err)
	coord := &coordinator.Coordinator{Client: c.client}
	h := c.client.ScheduleClient().GetHandle(ctx, checkpoint.ScheduleID("held"))
	state := func() (bool, string) {
		d, err := h.Describe(ctx)
		require.NoError(t, err)
		return d.Schedule.State.Paused, d.Schedule.State.Note
	}
	hold := func(set string, on bool) bool {
		res, err := coord.HoldSchedule(ctx, checkpoint.HoldScheduleInput{Set: set, Hold: on, Note: "recovery of x"})
		require.NoError(t, err)
		return res.Held
	}

	for range 2 { // a retried hold finds its own pause
		require.True(t, hold("held", true))
		paused, note := state()
		require.True(t, paused)
		require.True(t, strings.HasPrefix(note, checkpoint.WatchdogPauseNote), "note %q", note)
	}
	require.False(t, hold("held", false))
	paused, _ := state()
	require.False(t, paused, "released")

	require.NoError(t, tc.PauseSchedule(ctx, "held", "operator: maintenance"))
	require.False(t, hold("held", true), "an operator's pause is not the watchdog's")
	require.False(t, hold("held", false))
	paused, note := state()
	require.True(t, paused, "the operator's pause stays")
	require.Equal(t, "operator: maintenance", note)

	require.False(t, hold("no-schedule", true))
}
