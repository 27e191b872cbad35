package trainer_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/testsupport/temporalfake"
	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
)

// TestAutoRecoverWatchdogInput turns the settings into the watchdog's
// input (root made absolute, durations as strings) and names a bad field.
func TestAutoRecoverWatchdogInput(t *testing.T) {
	a := trainer.AutoRecover{Participants: []string{"http://127.0.0.1:3"}, Standby: []string{"http://127.0.0.1:5"}, Root: "ckpt",
		Every: time.Second, Bound: 10 * time.Second}
	in, err := a.WatchdogInput("s1", "/work", "q")
	require.NoError(t, err)
	require.Equal(t, checkpoint.WatchdogInput{Set: "s1", Participants: a.Participants, Standby: a.Standby, Root: "/work/ckpt", TaskQueue: "q",
		Settings: checkpoint.WatchSettings{Every: "1s", Bound: "10s"}}, in)
	for _, tc := range []struct {
		edit func(*trainer.AutoRecover)
		want string
	}{
		{func(a *trainer.AutoRecover) { a.Participants = nil }, "participants"},
		{func(a *trainer.AutoRecover) { a.Root = "" }, "--root"},
		{func(a *trainer.AutoRecover) { a.Standby = []string{"ftp://x"} }, "standby"},
		{func(a *trainer.AutoRecover) { a.Misses = -2 }, "auto_recover.misses"},
		{func(a *trainer.AutoRecover) { a.Timeout = time.Minute }, "auto_recover.timeout"},
	} {
		b := a
		tc.edit(&b)
		_, err := b.WatchdogInput("s1", "/work", "q")
		require.ErrorContains(t, err, tc.want)
		require.ErrorContains(t, err, "auto_recover")
	}
}

// TestSubmitBadAutoRecoverStartsNothing: a submission whose automatic
// recovery settings are wrong is refused before anything starts.
func TestSubmitBadAutoRecoverStartsNothing(t *testing.T) {
	fc := &temporalfake.Client{}
	c := trainer.New(fc, "q")
	_, err := c.Submit(context.Background(), trainer.SubmitRequest{Set: "s1", Count: 2, Envs: []string{"counter"},
		AutoRecover: &trainer.AutoRecover{Root: "/ckpt"}})
	require.ErrorContains(t, err, "auto_recover: participants")
	require.Empty(t, fc.Starts())
}
