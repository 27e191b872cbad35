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
	"github.com/turnstile-rl/turnstile/trainer"
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

// tokenInput is rollout i of the set. Even rollouts name a tool parser, so
// a model call a crash or a checkpoint cuts continues from its durable
// prefix; odd ones name none, so such a call starts over (and counts the
// prefix it threw away as regenerated).
func tokenInput(t *testing.T, i int) rollout.Input {
	in := setInput(t, tokenSet, tokenEnvs, i)
	in.Sampling = &rollout.Sampling{CaptureTokens: true}
	if tokenContinues(i) {
		in.Policy.ToolParser = rollout.ToolParserTurnstile
	}
	in.RequireAck = true
	return in
}

func tokenContinues(i int) bool { return i%2 == 0 }

// TestTokenExactRecovery is the token-exact recovery proof: a set
// of tool-calling rollouts with token capture is run (a) uninterrupted, (b)
// with the worker SIGKILLed at a failpoint mid-set, and (c) checkpointed
// mid-flight, everything killed and restored. The exports of (b) and (c)
// equal (a) byte for byte once the attempt and timing fields are removed:
// the trajectory (messages, token ids, log-probs, rewards, turns and heads)
// included.
//
// What is not compared byte for byte is the account of the run's own work:
// the line's generation_tokens (recovered, regenerated, regenerated_calls)
// and each assistant message's resumed_at and regenerated. A kill or a
// checkpoint cuts whichever model calls are streaming at that moment, and
// whether a cut call had a durable prefix yet depends on how far it had
// streamed, so these legitimately differ from the uninterrupted run's.
// They are checked for consistency instead (requireConsistentAccount): none
// in (a); the tokens generated the same as (a)'s; a call that continued
// (a rollout with a tool parser) never regenerated, one that could not
// continue never recovered; the counts add up with the messages' marks
// and stay within the generated tokens.
func TestTokenExactRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	start := time.Now()
	a, aAcc := tokenRunUninterrupted(t, ctx)
	t.Logf("(a) uninterrupted: %d lines, %d bytes normalised, in %s", len(a), totalLen(a), time.Since(start).Round(time.Millisecond))
	checkTokensCaptured(t, a)

	start = time.Now()
	b, bAcc := tokenRunWorkerKilled(t, ctx)
	t.Logf("(b) worker SIGKILLed: in %s; %s", time.Since(start).Round(time.Millisecond), accountSummary(bAcc))

	start = time.Now()
	cp, cAcc := tokenRunCheckpointRestore(t, ctx)
	t.Logf("(c) checkpoint, kill everything, restore: in %s; %s", time.Since(start).Round(time.Millisecond), accountSummary(cAcc))

	requireSameExport(t, a, b, "(b) worker killed at a failpoint")
	requireSameExport(t, a, cp, "(c) checkpoint, kill everything, restore")
	for id, acc := range aAcc {
		require.Equal(t, recoveryAccount{Generated: acc.Generated, GeneratedByMessage: acc.GeneratedByMessage}, acc, "(a) %s: an uninterrupted run recovers and regenerates nothing", id)
	}
	requireConsistentAccount(t, aAcc, bAcc, "(b) worker killed at a failpoint")
	requireConsistentAccount(t, aAcc, cAcc, "(c) checkpoint, kill everything, restore")
}

// recoveryAccount is what an export line says of the work its run did
// beyond the trajectory: generation_tokens and the assistant messages'
// marks (resumed_at, regenerated), with each assistant message's generated
// token count.
type recoveryAccount struct {
	Generated, Recovered, Regenerated, RegeneratedCalls int
	// GeneratedByMessage, ResumedAt and Regenerated are per assistant
	// message, in order.
	GeneratedByMessage []int
	ResumedAt          [][]int
	RegeneratedMsgs    []bool
}

// accountOf reads a line's recoveryAccount.
func accountOf(t *testing.T, line []byte) recoveryAccount {
	t.Helper()
	var l trainer.ExportLine
	require.NoError(t, json.Unmarshal(line, &l))
	var acc recoveryAccount
	if g := l.GenerationTokens; g != nil {
		acc.Generated, acc.Recovered, acc.Regenerated, acc.RegeneratedCalls = g.Generated, g.Recovered, g.Regenerated, g.RegeneratedCalls
	}
	for _, m := range l.Messages {
		if m.Role != "assistant" {
			continue
		}
		acc.GeneratedByMessage = append(acc.GeneratedByMessage, len(m.GenerationTokenIDs))
		if len(m.ResumedAt) > 0 || m.Regenerated {
			acc.ResumedAt = append(acc.ResumedAt, m.ResumedAt)
			acc.RegeneratedMsgs = append(acc.RegeneratedMsgs, m.Regenerated)
		}
	}
	return acc
}

// requireConsistentAccount checks a recovered run's account against the
// uninterrupted run's (see TestTokenExactRecovery).
func requireConsistentAccount(t *testing.T, want, got map[string]recoveryAccount, what string) {
	t.Helper()
	for _, id := range sortedKeys(want) {
		a, g := want[id], got[id]
		var i int
		_, err := fmt.Sscanf(id, tokenSet+"-%d", &i)
		require.NoError(t, err)
		require.Equal(t, a.Generated, g.Generated, "%s %s: the generated tokens are the trajectory's", what, id)
		require.Equal(t, a.GeneratedByMessage, g.GeneratedByMessage, "%s %s", what, id)
		require.LessOrEqual(t, g.Recovered, g.Generated, "%s %s: recovered tokens are part of the answers", what, id)
		require.LessOrEqual(t, g.Regenerated, g.Generated, "%s %s: a thrown-away prefix is a prefix of an answer", what, id)
		regenerated, resumed := 0, 0
		for k, at := range g.ResumedAt {
			if g.RegeneratedMsgs[k] {
				regenerated++
			}
			if len(at) > 0 {
				resumed++
			}
		}
		require.Equal(t, g.RegeneratedCalls, regenerated, "%s %s: regenerated_calls counts the messages marked regenerated", what, id)
		require.Equal(t, g.RegeneratedCalls > 0, g.Regenerated > 0, "%s %s: regenerated tokens come with a regenerated call", what, id)
		require.Equal(t, resumed > 0, g.Recovered > 0, "%s %s: recovered tokens come with a message resumed from its prefix", what, id)
		if tokenContinues(i) {
			require.Zero(t, g.RegeneratedCalls, "%s %s: a cut call with a tool parser continues its prefix", what, id)
		} else {
			require.Zero(t, resumed, "%s %s: a call without a tool parser cannot continue a prefix", what, id)
		}
	}
}

// accountSummary sums a run's accounts for the log.
func accountSummary(accs map[string]recoveryAccount) string {
	var recovered, regenerated, calls, resumed int
	for _, a := range accs {
		recovered, regenerated, calls = recovered+a.Recovered, regenerated+a.Regenerated, calls+a.RegeneratedCalls
		for _, at := range a.ResumedAt {
			if len(at) > 0 {
				resumed++
			}
		}
	}
	return fmt.Sprintf("%d calls resumed (%d tokens recovered), %d started over (%d tokens regenerated)", resumed, recovered, calls, regenerated)
}

// tokenNormalisedLine is normalisedLine without the run's account of its
// own work (recoveryAccount): the line's generation_tokens and the
// messages' resumed_at and regenerated.
func tokenNormalisedLine(t *testing.T, line []byte) []byte {
	t.Helper()
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(normalisedLine(t, line)))
	d.UseNumber() // numbers (log-probs) kept as written
	require.NoError(t, d.Decode(&m))
	delete(m, "generation_tokens")
	msgs, _ := m["messages"].([]any)
	for _, msg := range msgs {
		if mm, ok := msg.(map[string]any); ok {
			delete(mm, "resumed_at")
			delete(mm, "regenerated")
		}
	}
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return b
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

func sortedKeys[V any](m map[string]V) []string {
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
// lines by rollout id (each line parsed, the volatile fields and the
// recovery account deleted, and re-encoded canonically: encoding/json sorts
// object keys), and each line's recovery account.
func exportSet(t *testing.T, ctx context.Context, c *cluster, name string) (map[string][]byte, map[string]recoveryAccount) {
	t.Helper()
	file := filepath.Join(c.dir, name+".jsonl")
	out, err := c.starter(ctx, "export", "--set", tokenSet, "--file", file, "--transcript-dir", c.store)
	require.NoError(t, err, "starter export:\n%s", out)
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	lines := map[string][]byte{}
	accounts := map[string]recoveryAccount{}
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
		lines[id] = tokenNormalisedLine(t, sc.Bytes())
		accounts[id] = accountOf(t, sc.Bytes())
	}
	require.NoError(t, sc.Err())
	require.Len(t, lines, tokenCount, "%s: one line per rollout", name)
	return lines, accounts
}

func tokenRunUninterrupted(t *testing.T, ctx context.Context) (map[string][]byte, map[string]recoveryAccount) {
	c := newStack(t, "--latency", "5ms", "--jitter", "2ms", "--imperfection", "0.2")
	for i := range tokenCount {
		c.submit(ctx, tokenInput(t, i))
	}
	c.acknowledgeAll(ctx, tokenSet, tokenCount)
	lines, accounts := exportSet(t, ctx, c, "a")
	c.killAll()
	return lines, accounts
}

func tokenRunWorkerKilled(t *testing.T, ctx context.Context) (map[string][]byte, map[string]recoveryAccount) {
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
	lines, accounts := exportSet(t, ctx, c, "b")
	c.killAll()
	return lines, accounts
}

func tokenRunCheckpointRestore(t *testing.T, ctx context.Context) (map[string][]byte, map[string]recoveryAccount) {
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
	lines, accounts := exportSet(t, ctx, c, "c")
	c.killAll()
	return lines, accounts
}
