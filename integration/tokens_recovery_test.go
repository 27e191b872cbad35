package integration_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// tokenSet is the set name of every run of TestTokenExactRecovery: each run
// has its own cluster, so the rollout ids (and everything derived from them)
// are the same in the three exports.
const (
	tokenSet   = "tok"
	tokenCount = 20
)

// tokenEnvs are tool-calling environments.
var tokenEnvs = []string{"counter", "workplace"}

// volatileExportFields are the top-level export fields that legitimately
// differ between an uninterrupted run and a recovered one: the attempt that
// finished, the attempts with their start and close times, the receipt
// (which names the attempt), and whether the result is still held.
var volatileExportFields = []string{"attempt", "attempts", "receipt", "held"}

func tokenInput(t *testing.T, i int) rollout.Input {
	in := setInput(t, tokenSet, tokenEnvs, i)
	in.Sampling = &rollout.Sampling{CaptureTokens: true}
	in.RequireAck = true
	return in
}

// TestTokenExactRecovery is the token-exact recovery proof: a set
// of tool-calling rollouts with token capture is run (a) uninterrupted, (b)
// with the worker SIGKILLed at a failpoint mid-set, and (c) checkpointed
// mid-flight, everything killed and restored. The exports of (b) and (c)
// equal (a) byte for byte once the attempt and timing fields are removed:
// messages, token ids, log-probs, rewards, turns and heads included.
func TestTokenExactRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	start := time.Now()
	a := tokenRunUninterrupted(t, ctx)
	t.Logf("(a) uninterrupted: %d lines, %d bytes normalised, in %s", len(a), totalLen(a), time.Since(start).Round(time.Millisecond))
	checkTokensCaptured(t, a)

	start = time.Now()
	b := tokenRunWorkerKilled(t, ctx)
	t.Logf("(b) worker SIGKILLed: in %s", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	cp := tokenRunCheckpointRestore(t, ctx)
	t.Logf("(c) checkpoint, kill everything, restore: in %s", time.Since(start).Round(time.Millisecond))

	requireSameExport(t, a, b, "(b) worker killed at a failpoint")
	requireSameExport(t, a, cp, "(c) checkpoint, kill everything, restore")
}

func totalLen(lines map[string][]byte) int {
	n := 0
	for _, l := range lines {
		n += len(l)
	}
	return n
}

// requireSameExport compares two normalised exports byte for byte: the
// lines sorted by rollout id, joined.
func requireSameExport(t *testing.T, want, got map[string][]byte, what string) {
	t.Helper()
	require.Equal(t, sortedKeys(want), sortedKeys(got), "%s: the same rollouts", what)
	for _, id := range sortedKeys(want) {
		require.Equal(t, string(got[id]), string(want[id]), "%s: the normalised export of %s differs from the uninterrupted run's (%d vs %d bytes)%s", what, id, len(want[id]), len(got[id]), firstDifference(want[id], got[id]))
	}
	require.True(t, bytes.Equal(joinExport(want), joinExport(got)), "%s: export differs", what)
}

// firstDifference shows where two long lines first differ, with context.
func firstDifference(a, b []byte) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	from := max(0, i-120)
	window := func(x []byte) string { return string(x[min(from, len(x)):min(i+120, len(x))]) }
	return fmt.Sprintf("\nfirst difference at byte %d:\n  want …%s…\n  got  …%s…", i, window(a), window(b))
}

func sortedKeys(m map[string][]byte) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func joinExport(m map[string][]byte) []byte {
	var buf bytes.Buffer
	for _, id := range sortedKeys(m) {
		buf.Write(m[id])
		buf.WriteByte('\n')
	}
	return buf.Bytes()
}

// checkTokensCaptured: the comparison is only meaningful if the exports
// carry token ids and log-probs.
func checkTokensCaptured(t *testing.T, lines map[string][]byte) {
	t.Helper()
	for id, l := range lines {
		var line struct {
			Status   string `json:"status"`
			Tokens   string `json:"tokens"`
			Messages []struct {
				Role     string    `json:"role"`
				Gen      []int64   `json:"generation_token_ids"`
				LogProbs []float64 `json:"generation_log_probs"`
				Prompt   []int64   `json:"prompt_token_ids"`
			} `json:"messages"`
		}
		require.NoError(t, json.Unmarshal(l, &line))
		require.Equal(t, "completed", line.Status, "%s", id)
		require.Equal(t, "present", line.Tokens, "%s: token capture", id)
		for _, m := range line.Messages {
			if m.Role != "assistant" {
				continue
			}
			require.NotEmpty(t, m.Gen, "%s: generation token ids", id)
			require.Len(t, m.LogProbs, len(m.Gen), "%s: a log-prob per generated token", id)
			require.NotEmpty(t, m.Prompt, "%s: prompt token ids", id)
		}
	}
}

// exportSet exports the set through the starter and returns its normalised
// lines by rollout id: each line parsed, the volatile fields deleted, and
// re-encoded canonically (encoding/json sorts object keys).
func exportSet(t *testing.T, ctx context.Context, c *cluster, name string) map[string][]byte {
	t.Helper()
	file := filepath.Join(c.dir, name+".jsonl")
	out, err := c.starter(ctx, "export", "--set", tokenSet, "--file", file, "--transcript-dir", c.store)
	require.NoError(t, err, "starter export:\n%s", out)
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	lines := map[string][]byte{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var line struct {
			RolloutID string `json:"rollout_id"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &line))
		id := line.RolloutID
		require.NotEmpty(t, id)
		require.NotContains(t, lines, id, "%s exported twice", id)
		lines[id] = normalisedLine(t, sc.Bytes())
	}
	require.NoError(t, sc.Err())
	require.Len(t, lines, tokenCount, "%s: one line per rollout", name)
	return lines
}

func tokenRunUninterrupted(t *testing.T, ctx context.Context) map[string][]byte {
	c := newStack(t, "--latency", "5ms", "--jitter", "2ms", "--imperfection", "0.2")
	for i := range tokenCount {
		c.submit(ctx, tokenInput(t, i))
	}
	c.acknowledgeAll(ctx, tokenSet, tokenCount)
	lines := exportSet(t, ctx, c, "a")
	c.killAll()
	return lines
}

func tokenRunWorkerKilled(t *testing.T, ctx context.Context) map[string][]byte {
	c := newCluster(t)
	c.startTemporal()
	c.startEnvServer()
	c.startPolicyServer("--latency", "5ms", "--jitter", "2ms", "--imperfection", "0.2")
	doomed := c.startWorker("TURNSTILE_FAILPOINTS=" + failpoint.WorkerEnvAppliedBeforeReport + "=kill@15")
	for i := range tokenCount {
		c.submit(ctx, tokenInput(t, i))
	}
	c.replaceWhenDead(ctx, doomed)
	res := c.acknowledgeAll(ctx, tokenSet, tokenCount)
	for _, r := range res {
		require.Equal(t, 0, r.Attempt, "a worker crash needs no new attempt")
	}
	lines := exportSet(t, ctx, c, "b")
	c.killAll()
	return lines
}

func tokenRunCheckpointRestore(t *testing.T, ctx context.Context) map[string][]byte {
	c := newCluster(t)
	c.startTemporal()
	c.startEnvServer()
	// A slow model keeps the rollouts between turns at the cut; its answers
	// depend only on the messages and the seed.
	c.startPolicyServer("--latency", "500ms", "--jitter", "50ms", "--imperfection", "0.2")
	c.startWorker()
	for i := range tokenCount {
		c.submit(ctx, tokenInput(t, i))
	}
	c.waitFor("set mid-flight", nil, 2*time.Minute, func() bool {
		busy := 0
		for i := range tokenCount {
			info, err := c.dataClient(c.envURL).Session(ctx, fmt.Sprintf("%s-%04d", tokenSet, i))
			if err == nil && info.Revision >= 1 && !info.Retired {
				busy++
			}
		}
		return 2*busy >= tokenCount
	})
	root := filepath.Join(c.dir, "checkpoints")
	cpRun, err := c.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: checkpoint.CheckpointWorkflowID("cp-tok"), TaskQueue: rollout.TaskQueue,
	}, checkpoint.CheckpointWorkflowName, checkpoint.CheckpointInput{
		CheckpointID: "cp-tok", Set: tokenSet, Root: root, Participants: []string{c.envURL}, Timeout: "60s",
	})
	require.NoError(t, err)
	var cp checkpoint.CheckpointResult
	require.NoError(t, cpRun.Get(ctx, &cp))
	t.Logf("checkpoint: %d members, %d parked, %d completed unacknowledged", cp.Members, cp.Parked, cp.CompletedUnacked)
	require.Equal(t, tokenCount, cp.Members+cp.Closed)
	require.Positive(t, cp.Parked, "some rollouts parked mid-episode")

	// Everything dies; only the checkpoint directory survives.
	c.killAll()
	require.NoError(t, os.RemoveAll(c.store))

	c.startTemporal()
	c.startEnvServer()
	c.startPolicyServer("--latency", "5ms", "--jitter", "2ms", "--imperfection", "0.2")
	c.startWorker()
	rsRun, err := c.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: checkpoint.RestoreWorkflowID("cp-tok"), TaskQueue: rollout.TaskQueue,
	}, checkpoint.RestoreWorkflowName, checkpoint.RestoreInput{CheckpointID: "cp-tok", Root: root, Participants: []string{c.envURL}})
	require.NoError(t, err)
	var rs checkpoint.RestoreResult
	require.NoError(t, rsRun.Get(ctx, &rs))
	t.Logf("restore: %d restored from their boundary, %d started over, %d offered again", rs.Restored, rs.StartedOver, rs.OfferedAgain)
	require.Positive(t, rs.Restored, "some rollouts continue from their boundary")
	res := c.acknowledgeAll(ctx, tokenSet, tokenCount)
	attempts := 0
	for _, r := range res {
		if r.Attempt > 0 {
			attempts++
		}
	}
	require.Positive(t, attempts, "some rollouts finished as a new attempt")
	lines := exportSet(t, ctx, c, "c")
	c.killAll()
	return lines
}
