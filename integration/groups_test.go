package integration_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/turnstile-rl/turnstile/internal/schemacheck"
	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// groupRows: a group whose environment never fails; one whose sessions
// fail their rollout's first attempt (the counter's refuse_verify "first":
// each repeat is retried once); one whose sessions always fail.
const groupRows = `{"id":"steady","env":"counter","task":{"target":2}}
{"id":"flaky","env":"counter","task":{"target":3,"refuse_verify":"first"}}
{"id":"broken","env":"counter","task":{"target":2,"refuse_verify":"always"}}
`

// TestGroupRetriesOnServer: a dataset set (3 rows × 2 repeats, group retry
// budget 2) on the real dev server. The flaky group's environment failures
// are retried as new attempts with fresh sessions and the group completes;
// the broken group spends its budget, fails as a whole with its reason, and
// its other rollout is cancelled or refused. The export says so per group,
// and the trainer's view (--complete-groups) holds the two complete groups
// whole and nothing of the failed one.
func TestGroupRetriesOnServer(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	c := newStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	rows := filepath.Join(c.dir, "rows.jsonl")
	require.NoError(t, os.WriteFile(rows, []byte(groupRows), 0o600))
	out, err := c.starter(ctx, "submit", "--set", "g1", "--tasks", rows, "--repeats", "2", "--group-retries", "2", "--wait", "--timeout", "3m")
	require.NoError(t, err, "starter submit:\n%s", out)

	lines, _ := exportLines(t, ctx, c, "g1", "all")
	require.Len(t, lines, 6, "one line per rollout")
	for _, id := range []string{"g1-steady-r0", "g1-steady-r1"} {
		l := lines[id]
		require.Equal(t, "completed", l.Status, id)
		require.Equal(t, trainer.ExportGroup{Status: "complete", Size: 2, Retries: 0, RetryBudget: 2}, *l.GroupStatus, id)
		require.Len(t, l.Attempts, 1, id)
	}
	for _, id := range []string{"g1-flaky-r0", "g1-flaky-r1"} {
		l := lines[id]
		require.Equal(t, "completed", l.Status, id)
		require.Equal(t, trainer.ExportGroup{Status: "complete", Size: 2, Retries: 2, RetryBudget: 2}, *l.GroupStatus, id)
		require.Equal(t, 1, l.Attempt, "%s finished as its retried attempt", id)
		require.Equal(t, []string{"continued_as_new", "completed"}, attemptStatuses(l), id)
		require.Equal(t, 1.0, *l.Reward, id)
		// The retried attempt started over from the seed: one episode's
		// steps, not two.
		require.True(t, l.StepRewards.Available, id)
		require.Equal(t, []float64{0, 0, 0}, l.StepRewards.Values, id)
		require.True(t, l.VerifyDetails.Available, id)
		require.JSONEq(t, `{"value":3,"target":3}`, string(l.VerifyDetails.Details), id)
		info, err := protocol.NewDataClient(c.envURL, c.dataToken, nil).Session(ctx, id)
		require.NoError(t, err)
		require.Equal(t, 1, info.Attempt, "%s: the environment holds the fresh session of attempt 1", id)
	}
	var reason string
	for _, id := range []string{"g1-broken-r0", "g1-broken-r1"} {
		l := lines[id]
		require.Contains(t, []string{"failed", "canceled"}, l.Status, id)
		require.Equal(t, "failed", l.GroupStatus.Status, id)
		require.Equal(t, 2, l.GroupStatus.Retries, id)
		reason = l.GroupStatus.Reason
		require.Nil(t, l.Reward, id)
	}
	require.Contains(t, reason, "group retry budget (2) exhausted: g1-broken-r")
	require.Contains(t, reason, `verify: environment verify g1-broken-r`)
	require.Contains(t, reason, `422 bad_state: counter verify refused (refuse_verify "always"): the environment failed`)
	t.Logf("failed group's reason: %s", reason)

	// The rollout whose failure found the budget spent says why, searchably.
	failedRollout := ""
	for _, id := range []string{"g1-broken-r0", "g1-broken-r1"} {
		if lines[id].Status == "failed" {
			failedRollout = id
		}
	}
	require.NotEmpty(t, failedRollout, "one broken rollout failed on its own report")
	err = c.client.GetWorkflow(ctx, rollout.WorkflowID(failedRollout), "").Get(ctx, nil)
	var ae *temporal.ApplicationError
	require.True(t, errors.As(err, &ae), "%v", err)
	require.Equal(t, rollout.ErrGroupFailed, ae.Type(), "%v", err)
	require.Contains(t, ae.Error(), "group broken of set g1 failed: group retry budget (2) exhausted")

	// Group status is a search attribute of each group's ledger.
	countLedgers := func(status string) int64 {
		q := fmt.Sprintf(`WorkflowType=%q AND WorkflowId STARTS_WITH %q AND %s=%q`, rollout.GroupWorkflowName, rollout.GroupWorkflowIDPrefix("g1"), rollout.SARolloutGroupStatus, status)
		var n int64
		c.waitFor("ledgers "+status, nil, time.Minute, func() bool {
			resp, err := c.client.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: q})
			n = resp.GetCount()
			return err == nil && n > 0
		})
		return n
	}
	require.Equal(t, int64(2), countLedgers("complete"))
	require.Equal(t, int64(1), countLedgers("failed"))

	// The trainer's view: whole complete groups, nothing of the failed one.
	view, _ := exportLines(t, ctx, c, "g1", "trainer", "--complete-groups")
	require.Equal(t, []string{"g1-flaky-r0", "g1-flaky-r1", "g1-steady-r0", "g1-steady-r1"}, sortedIDs(view))

	// The histories replay against the current code; with
	// TURNSTILE_UPDATE_REPLAY=1 they become the fixtures that
	// rollout.TestReplayRecordedHistories replays without a server.
	retried := c.runIDs(ctx, fmt.Sprintf(`WorkflowId=%q AND ExecutionStatus="ContinuedAsNew"`, rollout.WorkflowID("g1-flaky-r0")))
	require.Len(t, retried, 1, "attempt 0 of g1-flaky-r0 continued as its retry")
	c.recordHistory(ctx, rollout.WorkflowID("g1-flaky-r0"), retried[0], "rollout-group-retry.json")
	c.recordHistory(ctx, rollout.GroupWorkflowID("g1", "broken"), "", "group-ledger-failed.json")
	c.recordHistory(ctx, rollout.GroupWorkflowID("g1", "flaky"), "", "group-ledger-complete.json")
}

// runIDs lists the run ids visibility finds for query.
func (c *cluster) runIDs(ctx context.Context, query string) []string {
	c.t.Helper()
	resp, err := c.client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query})
	require.NoError(c.t, err)
	var ids []string
	for _, e := range resp.GetExecutions() {
		ids = append(ids, e.GetExecution().GetRunId())
	}
	return ids
}

// recordHistory exports a run's history with the Temporal CLI, replays it
// against the current Rollout and RolloutGroup code, and with
// TURNSTILE_UPDATE_REPLAY=1 writes it to rollout/testdata/<fixture>.
func (c *cluster) recordHistory(ctx context.Context, workflowID, runID, fixture string) {
	c.t.Helper()
	args := []string{"workflow", "show", "--workflow-id", workflowID, "--output", "json"}
	if runID != "" {
		args = append(args, "--run-id", runID)
	}
	out, err := c.temporalCLI(ctx, args...)
	require.NoError(c.t, err, out)
	path := filepath.Join(c.dir, fixture)
	require.NoError(c.t, os.WriteFile(path, []byte(out), 0o644))
	r := worker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(rollout.Rollout, workflow.RegisterOptions{Name: rollout.WorkflowName})
	r.RegisterWorkflowWithOptions(rollout.GroupLedger, workflow.RegisterOptions{Name: rollout.GroupWorkflowName})
	require.NoError(c.t, r.ReplayWorkflowHistoryFromJSONFile(nil, path), "replay of %s", workflowID)
	if os.Getenv("TURNSTILE_UPDATE_REPLAY") == "1" {
		require.NoError(c.t, os.WriteFile(filepath.Join(bins.root, "workflows", "rollout", "testdata", fixture), []byte(out), 0o644))
	}
}

// TestDatasetGroupsCheckpointRestore: a dataset set with groups is
// checkpointed mid-flight, everything is killed (the group ledgers die with
// the in-memory server) and the checkpoint restored. Every restored rollout
// keeps its group, the groups complete again, and the export equals the
// uninterrupted run's once the attempt and timing fields are removed.
func TestDatasetGroupsCheckpointRestore(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	rowIDs, repeats := []string{"a", "b", "c"}, 3
	const rows = `{"id":"a","env":"counter","task":{"target":4}}
{"id":"b","env":"blackjack","task":{"rounds":3}}
{"id":"c","env":"counter","task":{"target":6,"start":1}}
`
	var ids []string
	for _, row := range rowIDs {
		for k := range repeats {
			ids = append(ids, trainer.DatasetRolloutID("ds", row, k))
		}
	}
	want := runDatasetSet(t, ctx, rows, ids, repeats, false)
	got := runDatasetSet(t, ctx, rows, ids, repeats, true)
	requireSameExport(t, want, got, "dataset set checkpointed, killed and restored")
	for _, id := range ids {
		var line trainer.ExportLine
		require.NoError(t, json.Unmarshal(got[id], &line))
		require.Equal(t, "complete", line.GroupStatus.Status, id)
		require.True(t, line.StepRewards.Available, id)
		require.True(t, line.VerifyDetails.Available, id)
		if line.Env == "blackjack" {
			sum := 0.0
			for _, r := range line.StepRewards.Values {
				sum += r
			}
			require.InDelta(t, *line.Reward, sum, 1e-9, "%s: a gym rollout's reward is its step rewards' sum", id)
		}
	}
}

// runDatasetSet runs a dataset set that holds its results and returns its
// normalised export; with cut, it checkpoints the set mid-flight, kills
// everything, and restores it first.
func runDatasetSet(t *testing.T, ctx context.Context, rows string, ids []string, repeats int, cut bool) map[string][]byte {
	c := newCluster(t)
	c.startTemporal()
	c.startEnvServer()
	latency := "5ms"
	if cut {
		latency = "400ms" // rollouts between turns at the cut
	}
	c.startPolicyServer("--latency", latency, "--imperfection", "0.2")
	c.startWorker()
	path := filepath.Join(c.dir, "rows.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(rows), 0o600))
	out, err := c.starter(ctx, "submit", "--set", "ds", "--tasks", path, "--repeats", fmt.Sprint(repeats), "--require-ack")
	require.NoError(t, err, "starter submit:\n%s", out)
	if cut {
		cutAndRestore(t, ctx, c, ids)
	}
	c.waitSetSettled(ctx, "ds", len(ids))
	_, raw := exportLines(t, ctx, c, "ds", map[bool]string{false: "a", true: "c"}[cut])
	require.Equal(t, ids, sortedKeys(raw))
	norm := map[string][]byte{}
	for id, l := range raw {
		norm[id] = normalisedLine(t, l)
	}
	c.killAll()
	return norm
}

// cutAndRestore checkpoints set ds once half its rollouts are mid-episode,
// kills everything (transcripts too) and restores the checkpoint.
func cutAndRestore(t *testing.T, ctx context.Context, c *cluster, ids []string) {
	count := len(ids)
	c.waitFor("set mid-flight", nil, 2*time.Minute, func() bool {
		busy := 0
		for _, id := range ids {
			info, err := protocol.NewDataClient(c.envURL, c.dataToken, nil).Session(ctx, id)
			if err == nil && info.Revision >= 1 && !info.Retired {
				busy++
			}
		}
		return 2*busy >= count
	})
	root := filepath.Join(c.dir, "checkpoints")
	run, err := c.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: checkpoint.CheckpointWorkflowID("cp-ds"), TaskQueue: rollout.TaskQueue},
		checkpoint.CheckpointWorkflowName, checkpoint.CheckpointInput{CheckpointID: "cp-ds", Set: "ds", Root: root, Participants: []string{c.envURL}, Timeout: "60s"})
	require.NoError(t, err)
	var cp checkpoint.CheckpointResult
	require.NoError(t, run.Get(ctx, &cp))
	require.Equal(t, count, cp.Members+cp.Closed)
	require.Positive(t, cp.Parked, "some rollouts parked mid-episode")

	c.killAll()
	require.NoError(t, os.RemoveAll(c.store))
	c.startTemporal()
	c.startEnvServer()
	c.startPolicyServer("--latency", "5ms", "--imperfection", "0.2")
	c.startWorker()
	run, err = c.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: checkpoint.RestoreWorkflowID("cp-ds"), TaskQueue: rollout.TaskQueue},
		checkpoint.RestoreWorkflowName, checkpoint.RestoreInput{CheckpointID: "cp-ds", Root: root, Participants: []string{c.envURL}})
	require.NoError(t, err)
	var rs checkpoint.RestoreResult
	require.NoError(t, run.Get(ctx, &rs))
	t.Logf("restore: %d restored from their boundary, %d started over, %d offered again", rs.Restored, rs.StartedOver, rs.OfferedAgain)
	require.Positive(t, rs.Restored)
}

// exportLines exports set through the starter (with extra flags) and
// returns its lines by rollout id, each checked against the schema, parsed
// and as written.
func exportLines(t *testing.T, ctx context.Context, c *cluster, set, name string, extra ...string) (map[string]trainer.ExportLine, map[string][]byte) {
	t.Helper()
	file := filepath.Join(c.dir, set+"-"+name+".jsonl")
	out, err := c.starter(ctx, append([]string{"export", "--set", set, "--file", file, "--transcript-dir", c.store}, extra...)...)
	require.NoError(t, err, "starter export:\n%s", out)
	t.Logf("starter export %s: %s", name, strings.TrimSpace(out))
	doc, err := os.ReadFile(filepath.Join(bins.root, "docs", "trajectory.schema.json"))
	require.NoError(t, err)
	schema, err := schemacheck.Compile(doc)
	require.NoError(t, err)
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	lines, raw := map[string]trainer.ExportLine{}, map[string][]byte{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		require.Empty(t, schema.Validate(sc.Bytes()), "line does not match docs/trajectory.schema.json:\n%s", sc.Bytes())
		var l trainer.ExportLine
		require.NoError(t, json.Unmarshal(sc.Bytes(), &l))
		require.NotContains(t, lines, l.RolloutID, "exported twice")
		lines[l.RolloutID] = l
		raw[l.RolloutID] = append([]byte(nil), sc.Bytes()...)
	}
	require.NoError(t, sc.Err())
	return lines, raw
}

// normalisedLine is an export line without its volatile fields, re-encoded
// canonically (encoding/json sorts object keys).
func normalisedLine(t *testing.T, line []byte) []byte {
	t.Helper()
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(line))
	d.UseNumber() // numbers (log-probs) kept as written
	require.NoError(t, d.Decode(&m))
	for _, k := range volatileExportFields {
		delete(m, k)
	}
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return b
}

func attemptStatuses(l trainer.ExportLine) []string {
	var out []string
	for _, a := range l.Attempts {
		out = append(out, a.Status)
	}
	return out
}

func sortedIDs(m map[string]trainer.ExportLine) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}
