package checkpoint_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/turnstile-rl/turnstile/internal/testsupport"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
)

// TestDetectionObserve is the miss counting: a server is dead only after
// Misses probes in a row unanswered and at least Bound since its last
// answer; one answer resets both.
func TestDetectionObserve(t *testing.T) {
	d := checkpoint.Detection{Every: 5 * time.Second, Timeout: 5 * time.Second, Misses: 3, Bound: 30 * time.Second}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	cases := []struct {
		name   string
		probes []bool // answered, one probe every 5 s from t0+5s
		dead   []bool // after each probe
	}{
		{"always answers", []bool{true, true, true, true, true, true, true, true}, []bool{false, false, false, false, false, false, false, false}},
		{"one missed beat is never death", []bool{false, true, false, true, false, true, false, true}, []bool{false, false, false, false, false, false, false, false}},
		{"misses within the bound are not death", []bool{false, false, false, false, false}, []bool{false, false, false, false, false}},
		{"silent past the bound is death", []bool{false, false, false, false, false, false}, []bool{false, false, false, false, false, true}},
		{"a late answer resets the silence", []bool{false, false, false, false, false, true, false, false, false, false, false, false},
			[]bool{false, false, false, false, false, false, false, false, false, false, false, true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := checkpoint.Liveness{LastAnswer: t0}
			for i, answered := range tc.probes {
				var dead bool
				l, dead = d.Observe(l, answered, at(5*(i+1)))
				require.Equal(t, tc.dead[i], dead, "after probe %d", i+1)
			}
		})
	}
	t.Run("misses count even when the bound has passed", func(t *testing.T) {
		slow := checkpoint.Detection{Every: time.Minute, Timeout: time.Second, Misses: 3, Bound: time.Second}
		l := checkpoint.Liveness{LastAnswer: t0}
		var dead bool
		for i := range 2 {
			l, dead = slow.Observe(l, false, at(60*(i+1)))
			require.False(t, dead, "probe %d of 3", i+1)
		}
		_, dead = slow.Observe(l, false, at(180))
		require.True(t, dead)
	})
}

// TestWatchSettingsParse fills in defaults and names a bad field.
func TestWatchSettingsParse(t *testing.T) {
	d, err := checkpoint.WatchSettings{}.Parse()
	require.NoError(t, err)
	require.Equal(t, checkpoint.Detection{Every: 5 * time.Second, Timeout: 5 * time.Second, Misses: 3, Bound: 30 * time.Second}, d)
	require.Equal(t, 40*time.Second, d.MaxDetect())
	d, err = checkpoint.WatchSettings{Every: "1s", Timeout: "500ms", Misses: 4, Bound: "6s"}.Parse()
	require.NoError(t, err)
	require.Equal(t, checkpoint.Detection{Every: time.Second, Timeout: 500 * time.Millisecond, Misses: 4, Bound: 6 * time.Second}, d)
	for _, bad := range []struct {
		s    checkpoint.WatchSettings
		want string
	}{
		{checkpoint.WatchSettings{Every: "soon"}, "auto_recover.every"},
		{checkpoint.WatchSettings{Bound: "-1s"}, "auto_recover.bound"},
		{checkpoint.WatchSettings{Misses: -1}, "auto_recover.misses"},
		{checkpoint.WatchSettings{Timeout: "1m"}, "auto_recover.timeout"},
	} {
		_, err := bad.s.Parse()
		require.ErrorContains(t, err, bad.want)
	}
}

// watchProbe answers probe rounds from a script: answered(server, round).
type watchProbe struct {
	mu     sync.Mutex
	rounds int
	script func(server string, round int) bool
	// running is the set's running rollouts at a round.
	running func(round int) int
}

func (p *watchProbe) probe(_ context.Context, in checkpoint.ProbeParticipantsInput) (checkpoint.ProbeParticipantsResult, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rounds++
	res := checkpoint.ProbeParticipantsResult{Running: p.running(p.rounds)}
	for _, s := range in.Servers {
		res.Answered = append(res.Answered, p.script(s, p.rounds))
	}
	return res, nil
}

func watchInput() checkpoint.WatchdogInput {
	return checkpoint.WatchdogInput{Set: "s1", Participants: []string{"http://127.0.0.1:3", deadURL}, Standby: []string{replacementURL},
		Root: "/ckpt", Settings: checkpoint.WatchSettings{Every: "1s", Timeout: "1s", Misses: 3, Bound: "5s"}}
}

// runWatchdog runs a Watchdog over a scripted probe and a fake
// RecoverServer that records its inputs.
func runWatchdog(t *testing.T, in checkpoint.WatchdogInput, p *watchProbe) (checkpoint.WatchdogStatus, []checkpoint.RecoverServerInput) {
	t.Helper()
	return runWatchdogFailing(t, in, p, 0)
}

// runWatchdogFailing is runWatchdog whose fake RecoverServer fails its
// first fails runs, as a restore refused by a checkpoint in progress does.
func runWatchdogFailing(t *testing.T, in checkpoint.WatchdogInput, p *watchProbe, fails int) (checkpoint.WatchdogStatus, []checkpoint.RecoverServerInput) {
	t.Helper()
	st, recovered, _ := runWatchdogLog(t, in, p, fails)
	return st, recovered
}

// runWatchdogLog is runWatchdogFailing that also returns, in order, the
// recovery runs ("recover") and schedule holds ("hold", "release") seen.
func runWatchdogLog(t *testing.T, in checkpoint.WatchdogInput, p *watchProbe, fails int) (checkpoint.WatchdogStatus, []checkpoint.RecoverServerInput, []string) {
	t.Helper()
	env := testsupport.NewWorkflowEnv()
	env.RegisterActivityWithOptions(p.probe, activity.RegisterOptions{Name: checkpoint.ProbeParticipantsName})
	var log []string
	env.RegisterActivityWithOptions(func(_ context.Context, h checkpoint.HoldScheduleInput) (checkpoint.HoldScheduleResult, error) {
		log = append(log, map[bool]string{true: "hold", false: "release"}[h.Hold])
		return checkpoint.HoldScheduleResult{Held: h.Hold}, nil
	}, activity.RegisterOptions{Name: checkpoint.HoldScheduleName})
	var recovered []checkpoint.RecoverServerInput
	env.RegisterWorkflowWithOptions(func(_ workflow.Context, in checkpoint.RecoverServerInput) (checkpoint.RecoverServerResult, error) {
		log = append(log, "recover")
		recovered = append(recovered, in)
		if len(recovered) <= fails {
			return checkpoint.RecoverServerResult{}, temporal.NewNonRetryableApplicationError(
				"restore refused: 409 checkpoint_conflict: checkpoint c7 is preparing this server", checkpoint.ErrRestoreFailed, nil)
		}
		return checkpoint.RecoverServerResult{Affected: 4}, nil
	}, workflow.RegisterOptions{Name: checkpoint.RecoverServerWorkflowName})
	env.ExecuteWorkflow(checkpoint.Watchdog, in)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var st checkpoint.WatchdogStatus
	require.NoError(t, env.GetWorkflowResult(&st))
	return st, recovered, log
}

// TestWatchdogRecoversDeadServerOntoStandby: a server silent past the
// bound is declared dead once and recovered onto the standby, which is
// watched from then on; the healthy server is left alone.
func TestWatchdogRecoversDeadServerOntoStandby(t *testing.T) {
	p := &watchProbe{
		script:  func(s string, round int) bool { return s != deadURL || round < 4 },
		running: func(round int) int { return map[bool]int{true: 8, false: 0}[round < 20] },
	}
	st, recovered := runWatchdog(t, watchInput(), p)
	require.Equal(t, "done", st.Phase)
	require.Len(t, recovered, 1)
	require.Equal(t, checkpoint.RecoverServerInput{Set: "s1", Server: deadURL, Replacement: replacementURL, Root: "/ckpt",
		RequestID: checkpoint.AutoRecoverRequestID(deadURL, 0), TaskQueue: "turnstile-rollouts"}, recovered[0])
	require.Len(t, st.State.Declarations, 1)
	d := st.State.Declarations[0]
	require.Equal(t, deadURL, d.Server)
	require.Equal(t, replacementURL, d.Replacement)
	require.Equal(t, 4, d.Recovered)
	require.GreaterOrEqual(t, d.DeclaredAt.Sub(d.LastAnswer), 5*time.Second, "never declared before the bound")
	require.GreaterOrEqual(t, d.Misses, 3)
	require.Equal(t, checkpoint.AutoRecoverWorkflowID("s1", deadURL, 0), d.WorkflowID)
	require.Contains(t, d.Summary(), "recovered 4 rollouts onto "+replacementURL)
	require.Equal(t, []checkpoint.WatchedServer{
		{URL: "http://127.0.0.1:3", Liveness: st.State.Watched[0].Liveness},
		{URL: replacementURL, Generation: 1, Liveness: st.State.Watched[1].Liveness},
	}, st.State.Watched)
	require.Equal(t, 1, st.State.StandbyUsed)
}

// TestWatchdogSlowServerIsAlive: a server that misses every other beat,
// or answers again just inside the bound, is never declared dead.
func TestWatchdogSlowServerIsAlive(t *testing.T) {
	p := &watchProbe{
		script:  func(s string, round int) bool { return s != deadURL || round%2 == 0 || round%5 == 0 },
		running: func(round int) int { return map[bool]int{true: 8, false: 0}[round < 30] },
	}
	st, recovered := runWatchdog(t, watchInput(), p)
	require.Equal(t, "done", st.Phase)
	require.Empty(t, recovered)
	require.Empty(t, st.State.Declarations)
}

// TestWatchdogWaitsForRestartInPlace: with no standby, the replacement is
// the dead server's own address once its supervisor brings it back; the
// recovery waits for it to answer.
func TestWatchdogWaitsForRestartInPlace(t *testing.T) {
	in := watchInput()
	in.Standby = nil
	p := &watchProbe{
		script:  func(s string, round int) bool { return s != deadURL || round < 4 || round > 15 },
		running: func(round int) int { return map[bool]int{true: 8, false: 0}[round < 25] },
	}
	st, recovered := runWatchdog(t, in, p)
	require.Len(t, recovered, 1)
	require.Equal(t, deadURL, recovered[0].Replacement)
	require.Len(t, st.State.Declarations, 1)
	d := st.State.Declarations[0]
	require.Equal(t, deadURL, d.Replacement)
	require.GreaterOrEqual(t, d.RecoveredAt.Sub(d.DeclaredAt), 5*time.Second, "waited for the server to answer again")
	require.Equal(t, 1, st.State.Watched[1].Generation, "a second death is a new recovery id")
}

// TestWatchdogRejectsBadInput names the bad field and starts nothing.
func TestWatchdogRejectsBadInput(t *testing.T) {
	in := watchInput()
	in.Standby = []string{"http://127.0.0.1:5/"}
	require.ErrorContains(t, in.Validate(), "standby")
	in = watchInput()
	in.Participants = nil
	require.ErrorContains(t, in.Validate(), "participants")
	in = watchInput()
	in.Settings.Every = "x"
	require.ErrorContains(t, in.Validate(), "auto_recover.every")
}

// TestWatchdogRetriesFailedRecovery: a recovery that fails while its
// replacement answers (a checkpoint had prepared the restarted server) is
// run again, same id, after a growing wait, until it succeeds; the
// declaration then shows the recovery, not the failure.
func TestWatchdogRetriesFailedRecovery(t *testing.T) {
	in := watchInput()
	in.Standby = nil
	p := &watchProbe{
		script:  func(s string, round int) bool { return s != deadURL || round < 4 || round > 12 },
		running: func(round int) int { return map[bool]int{true: 8, false: 0}[round < 40] },
	}
	st, recovered, log := runWatchdogLog(t, in, p, 2)
	require.Equal(t, []string{"hold", "recover", "recover", "recover", "release"}, log,
		"the schedule is paused from the declaration until the recovery succeeded")
	require.False(t, st.State.ScheduleHeld)
	require.Len(t, recovered, 3, "two failed runs, then one that succeeded")
	for _, r := range recovered {
		require.Equal(t, recovered[0], r, "every run is the same recovery (same id)")
	}
	require.Equal(t, checkpoint.AutoRecoverRequestID(deadURL, 0), recovered[0].RequestID)
	require.Len(t, st.State.Declarations, 1, "the server was not declared dead again")
	d := st.State.Declarations[0]
	require.Empty(t, d.Error)
	require.Equal(t, 2, d.Tries)
	require.Equal(t, 4, d.Recovered)
	require.Contains(t, d.Summary(), "recovered 4 rollouts")
	require.Nil(t, st.State.Watched[1].Retry)
	require.Equal(t, 1, st.State.Watched[1].Generation)
}

// TestRetryAfter doubles the wait per failure, from the probe interval,
// up to a minute.
func TestRetryAfter(t *testing.T) {
	d := checkpoint.Detection{Every: 5 * time.Second}
	for tries, want := range map[int]time.Duration{1: 5 * time.Second, 2: 10 * time.Second, 3: 20 * time.Second, 4: 40 * time.Second, 5: time.Minute, 50: time.Minute} {
		require.Equal(t, want, d.RetryAfter(tries), "after %d failures", tries)
	}
}
