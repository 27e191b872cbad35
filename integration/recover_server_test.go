package integration_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// TestRecoverServer is scoped recovery on real processes: a mixed set runs
// on two environment servers, a checkpoint is cut, the rollouts go on past
// it, then one server is SIGKILLed. RecoverServer moves only its rollouts to
// a replacement process (from their boundary, or from their seed); the
// rollouts of the healthy server keep their single run, attempt 0 and
// their server's mutation count. Every result equals the uninterrupted
// run's, every moved rollout's environment ends at the baseline revision
// (no mutation applied twice in its lineage), and each rollout completes
// exactly once.
func TestRecoverServer(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	envList := []string{"counter", "blackjack", "workplace", "sandbox"}
	count := 16
	// A larger set measures the time to recover more rollouts
	// (TURNSTILE_RECOVER_COUNT=64); CI runs 16.
	if n, err := strconv.Atoi(os.Getenv("TURNSTILE_RECOVER_COUNT")); err == nil && n > 0 {
		count = n
	}
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

	// 2. The same set with a slower model, checkpointed mid-flight.
	policy.kill()
	c.startPolicyServer("--latency", "600ms", "--jitter", "50ms", "--imperfection", "0.2")
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
		return 4*busy >= count // a quarter busy at once: enough on a loaded machine too
	})
	root := filepath.Join(c.dir, "checkpoints")
	cpRun, err := c.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: checkpoint.CheckpointWorkflowID("cp-1"), TaskQueue: checkpoint.ControlTaskQueue(rollout.TaskQueue),
	}, checkpoint.CheckpointWorkflowName, checkpoint.CheckpointInput{
		CheckpointID: "cp-1", Set: "rec", Root: root, Participants: []string{serverA, serverB}, Timeout: "60s",
	})
	require.NoError(t, err)
	var cp checkpoint.CheckpointResult
	require.NoError(t, cpRun.Get(ctx, &cp))
	records := readRecords(t, root, "cp-1")

	// 3. Server B's rollouts go on past the cut (mutations the checkpoint
	// does not hold), then B dies mid-flight.
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
	procB.kill()
	<-procB.done

	// 4. A replacement with the dead server's name, on a new address; the
	// operator's command moves B's rollouts there.
	replacement, _ := c.startNamedEnvServer("env-1")
	require.NotEqual(t, serverB, replacement)
	tc := trainer.New(c.client, rollout.TaskQueue)
	req := trainer.RecoverServerRequest{Set: "rec", Server: serverB, Replacement: replacement, Root: root}
	start := time.Now()
	started, err := tc.RecoverServer(ctx, req)
	require.NoError(t, err)
	require.Equal(t, checkpoint.RecoverServerWorkflowID("rec", serverB), started.WorkflowID)
	res, err := tc.WaitRecoverServer(ctx, started)
	require.NoError(t, err)
	t.Logf("recovery: %d moved (%d continue, %d of them by replay; %d start over, %d after a replay diverged), %d terminated, %d untouched, in %s",
		res.Affected, res.Continue, res.Replayed, res.StartOver, res.ReplayDiverged, res.Terminated, res.Untouched, time.Since(start).Round(time.Millisecond))
	require.Zero(t, res.ReplayDiverged, "the sandbox answers a replay as the first time")
	require.Equal(t, res.Affected, res.Continue+res.StartOver)
	require.Equal(t, "cp-1", res.CheckpointID, "the newest committed checkpoint of the set")
	require.Equal(t, 1, res.Participant)
	require.Positive(t, res.Affected)
	again, err := tc.RecoverServer(ctx, req)
	require.NoError(t, err)
	require.Equal(t, started, again, "a repeated request starts nothing")

	// 5. Every rollout completes once, as in the uninterrupted run.
	recovered := map[string]rollout.Result{}
	for i := range count {
		id := fmt.Sprintf("rec-%04d", i)
		var r rollout.Result
		require.NoError(t, c.client.GetWorkflow(ctx, rollout.WorkflowID(id), "").Get(ctx, &r), id)
		recovered[id] = r
	}
	require.Equal(t, outcomes("base", baseline), outcomes("rec", recovered), "same trajectories, rewards and turns as the uninterrupted run")
	moved := 0
	for i := range count {
		id := fmt.Sprintf("rec-%04d", i)
		require.Equal(t, 1, c.completedRuns(ctx, id), "rollout %s: completed runs", id)
		if !onB(i) {
			require.Equal(t, 0, recovered[id].Attempt, "%s on the healthy server keeps attempt 0", id)
			require.Equal(t, 1, c.allRuns(ctx, id), "%s on the healthy server keeps its one run", id)
			info, err := c.dataClient(serverA).Session(ctx, id)
			require.NoError(t, err)
			require.Equal(t, baseRevisions[i], info.Revision, "%s: final revision on the healthy server", id)
			continue
		}
		if recovered[id].Attempt == 0 {
			continue // finished on B before it died
		}
		moved++
		require.Equal(t, 1, recovered[id].Attempt, "%s moved as attempt 1", id)
		info, err := c.dataClient(replacement).Session(ctx, id)
		require.NoError(t, err)
		require.Equal(t, baseRevisions[i], info.Revision, "%s: final revision on the replacement (a mutation applied twice would raise it)", id)
	}
	require.Equal(t, res.Affected, moved, "exactly the rollouts of the dead server moved")
	require.Equal(t, baseAppliedA, appliedA()-beforeRec, "the healthy server applied each mutation of its rollouts once")
}

// allRuns counts every run (any status) of a rollout's workflow ID.
func (c *cluster) allRuns(ctx context.Context, rolloutID string) int {
	c.t.Helper()
	q := fmt.Sprintf(`WorkflowId=%q`, rollout.WorkflowID(rolloutID))
	resp, err := c.client.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: "default", Query: q})
	require.NoError(c.t, err)
	return int(resp.GetCount())
}
