package integration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// twoServers is the stack of the scoped-recovery tests: a mixed set on two
// environment servers, A and B (B named env-1, so a replacement can take
// its name), the odd rollouts on B, and a fast model for the uninterrupted
// run. The set that is cut and recovered is "rec", its baseline "base".
type twoServers struct {
	t                *testing.T
	c                *cluster
	envs             []string
	count            int
	serverA, serverB string
	procB            *proc
	policy           *proc
}

func newTwoServers(t *testing.T, envs []string, count int) *twoServers {
	c := newCluster(t)
	c.startTemporal()
	c.startEnvServer()
	s := &twoServers{t: t, c: c, envs: envs, count: count, serverA: c.envURL}
	s.serverB, s.procB = c.startNamedEnvServer("env-1")
	s.policy = c.startPolicyServer("--latency", "20ms", "--jitter", "5ms", "--imperfection", "0.2")
	c.startWorker()
	return s
}

func (s *twoServers) onB(i int) bool { return i%2 == 1 }

func (s *twoServers) urlOf(i int) string {
	if s.onB(i) {
		return s.serverB
	}
	return s.serverA
}

func (s *twoServers) input(set string, i int) rollout.Input {
	in := setInput(s.t, set, s.envs, i)
	in.Env.URL = s.urlOf(i)
	return in
}

// appliedA is how many mutations server A has applied.
func (s *twoServers) appliedA() int64 {
	st, err := s.c.dataClient(s.serverA).Stats(context.Background())
	require.NoError(s.t, err)
	return st.Applied
}

// baseline runs the set "base" uninterrupted and returns its results, the
// revisions its sessions ended at, and the mutations server A applied.
func (s *twoServers) baseline(ctx context.Context) (map[string]rollout.Result, map[int]int64, int64) {
	before := s.appliedA()
	var runs []client.WorkflowRun
	for i := range s.count {
		runs = append(runs, s.c.submit(ctx, s.input("base", i)))
	}
	results := s.c.results(ctx, runs)
	return results, s.c.revisions(ctx, "base", s.count, s.urlOf), s.appliedA() - before
}

// slowModel restarts the policy server slower, so that a checkpoint cuts
// the next set mid-flight.
func (s *twoServers) slowModel() {
	s.policy.kill()
	s.policy = s.c.startPolicyServer("--latency", "600ms", "--jitter", "50ms", "--imperfection", "0.2")
}

// submitMidFlight submits the set "rec" and waits until a quarter of its
// rollouts are busy at once (enough on a loaded machine too).
func (s *twoServers) submitMidFlight(ctx context.Context) {
	for i := range s.count {
		s.c.submit(ctx, s.input("rec", i))
	}
	s.c.waitFor("set mid-flight", nil, 2*time.Minute, func() bool {
		busy := 0
		for i := range s.count {
			info, err := s.c.dataClient(s.urlOf(i)).Session(ctx, fmt.Sprintf("rec-%04d", i))
			if err == nil && info.Revision >= 1 && !info.Retired {
				busy++
			}
		}
		return 4*busy >= s.count
	})
}

// checkpoint cuts the set "rec" as checkpoint cp-1 under root and returns
// its park records.
func (s *twoServers) checkpoint(ctx context.Context, root string) map[string]rollout.ParkRecord {
	run, err := s.c.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: checkpoint.CheckpointWorkflowID("cp-1"), TaskQueue: checkpoint.ControlTaskQueue(rollout.TaskQueue),
	}, checkpoint.CheckpointWorkflowName, checkpoint.CheckpointInput{
		CheckpointID: "cp-1", Set: "rec", Root: root, Participants: []string{s.serverA, s.serverB}, Timeout: "60s",
	})
	require.NoError(s.t, err)
	var cp checkpoint.CheckpointResult
	require.NoError(s.t, run.Get(ctx, &cp))
	return readRecords(s.t, root, "cp-1")
}

// waitPastCut waits until a rollout of server B went past the cut
// (mutations the checkpoint does not hold) while B still serves it.
func (s *twoServers) waitPastCut(ctx context.Context, records map[string]rollout.ParkRecord) {
	s.c.waitFor("a rollout of server B past the cut", nil, 2*time.Minute, func() bool {
		past, live := false, false
		for i := range s.count {
			id := fmt.Sprintf("rec-%04d", i)
			rec, ok := records[id]
			if !s.onB(i) || !ok {
				continue
			}
			info, err := s.c.dataClient(s.serverB).Session(ctx, id)
			if err == nil && !info.Retired {
				live = true
				past = past || info.Revision > rec.Boundary.Revision
			}
		}
		return past && live
	})
}

// checkRecovered checks that every rollout of "rec" completed once with
// the baseline's outcome: A's keep attempt 0, their one run and the
// baseline's revision; B's that moved are attempt 1 and end on replacement
// at the baseline's revision (a mutation applied twice would raise it). It
// returns how many moved.
func (s *twoServers) checkRecovered(ctx context.Context, baseline map[string]rollout.Result, baseRevisions map[int]int64, replacement string) int {
	t, c := s.t, s.c
	results := map[string]rollout.Result{}
	for i := range s.count {
		id := fmt.Sprintf("rec-%04d", i)
		var r rollout.Result
		require.NoError(t, c.client.GetWorkflow(ctx, rollout.WorkflowID(id), "").Get(ctx, &r), id)
		results[id] = r
	}
	require.Equal(t, outcomes("base", baseline), outcomes("rec", results), "same trajectories, rewards and turns as the uninterrupted run")
	moved := 0
	for i := range s.count {
		id := fmt.Sprintf("rec-%04d", i)
		require.Equal(t, 1, c.completedRuns(ctx, id), "rollout %s: completed runs", id)
		if !s.onB(i) {
			require.Equal(t, 0, results[id].Attempt, "%s on the healthy server keeps attempt 0", id)
			require.Equal(t, 1, c.allRuns(ctx, id), "%s on the healthy server keeps its one run", id)
			info, err := c.dataClient(s.serverA).Session(ctx, id)
			require.NoError(t, err)
			require.Equal(t, baseRevisions[i], info.Revision, "%s: final revision on the healthy server", id)
			continue
		}
		if results[id].Attempt == 0 {
			continue // finished on B before the fault
		}
		moved++
		require.Equal(t, 1, results[id].Attempt, "%s moved as attempt 1", id)
		info, err := c.dataClient(replacement).Session(ctx, id)
		require.NoError(t, err)
		require.Equal(t, baseRevisions[i], info.Revision, "%s: final revision on the replacement (a mutation applied twice would raise it)", id)
	}
	return moved
}
