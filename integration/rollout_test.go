package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/proto"

	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

func protoSize(m proto.Message) int { return proto.Size(m) }

const setSize = 20

// targets are the counter targets of a set: rollout i counts to 2 + i%5.
func target(i int) int { return 2 + i%5 }

// runSet submits a counter set and waits for all of it.
func runSet(ctx context.Context, c *cluster, set string) map[string]rollout.Result {
	var runs []client.WorkflowRun
	for i := range setSize {
		runs = append(runs, c.submit(ctx, counterInput(set, i, target(i))))
	}
	return c.results(ctx, runs)
}

// comparable strips what legitimately differs between two sets: ids.
type outcome struct {
	Reward float64
	Turns  int
	Head   string
	Calls  int64
}

func outcomes(set string, res map[string]rollout.Result) map[int]outcome {
	out := map[int]outcome{}
	for id, r := range res {
		var i int
		fmt.Sscanf(strings.TrimPrefix(id, set+"-"), "%d", &i)
		out[i] = outcome{Reward: r.Reward, Turns: r.Turns, Head: string(r.Head), Calls: r.Usage.Calls}
	}
	return out
}

func TestRolloutSetEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	c := newStack(t, "--latency", "5ms", "--jitter", "2ms", "--imperfection", "0.3")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	res := runSet(ctx, c, "e2e")
	require.Len(t, res, setSize)
	rewards := map[float64]int{}
	for _, r := range res {
		rewards[r.Reward]++
		require.NotNil(t, r.Receipt)
		require.Len(t, r.Lineage, r.Turns)
	}
	require.Greater(t, rewards[1], 0, "some rollouts reach the target")
	require.Greater(t, rewards[0], 0, "seeded imperfection makes some miss")

	// One rollout started from the Temporal CLI with typed JSON input.
	out, err := c.temporalCLI(ctx, "workflow", "execute", "--type", rollout.WorkflowName,
		"--task-queue", rollout.TaskQueue, "--workflow-id", rollout.WorkflowID("cli-1"),
		"--input", `{"rollout_id":"cli-1","set":"cli","task":{"target":3},"env":{"name":"counter"},"policy":{"model":"scripted-counter"},"seed":5}`,
		"--output", "json")
	require.NoError(t, err, out)
	require.Contains(t, out, `"reward": 1`)

	// The operator's view: search attributes filter the set.
	out, err = c.temporalCLI(ctx, "workflow", "list", "--query", `RolloutSet="e2e" AND RolloutPhase="completed"`, "--output", "json")
	require.NoError(t, err, out)
	var listed []json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(out), &listed), out)
	require.Len(t, listed, setSize)
}

// TestWorkerCrash kills the worker with SIGKILL at a named failpoint: right
// after an environment mutation was applied and before its activity reported,
// or right after the model answered and before its activity reported. A fresh
// worker takes over and every rollout ends as in an uninterrupted run, with
// every mutation applied exactly once.
func TestWorkerCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	tests := []struct {
		failpoint string
		// replays: the killed activity had applied a mutation, so its retry
		// must be answered from the stored response.
		replays bool
	}{
		{failpoint.WorkerEnvAppliedBeforeReport, true},
		{failpoint.WorkerModelAnsweredBeforeReport, false},
	}
	for _, tt := range tests {
		t.Run(tt.failpoint, func(t *testing.T) { workerCrash(t, tt.failpoint, tt.replays) })
	}
}

func workerCrash(t *testing.T, fp string, replays bool) {
	c := newCluster(t)
	c.startTemporal()
	c.startEnvServer()
	c.startPolicyServer("--latency", "5ms", "--jitter", "2ms", "--imperfection", "0.3")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	// The uninterrupted baseline.
	base := c.startWorker()
	before := c.envStats(ctx)
	baseline := runSet(ctx, c, "base")
	mid := c.envStats(ctx)
	baseApplied := mid.Applied - before.Applied
	base.kill()

	// The same set, with a worker armed to die at its 15th applied mutation.
	doomed := c.startWorker("TURNSTILE_FAILPOINTS=" + fp + "=kill@15")
	var runs []client.WorkflowRun
	for i := range setSize {
		runs = append(runs, c.submit(ctx, counterInput("crash", i, target(i))))
	}
	c.replaceWhenDead(ctx, doomed)
	crashed := c.results(ctx, runs)
	after := c.envStats(ctx)

	require.Equal(t, outcomes("base", baseline), outcomes("crash", crashed), "same trajectories and rewards as the uninterrupted run")
	require.Equal(t, baseApplied, after.Applied-mid.Applied, "every mutation applied exactly once")
	if replays {
		require.Greater(t, after.Replayed-mid.Replayed, int64(0), "the retried mutation was replayed, not re-applied")
	}
	for _, r := range crashed {
		require.Equal(t, 0, r.Attempt, "a worker crash needs no new attempt")
	}
}

// TestHistoryBytesPerTurnStayFlat runs a 100-turn rollout whose tool outputs
// are 10 KB each and compares the history bytes of turn 10 and turn 100.
func TestHistoryBytesPerTurnStayFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	c := newStack(t, "--latency", "0s", "--jitter", "0s")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	in := counterInput("flat", 0, 100)
	in.Task = json.RawMessage(`{"target":100,"padding":10240}`)
	in.Limits.MaxTurns = 120
	run := c.submit(ctx, in)
	var res rollout.Result
	require.NoError(t, run.Get(ctx, &res))
	require.Equal(t, 101, res.Turns)
	require.Equal(t, 1.0, res.Reward)

	perTurn, total := turnBytes(t, ctx, c, run)
	t10, t100 := perTurn[10], perTurn[100]
	t.Logf("history bytes per turn: turn 10 = %d, turn 100 = %d (ratio %.3f); total history %d bytes over %d turns",
		t10, t100, float64(t100)/float64(t10), total, res.Turns)
	require.InEpsilon(t, t10, t100, 0.10, "history bytes per turn must not grow with the conversation")
}

// turnBytes splits a run's history at each model call: the bytes of turn k
// are those of the events from the k-th model call's scheduling up to the
// next one's.
func turnBytes(t *testing.T, ctx context.Context, c *cluster, run client.WorkflowRun) (map[int]int, int) {
	sizes, types, inputs := c.historySizes(ctx, run.GetID(), run.GetRunID())
	perTurn := map[int]int{}
	turn, total := 0, 0
	for i, size := range sizes {
		total += size
		if types[i] == enums.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED && inputs[i] != nil {
			var in struct {
				Turn int `json:"turn"`
			}
			require.NoError(t, json.Unmarshal(inputs[i], &in))
			turn = in.Turn
		}
		perTurn[turn] += size
	}
	return perTurn, total
}
