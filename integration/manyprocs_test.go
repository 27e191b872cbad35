package integration_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/internal/artifact"
	"github.com/turnstile-rl/turnstile/internal/location"
	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/internal/storage/s3test"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// EnvClusterAddress points TestManyProcesses at a running Temporal cluster
// (make cluster-test sets it) instead of a dev server it starts itself.
const EnvClusterAddress = "TURNSTILE_CLUSTER_ADDRESS"

// connectTemporal starts a dev server, or connects to the cluster named by
// EnvClusterAddress.
func (c *cluster) connectTemporal() {
	c.t.Helper()
	addr := os.Getenv(EnvClusterAddress)
	if addr == "" {
		c.startTemporal()
		return
	}
	c.hostPort = addr
	c.waitFor("temporal cluster", nil, 60*time.Second, func() bool {
		cl, err := client.Dial(client.Options{HostPort: addr, Logger: quietLogger{}})
		if err != nil {
			return false
		}
		c.client = cl
		return true
	})
	c.t.Logf("on the Temporal cluster at %s", addr)
}

// TestManyProcesses runs a mixed set on two workers and two environment
// servers, with transcripts and checkpoints on a real S3-compatible server.
// The set is checkpointed mid-flight; then one worker and one environment
// server are SIGKILLed (Temporal and the others live on), and the
// checkpoint is restored from object storage onto a fresh environment
// server at a new address. Every rollout must end as in the uninterrupted
// run of the same seeds.
//
// In CI it runs on the dev server; `make cluster-test` runs it on the
// PostgreSQL-backed cluster (scripts/cluster.sh).
func TestManyProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	envList := []string{"counter", "blackjack", "workplace", "sandbox"}
	const count = 16
	run := fmt.Sprintf("%d", time.Now().UnixNano()%1e9) // unique on a long-lived cluster
	s3 := s3test.Start(t)
	s3.SetEnv(t) // inherited by every process the test starts
	c := newCluster(t)
	c.store = s3.Bucket(t, "turnstile", "run-"+run+"/transcripts")
	root := s3.Bucket(t, "turnstile", "run-"+run+"/checkpoints")
	c.connectTemporal()
	c.startEnvServer()
	second := c.startSecondEnvServer()
	urlOf := func(i int) string {
		if i%2 == 1 {
			return second
		}
		return c.envURL
	}
	input := func(set string, i int) rollout.Input {
		in := setInput(t, set, envList, i)
		in.RolloutID = fmt.Sprintf("%s-%04d", set, i)
		in.Env.URL = urlOf(i)
		return in
	}
	policy := c.startPolicyServer("--latency", "20ms", "--jitter", "5ms", "--imperfection", "0.2")
	workerA := c.startWorker()
	c.startWorker()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	base, rec := "base"+run, "rec"+run
	var baseRuns []client.WorkflowRun
	for i := range count {
		baseRuns = append(baseRuns, c.submit(ctx, input(base, i)))
	}
	want := outcomes(base, c.results(ctx, baseRuns))

	// The same set, slower, checkpointed mid-flight to S3.
	policy.kill()
	c.startPolicyServer("--latency", "1s", "--jitter", "100ms", "--imperfection", "0.2")
	for i := range count {
		in := input(rec, i)
		in.RequireAck = true
		c.submit(ctx, in)
	}
	c.waitFor("set mid-flight", nil, 2*time.Minute, func() bool {
		busy := 0
		for i := range count {
			info, err := c.dataClient(urlOf(i)).Session(ctx, fmt.Sprintf("%s-%04d", rec, i))
			if err == nil && info.Revision >= 1 && !info.Retired {
				busy++
			}
		}
		return 2*busy >= count
	})
	cpID := "cp-" + run
	cpRun, err := c.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: checkpoint.CheckpointWorkflowID(cpID), TaskQueue: rollout.TaskQueue},
		checkpoint.CheckpointWorkflowName, checkpoint.CheckpointInput{CheckpointID: cpID, Set: rec, Root: root, Participants: []string{c.envURL, second}, Timeout: "60s"})
	require.NoError(t, err)
	var cp checkpoint.CheckpointResult
	require.NoError(t, cpRun.Get(ctx, &cp))
	t.Logf("checkpoint to %s: %d members, %d parked, %d bytes, cut %d ms, total %d ms", cp.Dir, cp.Members, cp.Parked, cp.Bytes, cp.CutMillis, cp.TotalMillis)
	require.Equal(t, count, cp.Members+cp.Closed)
	records := readS3Records(t, cp.Dir, cpID)
	require.Len(t, records, cp.Members)

	// One worker and one environment server die; a fresh server comes up
	// at a new address and a fresh worker takes the dead one's place.
	workerA.kill()
	c.killProc("envserver-2")
	newSecond := c.startSecondEnvServer()
	require.NotEqual(t, second, newSecond)
	second = newSecond
	c.startWorker()

	rsRun, err := c.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: checkpoint.RestoreWorkflowID(cpID), TaskQueue: rollout.TaskQueue},
		checkpoint.RestoreWorkflowName, checkpoint.RestoreInput{CheckpointID: cpID, Root: root, Participants: []string{c.envURL, second}})
	require.NoError(t, err)
	var rs checkpoint.RestoreResult
	require.NoError(t, rsRun.Get(ctx, &rs))
	t.Logf("restore: %d restored, %d started over, %d offered again", rs.Restored, rs.StartedOver, rs.OfferedAgain)
	require.Equal(t, cp.Members, rs.Restored+rs.StartedOver+rs.OfferedAgain)

	got := outcomes(rec, c.acknowledgeAll(ctx, rec, count))
	require.Equal(t, want, got, "same trajectories, rewards and turns as the uninterrupted run")
}

// killProc SIGKILLs the live processes named name.
func (c *cluster) killProc(name string) {
	c.t.Helper()
	c.mu.Lock()
	procs := append([]*proc(nil), c.procs...)
	c.mu.Unlock()
	killed := 0
	for _, p := range procs {
		if done, _ := p.exited(); p.name == name && !done {
			p.kill()
			killed++
		}
	}
	require.Positive(c.t, killed, "no live %s to kill", name)
}

// readS3Records reads the park records of a checkpoint at a storage
// location, validating the artifact first.
func readS3Records(t *testing.T, dir, id string) map[string]rollout.ParkRecord {
	t.Helper()
	ctx := context.Background()
	var o storage.Opener
	defer o.Close()
	agents, err := location.Join(dir, checkpoint.AgentsDir)
	require.NoError(t, err)
	st, err := o.Open(ctx, agents)
	require.NoError(t, err)
	cp, err := artifact.OpenStore(ctx, st, id)
	require.NoError(t, err)
	return parkRecords(t, cp)
}
