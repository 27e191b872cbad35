package integration_test

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

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
	c := newCluster(t)
	c.startTemporal()
	c.startEnvServer()
	serverA := c.envURL
	serverB, procB := c.startNamedEnvServer("env-1")
	onB := func(i int) bool { return i%2 == 1 }
	urlOf := func(i int) string {
		if onB(i) {
			return serverB
		}
		return serverA
	}
	input := func(set string, i int) rollout.Input {
		in := setInput(t, set, envList, i)
		in.Env.URL = urlOf(i)
		return in
	}
	appliedA := func() int64 {
		st, err := c.dataClient(serverA).Stats(context.Background())
		require.NoError(t, err)
		return st.Applied
	}
	policy := c.startPolicyServer("--latency", "20ms", "--jitter", "5ms", "--imperfection", "0.2")
	c.startWorker()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	// 1. The uninterrupted baseline.
	beforeBase := appliedA()
	var baseRuns []client.WorkflowRun
	for i := range count {
		baseRuns = append(baseRuns, c.submit(ctx, input("base", i)))
	}
	baseline := c.results(ctx, baseRuns)
	baseRevisions := c.revisions(ctx, "base", count, urlOf)
	baseAppliedA := appliedA() - beforeBase

	// 2. The same set with a slower model and automatic recovery on: a
	// standby with B's name is registered; a checkpoint is cut mid-flight.
	policy.kill()
	c.startPolicyServer("--latency", "600ms", "--jitter", "50ms", "--imperfection", "0.2")
	standby, _ := c.startNamedEnvServer("env-1")
	root := filepath.Join(c.dir, "checkpoints")
	tc := trainer.New(c.client, rollout.TaskQueue)
	auto := trainer.AutoRecover{Participants: []string{serverA, serverB}, Standby: []string{standby}, Root: root,
		Every: time.Second, Timeout: time.Second, Misses: 3, Bound: 5 * time.Second}
	wd, err := tc.StartWatchdog(ctx, "rec", auto)
	require.NoError(t, err)
	beforeRec := appliedA()
	for i := range count {
		c.submit(ctx, input("rec", i))
	}
	c.waitFor("set mid-flight", nil, 2*time.Minute, func() bool {
		busy := 0
		for i := range count {
			info, err := c.dataClient(urlOf(i)).Session(ctx, fmt.Sprintf("rec-%04d", i))
			if err == nil && info.Revision >= 1 && !info.Retired {
				busy++
			}
		}
		return 4*busy >= count
	})
	cpRun, err := c.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: checkpoint.CheckpointWorkflowID("cp-1"), TaskQueue: checkpoint.ControlTaskQueue(rollout.TaskQueue),
	}, checkpoint.CheckpointWorkflowName, checkpoint.CheckpointInput{
		CheckpointID: "cp-1", Set: "rec", Root: root, Participants: []string{serverA, serverB}, Timeout: "60s",
	})
	require.NoError(t, err)
	var cp checkpoint.CheckpointResult
	require.NoError(t, cpRun.Get(ctx, &cp))
	records := readRecords(t, root, "cp-1")

	// 3. B's rollouts go on past the cut, then B dies (or hangs).
	c.waitFor("a rollout of server B past the cut", nil, 2*time.Minute, func() bool {
		past, live := false, false
		for i := range count {
			id := fmt.Sprintf("rec-%04d", i)
			rec, ok := records[id]
			if !onB(i) || !ok {
				continue
			}
			info, err := c.dataClient(serverB).Session(ctx, id)
			if err == nil && !info.Retired {
				live = true
				past = past || info.Revision > rec.Boundary.Revision
			}
		}
		return past && live
	})
	faultAt := time.Now()
	switch fault {
	case faultKill:
		procB.kill()
		<-procB.done
	case faultPause:
		require.NoError(t, syscall.Kill(procB.PID(), syscall.SIGSTOP))
		t.Cleanup(func() { _ = syscall.Kill(procB.PID(), syscall.SIGCONT) })
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
		// Continued past the bound: its late answers reach only ended runs.
		require.NoError(t, syscall.Kill(procB.PID(), syscall.SIGCONT))
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
	results := map[string]rollout.Result{}
	for i := range count {
		id := fmt.Sprintf("rec-%04d", i)
		var r rollout.Result
		require.NoError(t, c.client.GetWorkflow(ctx, rollout.WorkflowID(id), "").Get(ctx, &r), id)
		results[id] = r
	}
	require.Equal(t, outcomes("base", baseline), outcomes("rec", results), "same trajectories, rewards and turns as the uninterrupted run")
	moved := 0
	for i := range count {
		id := fmt.Sprintf("rec-%04d", i)
		require.Equal(t, 1, c.completedRuns(ctx, id), "rollout %s: completed runs", id)
		if !onB(i) {
			require.Equal(t, 0, results[id].Attempt, "%s on the healthy server keeps attempt 0", id)
			require.Equal(t, 1, c.allRuns(ctx, id), "%s on the healthy server keeps its one run", id)
			info, err := c.dataClient(serverA).Session(ctx, id)
			require.NoError(t, err)
			require.Equal(t, baseRevisions[i], info.Revision, "%s: final revision on the healthy server", id)
			continue
		}
		if results[id].Attempt == 0 {
			continue // finished on B before the fault
		}
		moved++
		require.Equal(t, 1, results[id].Attempt, "%s moved as attempt 1", id)
		info, err := c.dataClient(standby).Session(ctx, id)
		require.NoError(t, err)
		require.Equal(t, baseRevisions[i], info.Revision, "%s: final revision on the standby (a mutation applied twice would raise it)", id)
	}
	require.Equal(t, decl.Recovered, moved, "exactly the rollouts of the declared server moved")
	require.Equal(t, baseAppliedA, appliedA()-beforeRec, "the healthy server applied each mutation of its rollouts once")

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
