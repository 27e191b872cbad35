package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// The Python trainer loop (clients/python/examples/trainer_loop.py) on the
// real stack: dev server, environment server, policy server, worker and
// gateway, all separate processes. The loop's state file is the evidence:
// which receipts it trained on, and how often the feed handed each over.

// trainerState is the part of the trainer loop's state file the tests read.
type trainerState struct {
	Trained           map[string]string `json:"trained"`
	Deliveries        map[string]int    `json:"deliveries"`
	Failed            map[string]string `json:"failed"`
	Acknowledged      int               `json:"acknowledged"`
	RewardSum         float64           `json:"reward_sum"`
	GeneratedTokenIDs int               `json:"generated_token_ids"`
	Redelivered       int               `json:"redelivered"`
	Swept             int               `json:"swept"`
	PendingAck        json.RawMessage   `json:"pending_ack"`
	Checkpoints       []struct {
		ID     string `json:"id"`
		Status string `json:"status"`
		Error  string `json:"error"`
		At     int    `json:"at"`
	} `json:"checkpoints"`
}

// pyTrainer is one run of the Python trainer loop.
type pyTrainer struct {
	p     *proc
	state string
}

// startTrainer starts the Python trainer loop on set, with the installed
// client (clientPython) and its state file in the test's directory; args
// are the loop's flags after --set and --state.
func (c *cluster) startTrainer(gatewayURL, set string, args ...string) *pyTrainer {
	c.t.Helper()
	py := clientPython(c.t)
	state := filepath.Join(c.dir, set+".trainer.json")
	script := filepath.Join(bins.root, "clients", "python", "examples", "trainer_loop.py")
	all := append([]string{script, "--gateway", gatewayURL, "--set", set, "--state", state}, args...)
	p := c.start("trainer", py, all, "TURNSTILE_GATEWAY_TOKEN="+gatewayToken, "TURNSTILE_GATEWAY_OPERATOR_TOKEN="+gatewayOperatorToken, "PYTHONDONTWRITEBYTECODE=1",
		"PYTHONUNBUFFERED=1")
	return &pyTrainer{p: p, state: state}
}

// wait waits for the trainer to exit and returns its exit status and output.
func (tr *pyTrainer) wait(t *testing.T, timeout time.Duration) (int, string) {
	t.Helper()
	select {
	case <-tr.p.done:
	case <-time.After(timeout):
		require.Failf(t, "the trainer did not exit", "not within %s:\n%s", timeout, tr.p.tail(40))
	}
	out, err := os.ReadFile(tr.p.Log)
	require.NoError(t, err)
	var ee *exec.ExitError
	switch {
	case tr.p.Err() == nil:
		return 0, string(out)
	case errors.As(tr.p.Err(), &ee):
		return ee.ExitCode(), string(out)
	}
	require.Failf(t, "the trainer failed", "trainer: %v", tr.p.Err())
	return -1, ""
}

// read returns the trainer's saved state, and false before the first save.
func (tr *pyTrainer) read(t testing.TB) (trainerState, bool) {
	t.Helper()
	var st trainerState
	data, err := os.ReadFile(tr.state)
	if errors.Is(err, os.ErrNotExist) {
		return st, false
	}
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &st), "the state file is written atomically, so it always parses")
	return st, true
}

// waitTrained waits until the trainer has trained on at least n results.
func (c *cluster) waitTrained(tr *pyTrainer, n int) {
	c.t.Helper()
	c.waitFor(fmt.Sprintf("trainer trained on %d results", n), tr.p, 3*time.Minute, func() bool {
		st, ok := tr.read(c.t)
		return ok && len(st.Trained) >= n
	})
}

// trainerSummary returns the JSON summary the trainer printed last.
func trainerSummary(t *testing.T, out string) map[string]any {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "{") {
			var doc map[string]any
			if json.Unmarshal([]byte(lines[i]), &doc) == nil {
				return doc
			}
		}
	}
	require.Failf(t, "the trainer printed no summary", "its output:\n%s", out)
	return nil
}

// checkDeliveredOnce checks the trainer's evidence against Temporal: every
// rollout of the set completed exactly one run, with the result whose
// receipt the trainer trained on and acknowledged, each delivered once.
func (c *cluster) checkDeliveredOnce(ctx context.Context, set string, count int, st trainerState) float64 {
	c.t.Helper()
	require.Len(c.t, st.Trained, count, "every rollout trained on (none lost)")
	require.Empty(c.t, st.Failed)
	require.Len(c.t, st.Deliveries, count)
	for id, n := range st.Deliveries {
		require.Equal(c.t, 1, n, "rollout %s was delivered %d times", id, n)
	}
	require.Zero(c.t, st.Redelivered, "nothing delivered twice")
	require.Zero(c.t, st.Swept, "the feed's cursor passed over no result (the loop's final sweep found none)")
	require.Equal(c.t, count, st.Acknowledged)
	require.Equal(c.t, "null", string(st.PendingAck))

	c.waitFor("every rollout's run completed", nil, time.Minute, func() bool {
		return c.countSet(ctx, set, `ExecutionStatus="Completed"`) == count
	})
	var rewards float64
	for id, sha := range st.Trained {
		var res rollout.Result
		require.NoError(c.t, c.client.GetWorkflow(ctx, rollout.WorkflowID(id), "").Get(ctx, &res), id)
		require.NotNil(c.t, res.Receipt, id)
		require.Equal(c.t, sha, res.Receipt.SHA256, "%s: trained on the result it acknowledged", id)
		rewards += res.Reward
	}
	require.InDelta(c.t, rewards, st.RewardSum, 1e-9, "each reward counted once")
	return rewards
}

// countSet counts the runs of a set matching a visibility filter.
func (c *cluster) countSet(ctx context.Context, set, filter string) int {
	c.t.Helper()
	q := fmt.Sprintf(`RolloutSet=%q AND %s`, set, filter)
	resp, err := c.client.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: "default", Query: q})
	require.NoError(c.t, err, q)
	return int(resp.GetCount())
}

// counterRows writes a dataset of counter rows with the given targets; the
// first capture rows ask for token ids.
func counterRows(t *testing.T, dir string, targets []int, capture int) string {
	t.Helper()
	var b strings.Builder
	for i, target := range targets {
		sampling := ""
		if i < capture {
			sampling = `,"sampling":{"capture_tokens":true}`
		}
		fmt.Fprintf(&b, `{"id":"row%d","env":"counter","task":{"target":%d}%s}`+"\n", i, target, sampling)
	}
	path := filepath.Join(dir, "rows.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o600))
	return path
}

// TestTrainerLoop runs the Python loop end to end: it submits a dataset
// through the gateway, consumes the feed, trains, acknowledges, asks for a
// checkpoint every 4 results, and ends when the set is done; a restarted
// loop finds nothing left and trains nothing twice.
func TestTrainerLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	clientPython(t) // before the stack starts: the venv is made once per test binary
	c := newStack(t, "--latency", "50ms")
	_, url := c.startGateway("127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	const set, repeats = "py1", 2
	rows := counterRows(t, c.dir, []int{1, 2, 3, 2, 1, 3}, 3)
	args := []string{"--dataset", rows, "--repeats", fmt.Sprint(repeats), "--batch", "4", "--wait-ms", "2000",
		"--checkpoint-every", "4", "--participant", c.envURL, "--checkpoint-timeout", "30s", "--step-ms", "250"}
	tr := c.startTrainer(url, set, args...)
	code, out := tr.wait(t, 3*time.Minute)
	require.Equal(t, 0, code, "trainer:\n%s", out)
	st, ok := tr.read(t)
	require.True(t, ok)
	rewards := c.checkDeliveredOnce(ctx, set, 6*repeats, st)
	require.Positive(t, st.GeneratedTokenIDs, "the rows with capture_tokens carry token ids")
	// A checkpoint every 4 results, one at a time: results that arrive
	// while one runs wait for the next, so a fast set may see only one.
	require.NotEmpty(t, st.Checkpoints, "a checkpoint every 4 of 12 results")
	for _, cp := range st.Checkpoints {
		require.Equal(t, "completed", cp.Status, "checkpoint %s: %s", cp.ID, cp.Error)
		require.GreaterOrEqual(t, cp.At, 4, "checkpoint %s requested before 4 results", cp.ID)
	}
	t.Logf("%d checkpoints, at %+v results", len(st.Checkpoints), st.Checkpoints)
	sum := trainerSummary(t, out)
	require.Equal(t, true, sum["done"])
	require.InDelta(t, rewards/float64(6*repeats), sum["mean_reward"], 1e-9)

	again := c.startTrainer(url, set, args...)
	code, out = again.wait(t, time.Minute)
	require.Equal(t, 0, code, "restarted trainer:\n%s", out)
	st2, _ := again.read(t)
	require.Equal(t, st.Trained, st2.Trained, "a restarted trainer trains nothing twice")
	require.Equal(t, st.RewardSum, st2.RewardSum)
}

// TestTrainerLoopExactlyOnceUnderCrashes: the Python loop consumes a set of
// 120 rollouts while the gateway is SIGKILLed and restarted twice and the
// worker once; afterwards every rollout was delivered to the trainer
// exactly once, counted by receipt: none lost, none twice.
func TestTrainerLoopExactlyOnceUnderCrashes(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	clientPython(t) // before the stack starts: the venv is made once per test binary
	c := newCluster(t)
	c.startTemporal()
	c.startEnvServer()
	c.startPolicyServer("--latency", "100ms", "--jitter", "50ms")
	worker := c.startWorker()
	gateway, url := c.startGateway("127.0.0.1:0")
	addr := strings.TrimPrefix(url, "http://") // a restarted gateway keeps its address, as behind a load balancer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	const set, count = "py-crash", 120
	tr := c.startTrainer(url, set, "--envs", "counter", "--count", fmt.Sprint(count), "--batch", "6",
		"--wait-ms", "1000", "--step-ms", "100")

	c.waitTrained(tr, 6)
	gateway.kill()
	t.Log("gateway SIGKILLed (1 of 2)")
	gateway, _ = c.startGateway(addr)

	c.waitTrained(tr, 18)
	worker.kill()
	t.Logf("worker SIGKILLed with %d rollouts working and %d holding their results",
		c.countSet(ctx, set, `ExecutionStatus="Running" AND RolloutPhase!="awaiting_ack"`),
		c.countSet(ctx, set, `ExecutionStatus="Running" AND RolloutPhase="awaiting_ack"`))
	c.startWorker()

	c.waitTrained(tr, 70)
	gateway.kill()
	t.Log("gateway SIGKILLed (2 of 2)")
	c.startGateway(addr)

	code, out := tr.wait(t, 4*time.Minute)
	require.Equal(t, 0, code, "trainer:\n%s", out)
	st, _ := tr.read(t)
	c.checkDeliveredOnce(ctx, set, count, st)
	t.Logf("the trainer retried %d calls while the gateway or worker was down", strings.Count(out, "; retry "))
	t.Logf("exactly once: %d rollouts, %d trained, %d acknowledged, %d delivered twice, %d lost (receipts checked against Temporal)",
		count, len(st.Trained), st.Acknowledged, st.Redelivered, count-len(st.Trained))
}

// TestTrainerLoopAcksUnderCrashes: the Python loop consumes a set of 60
// rollouts while acknowledgements are in flight when the processes die:
// the gateway is SIGKILLed (by a failpoint) after a batch of receipts is
// durable in the set's acknowledgement ledger and before it answers, and
// the worker in the middle of releasing a batch of acknowledged results
// (some released, the rest not, no report). Each is restarted unarmed.
// Afterwards every rollout was delivered to the trainer exactly once: none
// lost, none twice, and every one released.
func TestTrainerLoopAcksUnderCrashes(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	clientPython(t) // before the stack starts: the venv is made once per test binary
	c := newCluster(t)
	c.startTemporal()
	c.startEnvServer()
	c.startPolicyServer("--latency", "50ms")
	worker := c.startWorker(failpoint.EnvVar + "=" + failpoint.WorkerMidRelease + "=kill@1")
	gateway, url := c.startGatewayEnv("127.0.0.1:0", []string{failpoint.EnvVar + "=" + failpoint.GatewayAckRecordedBeforeAnswer + "=kill@2"})
	addr := strings.TrimPrefix(url, "http://") // a restarted gateway keeps its address, as behind a load balancer
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()

	const set, count = "py-ackcrash", 60
	tr := c.startTrainer(url, set, "--envs", "counter", "--count", fmt.Sprint(count), "--batch", "6", "--wait-ms", "1000")
	var gatewayKills, workerKills int
	c.waitFor("the trainer's end", nil, 5*time.Minute, func() bool {
		if gone, _ := gateway.exited(); gone {
			gatewayKills++
			t.Logf("gateway died at its failpoint (acknowledgement recorded, not answered); restarted")
			gateway, _ = c.startGateway(addr)
		}
		if gone, _ := worker.exited(); gone {
			workerKills++
			t.Logf("worker died at its failpoint (in the middle of a release batch); restarted")
			worker = c.startWorker()
		}
		gone, _ := tr.p.exited()
		return gone
	})
	code, out := tr.wait(t, time.Minute)
	require.Equal(t, 0, code, "trainer:\n%s", out)
	require.Equal(t, 1, gatewayKills, "the gateway's failpoint fired")
	require.Equal(t, 1, workerKills, "the worker's failpoint fired")
	st, _ := tr.read(t)
	c.checkDeliveredOnce(ctx, set, count, st) // every run completed too: released
	t.Logf("exactly once: %d rollouts, %d trained, %d acknowledged, %d delivered twice, %d lost; the trainer retried %d calls",
		count, len(st.Trained), st.Acknowledged, st.Redelivered, count-len(st.Trained), strings.Count(out, "; retry "))
}

// TestTrainerLoopAbortsOnDeadModel: with the policy server killed mid-set,
// the rollouts left retry their model calls forever; the gateway's watchdog
// turns the feed into set_stalled within its window, and the Python loop
// stops with the reason (exit status 3) instead of polling an empty feed.
func TestTrainerLoopAbortsOnDeadModel(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	clientPython(t) // before the stack starts: the venv is made once per test binary
	c := newCluster(t)
	c.startTemporal()
	c.startEnvServer()
	policy := c.startPolicyServer("--latency", "300ms")
	c.startWorker()
	const window = 8 * time.Second
	_, url := c.startGateway("127.0.0.1:0", "--stall-window", window.String())

	// Four quick rollouts finish before the model dies; eight long ones are
	// still running when it does.
	targets := []int{1, 1, 1, 1, 12, 12, 12, 12, 12, 12, 12, 12}
	rows := counterRows(t, c.dir, targets, 0)
	tr := c.startTrainer(url, "py-dead", "--dataset", rows, "--max-turns", "24", "--batch", "4", "--wait-ms", "1000")
	c.waitTrained(tr, 2)
	policy.kill()
	killed := time.Now()
	t.Log("policy server SIGKILLed")

	code, out := tr.wait(t, 3*time.Minute)
	require.Equal(t, 3, code, "the trainer must abort on a stalled set:\n%s", out)
	require.Contains(t, out, "aborting: set py-dead stalled: ")
	sum := trainerSummary(t, out)
	reason, _ := sum["aborted"].(string)
	require.NotEmpty(t, reason, "the abort names the reason")
	require.Contains(t, reason, "connection refused", "the reason carries the model endpoint's error")
	health, _ := sum["health"].(map[string]any)
	require.Equal(t, "stalled", health["state"], "the gateway's health at the abort")
	require.Positive(t, health["model_error_rate"], "the health counts the failing model calls")
	t.Logf("trainer aborted %s after the model endpoint died (watchdog window %s): %s",
		time.Since(killed).Round(100*time.Millisecond), window, reason)

	st, _ := tr.read(t)
	require.GreaterOrEqual(t, len(st.Trained), 2, "what finished before the model died was trained on")
	require.Less(t, len(st.Trained), len(targets), "the long rollouts never finished")
}
