package integration_test

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// autoFault is what happens to the watched server.
type autoFault int

const (
	faultKill  autoFault = iota // SIGKILL: the server is dead
	faultPause                  // SIGSTOP past the bound, then SIGCONT: a false positive
)

// TestAutoRecoverKilledServer: with automatic recovery on and a standby
// registered, an environment server is SIGKILLed mid-set and the test
// sends no recover command. The watchdog declares it dead within its
// detection bound and moves its rollouts to the standby; every rollout
// completes once with the uninterrupted run's result, and no mutation is
// applied twice.
func TestAutoRecoverKilledServer(t *testing.T) { autoRecover(t, faultKill) }

// TestAutoRecoverPausedServer is the false positive: the server is
// SIGSTOPped past the bound (declared dead, its rollouts moved to the
// standby), then SIGCONTinued, when its late answers reach only runs the
// recovery ended. Nothing is lost and nothing applied twice.
func TestAutoRecoverPausedServer(t *testing.T) { autoRecover(t, faultPause) }

func autoRecover(t *testing.T, fault autoFault) {
	if testing.Short() {
		t.Skip("integration")
	}
	envList := []string{"counter", "blackjack", "workplace", "sandbox"}
	const count = 8
	s := newTwoServers(t, envList, count)
	c := s.c
	serverA, serverB := s.serverA, s.serverB
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	// 1. The uninterrupted baseline.
	baseline, baseRevisions, baseAppliedA := s.baseline(ctx)

	// 2. The same set with a slower model and automatic recovery on: a
	// standby with B's name is registered; a checkpoint is cut mid-flight.
	s.slowModel()
	standby, _ := c.startNamedEnvServer("env-1")
	root := filepath.Join(c.dir, "checkpoints")
	tc := trainer.New(c.client, rollout.TaskQueue)
	auto := trainer.AutoRecover{Participants: []string{serverA, serverB}, Standby: []string{standby}, Root: root,
		Every: time.Second, Timeout: time.Second, Misses: 3, Bound: 5 * time.Second}
	wd, err := tc.StartWatchdog(ctx, "rec", auto)
	require.NoError(t, err)
	beforeRec := s.appliedA()
	s.submitMidFlight(ctx)
	records := s.checkpoint(ctx, root)

	// 3. B's rollouts go on past the cut, then B dies (or hangs).
	s.waitPastCut(ctx, records)
	faultAt := time.Now()
	switch fault {
	case faultKill:
		s.procB.kill()
		<-s.procB.done
	case faultPause:
		require.NoError(t, syscall.Kill(s.procB.PID(), syscall.SIGSTOP))
		t.Cleanup(func() { _ = syscall.Kill(s.procB.PID(), syscall.SIGCONT) })
	}

	// 4. No command from the test: the watchdog declares B dead and
	// recovers its rollouts onto the standby.
	var decl checkpoint.Declaration
	c.waitFor("B declared dead", nil, 2*time.Minute, func() bool {
		st, ok, err := tc.WatchdogStatus(ctx, "rec")
		if err != nil || !ok || len(st.State.Declarations) == 0 {
			return false
		}
		decl = st.State.Declarations[0]
		return true
	})
	detected := time.Since(faultAt)
	if fault == faultPause {
		// Continued past the bound, right after the declaration and
		// before the recovery ended B's runs: an old run B answers
		// meanwhile may finish, and keeps its one result (no second
		// attempt); the rest move.
		require.NoError(t, syscall.Kill(s.procB.PID(), syscall.SIGCONT))
	}
	c.waitFor("B's rollouts recovered", nil, 3*time.Minute, func() bool {
		st, ok, err := tc.WatchdogStatus(ctx, "rec")
		if err != nil || !ok || len(st.State.Declarations) == 0 || st.State.Declarations[0].RecoveredAt.IsZero() {
			return false
		}
		decl = st.State.Declarations[0]
		return true
	})
	recovered := time.Since(faultAt)
	det, err := checkpoint.WatchSettings{Every: "1s", Timeout: "1s", Misses: 3, Bound: "5s"}.Parse()
	require.NoError(t, err)
	t.Logf("time to detect %s (detection bound %s), time to recover %s (recovery itself %s): %s",
		detected.Round(time.Millisecond), det.MaxDetect(), recovered.Round(time.Millisecond),
		decl.RecoveredAt.Sub(decl.DeclaredAt).Round(time.Millisecond), decl.Summary())
	require.Empty(t, decl.Error)
	require.Equal(t, serverB, decl.Server)
	require.Equal(t, standby, decl.Replacement)
	require.GreaterOrEqual(t, decl.DeclaredAt.Sub(decl.LastAnswer), 5*time.Second, "never declared dead before the bound")
	require.Less(t, detected, det.MaxDetect()+time.Minute, "detected within the bound (generous slack for a loaded machine)")
	require.Positive(t, decl.Recovered)

	// 5. Every rollout completes once, as in the uninterrupted run.
	moved := s.checkRecovered(ctx, baseline, baseRevisions, standby)
	require.Equal(t, decl.Recovered, moved, "exactly the rollouts of the declared server moved")
	require.Equal(t, baseAppliedA, s.appliedA()-beforeRec, "the healthy server applied each mutation of its rollouts once")

	// 6. The watchdog ends by itself once the set is done, its record
	// holding the one declaration; its history replays.
	var final checkpoint.WatchdogStatus
	wdRun := c.client.GetWorkflow(ctx, wd.WorkflowID, wd.RunID)
	require.NoError(t, wdRun.Get(ctx, &final))
	require.Equal(t, "done", final.Phase)
	require.Len(t, final.State.Declarations, 1, "one declaration, one recovery")
	if fault == faultKill {
		c.checkReplay(ctx, wdRun, "watchdog.json")
	}
}
