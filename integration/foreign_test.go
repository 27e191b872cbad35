package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// foreignRows is the size of the stack set.
const foreignRows = 6

// TestPythonForeignStackCheckpointKillEverythingRestore: an environment
// in no catalog (clients/python/examples/stack, a stack on the participant
// library) runs a set submitted with `bin/starter submit --env-server py
// --env stack --tasks FILE`, driven by the bundled policy server's generic
// scripted policy and the bundled worker, through a checkpoint, a SIGKILL
// of everything and a restore, equal to an uninterrupted run.
func TestPythonForeignStackCheckpointKillEverythingRestore(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	c := newCluster(t)
	c.startTemporal()
	c.startStackParticipant()
	servers := "TURNSTILE_ENV_SERVERS=py=" + c.envURL
	policy := c.startPolicyServer("--latency", "20ms", "--jitter", "5ms")
	c.startWorker(servers)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	tasks := writeStackTasks(t, c.dir)

	// 1. The uninterrupted baseline, through the starter.
	out, err := c.starterWith(ctx, []string{servers}, "submit", "--set", "base", "--env-server", "py", "--env", "stack",
		"--tasks", tasks, "--wait", "--timeout", "5m")
	require.NoError(t, err, out)
	baseline := map[string]rollout.Result{}
	for _, id := range stackIDs("base") {
		var res rollout.Result
		require.NoError(t, c.client.GetWorkflow(ctx, rollout.WorkflowID(id), "").Get(ctx, &res), id)
		baseline[id] = res
	}
	rewards := 0.0
	for _, r := range baseline {
		require.Equal(t, envStack, r.Env)
		rewards += r.Reward
	}
	require.Equal(t, float64(foreignRows-1), rewards, "every row but the one whose want the script misses")

	// 2. The same set, held for acknowledgement, checkpointed mid-flight
	// (a slower model keeps rollouts between turns at the cut).
	policy.kill()
	c.startPolicyServer("--latency", "1s", "--jitter", "100ms")
	out, err = c.starterWith(ctx, []string{servers}, "submit", "--set", "rec", "--env-server", "py", "--env", "stack",
		"--tasks", tasks, "--require-ack")
	require.NoError(t, err, out)
	c.waitFor("set mid-flight", nil, 2*time.Minute, func() bool {
		busy := 0
		for _, id := range stackIDs("rec") {
			info, err := c.dataClient(c.envURL).Session(ctx, id)
			if err == nil && info.Revision >= 1 && !info.Retired {
				busy++
			}
		}
		return 2*busy >= foreignRows
	})
	root := filepath.Join(c.dir, "checkpoints")
	cpRun, err := c.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: checkpoint.CheckpointWorkflowID("cp-1"), TaskQueue: rollout.TaskQueue,
	}, checkpoint.CheckpointWorkflowName, checkpoint.CheckpointInput{
		CheckpointID: "cp-1", Set: "rec", Root: root, Participants: []string{c.envURL}, Timeout: "60s",
	})
	require.NoError(t, err)
	var cp checkpoint.CheckpointResult
	require.NoError(t, cpRun.Get(ctx, &cp))
	require.Equal(t, foreignRows, cp.Members+cp.Closed)
	require.Positive(t, cp.Parked, "some rollouts were cut between turns")

	// 3. Everything dies; only the checkpoint directory survives.
	c.killAll()
	require.NoError(t, os.RemoveAll(c.store))

	// 4. Fresh processes, then the restore.
	c.startTemporal()
	c.startStackParticipant()
	c.startPolicyServer("--latency", "20ms", "--jitter", "5ms")
	c.startWorker(servers)
	rsRun, err := c.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: checkpoint.RestoreWorkflowID("cp-1"), TaskQueue: rollout.TaskQueue,
	}, checkpoint.RestoreWorkflowName, checkpoint.RestoreInput{CheckpointID: "cp-1", Root: root, Participants: []string{c.envURL}})
	require.NoError(t, err)
	var rs checkpoint.RestoreResult
	require.NoError(t, rsRun.Get(ctx, &rs))
	require.Equal(t, cp.Members, rs.Restored+rs.StartedOver+rs.OfferedAgain)
	require.Positive(t, rs.Restored, "the stack's state is exported: rollouts continue from their boundary")

	// 5. Every rollout completes once, equal to the baseline, nothing
	// applied twice (the final revisions match).
	recovered := c.acknowledgeIDs(ctx, stackIDs("rec"))
	for _, id := range stackIDs("base") {
		rec := "rec" + strings.TrimPrefix(id, "base")
		b, r := baseline[id], recovered[rec]
		require.Equal(t, outcome{Reward: b.Reward, Turns: b.Turns, Head: string(b.Head), Calls: b.Usage.Calls},
			outcome{Reward: r.Reward, Turns: r.Turns, Head: string(r.Head), Calls: r.Usage.Calls}, "%s: same trajectory as %s", rec, id)
		checkLineage(t, r)
		info, err := c.dataClient(c.envURL).Session(ctx, rec)
		require.NoError(t, err)
		require.Equal(t, int64(stackOps(id)), info.Revision, "%s: every scripted call applied once", rec)
		require.Equal(t, 1, c.completedRuns(ctx, rec), "rollout %s: completed runs", rec)
	}
}

// envStack is the Python environment's name.
const envStack = "stack"

// startStackParticipant starts the Python stack environment on the
// environment server's address (kept across restarts).
func (c *cluster) startStackParticipant() *proc {
	c.t.Helper()
	py, err := exec.LookPath("python3")
	require.NoError(c.t, err, "the Python participant needs python3")
	script := filepath.Join(bins.root, "clients", "python", "examples", "stack", "stack.py")
	return c.startEnvProcess("python-stack", py, []string{script}, "PYTHONDONTWRITEBYTECODE=1")
}

// starterWith runs bin/starter against the cluster with extra environment
// entries and the cluster's data token (the workers' settings it reads).
func (c *cluster) starterWith(ctx context.Context, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(bins.dir, "starter"), args...)
	cmd.Env = append(append(os.Environ(), "TEMPORAL_ADDRESS="+c.hostPort, "TEMPORAL_NAMESPACE=default",
		protocol.DataTokenEnvVar+"="+c.dataToken), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// stackIDs are the rollout ids of a stack set: one rollout per row.
func stackIDs(set string) []string {
	ids := make([]string, foreignRows)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-row%d-r0", set, i+1)
	}
	return ids
}

// stackOps is the number of calls the script of a rollout's row makes.
func stackOps(id string) int {
	var row int
	fmt.Sscanf(id[strings.Index(id, "-row")+4:], "%d", &row)
	pushes, pops := stackScript(row - 1)
	return pushes + pops
}

// stackScript is row i's script shape: pushes, then pops.
func stackScript(i int) (pushes, pops int) { return 3 + i%3, i % 2 }

// writeStackTasks writes the tasks file: row i pushes 1..n one call a
// turn, pops some, and wants what is left; the last row wants what its
// script misses, so rewards differ.
func writeStackTasks(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	for i := range foreignRows {
		pushes, pops := stackScript(i)
		var turns [][]map[string]any
		var stack []int
		for v := 1; v <= pushes; v++ {
			turns = append(turns, []map[string]any{{"name": "push", "arguments": map[string]any{"value": v}}})
			stack = append(stack, v)
		}
		for range pops {
			turns = append(turns, []map[string]any{{"name": "pop", "arguments": map[string]any{}}})
			stack = stack[:len(stack)-1]
		}
		if i == foreignRows-1 {
			stack = append(stack, 99)
		}
		line, err := json.Marshal(map[string]any{"want": stack, "script": turns})
		require.NoError(t, err)
		b.Write(line)
		b.WriteByte('\n')
	}
	path := filepath.Join(dir, "stack-tasks.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o600))
	return path
}
