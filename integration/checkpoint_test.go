package integration_test

import (
	"context"
	"encoding/json"
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

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/catalog"
	"github.com/turnstile-rl/turnstile/internal/artifact"
	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/internal/stack"
	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// maxTurns per environment: enough for a perfect scripted policy to finish.
var maxTurns = map[string]int{"counter": 16, "blackjack": 64, "workplace": 24, "sandbox": 12, "notes": 12}

// setInput builds rollout i of a set over envList (round-robin); tasks and
// seeds depend only on i, so two sets are comparable rollout by rollout.
func setInput(t testing.TB, set string, envList []string, i int) rollout.Input {
	env := envList[i%len(envList)]
	task, err := catalog.Task(env, 7, i)
	require.NoError(t, err)
	return rollout.Input{
		RolloutID: fmt.Sprintf("%s-%04d", set, i),
		Set:       set,
		Task:      task,
		Env:       rollout.EnvRef{Name: env},
		Policy:    rollout.PolicyRef{Model: "scripted-" + env},
		Seed:      int64(7000 + i),
		Limits:    rollout.Limits{MaxTurns: maxTurns[env]},
	}
}

// TestCheckpointKillEverythingRestore is the whole recovery story on real
// processes: a set is mid-flight, a checkpoint is cut, then the worker, the
// environment server and the in-memory Temporal dev server are SIGKILLed and
// the transcript store is deleted. Fresh processes restore the checkpoint;
// every rollout must end with the trajectory and reward of an uninterrupted
// run of the same seeds, with no mutation applied twice, no result lost or
// duplicated, and attempt N refused.
func TestCheckpointKillEverythingRestore(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	cases := []struct {
		name  string
		envs  []string
		count int
		opts  recoverOptions
	}{
		{"counter", []string{"counter"}, 20, recoverOptions{}},
		{"mixed", []string{"counter", "blackjack", "workplace", "sandbox"}, 40, recoverOptions{twoServers: true}},
		// The crash matrix of the coordinator: the worker running the
		// checkpoint or the restore dies at its failpoint; a fresh worker
		// finishes the same workflow.
		{"worker-dies-between-checkpoint-files", []string{"counter"}, 20, recoverOptions{checkpointKill: failpoint.CheckpointBetweenFiles + "=kill@3"}},
		{"worker-dies-after-restore-validated", []string{"counter"}, 20, recoverOptions{restoreKill: failpoint.RestoreAfterValidate + "=kill@1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			recoverSet(t, tc.envs, tc.count, tc.opts)
		})
	}
}

// recoverOptions vary the recovery scenario.
type recoverOptions struct {
	// twoServers spreads the set over two environment servers; the second
	// comes back on a new address, which the restore maps.
	twoServers bool
	// checkpointKill / restoreKill arm the worker that runs the checkpoint /
	// the restore with a failpoint spec; the test then starts a fresh worker.
	checkpointKill, restoreKill string
	// python hosts the set on the Python participant instead of envserver.
	python bool
}

// replaceWhenDead waits until p dies at its failpoint (SIGKILL) and starts a
// fresh worker in its place.
func (c *cluster) replaceWhenDead(ctx context.Context, p *proc) {
	c.t.Helper()
	select {
	case <-p.done:
	case <-ctx.Done():
		require.Fail(c.t, "the armed worker never reached its failpoint")
	}
	require.ErrorContains(c.t, p.Err(), "killed", "the worker died by SIGKILL at its failpoint")
	c.startWorker()
}

// startSecondEnvServer starts another environment server on a free port and
// returns its base URL.
func (c *cluster) startSecondEnvServer() string {
	c.t.Helper()
	url, _ := c.startEnvServerAs("envserver-2", "env-1")
	return url
}

// startNamedEnvServer starts an environment server named name on a free
// port and returns its base URL and process.
func (c *cluster) startNamedEnvServer(name string) (string, *proc) {
	c.t.Helper()
	return c.startEnvServerAs("envserver-"+name, name)
}

// startEnvServerAs starts an environment server named name, its process
// called proc (what killProc takes), on a free port.
func (c *cluster) startEnvServerAs(procName, name string, extraArgs ...string) (string, *proc) {
	c.t.Helper()
	var url string
	sp, u, err := c.launch.StartServer(context.Background(), procName, filepath.Join(bins.dir, "envserver"),
		append([]string{"--listen", "127.0.0.1:0", "--control-token", c.token, "--name", name}, extraArgs...),
		[]string{protocol.DataTokenEnvVar + "=" + c.dataToken}, stack.EnvHealth, 30*time.Second)
	p := c.started(sp, err, func() { url = u })
	return url, p
}

func recoverSet(t *testing.T, envList []string, count int, opts recoverOptions) {
	twoServers := opts.twoServers
	c := newCluster(t)
	c.startTemporal()
	c.startParticipant(opts)
	// server gives each rollout its environment server: "" is the worker's
	// default (the first server).
	second := ""
	if twoServers {
		second = c.startSecondEnvServer()
	}
	server := func(i int) string {
		if twoServers && i%2 == 1 {
			return second
		}
		return ""
	}
	input := func(set string, i int) rollout.Input {
		in := setInput(t, set, envList, i)
		in.Env.URL = server(i)
		return in
	}
	participantURLs := func() []string {
		if twoServers {
			return []string{c.envURL, second}
		}
		return []string{c.envURL}
	}
	applied := func() int64 {
		var n int64
		for _, u := range participantURLs() {
			st, err := c.dataClient(u).Stats(context.Background())
			require.NoError(t, err)
			n += st.Applied
		}
		return n
	}
	urlOf := func(i int) string {
		if u := server(i); u != "" {
			return u
		}
		return c.envURL
	}
	policy := c.startPolicyServer("--latency", "20ms", "--jitter", "5ms", "--imperfection", "0.2")
	first := c.startWorker()
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()

	// 1. The uninterrupted baseline.
	var baseRuns []client.WorkflowRun
	for i := range count {
		baseRuns = append(baseRuns, c.submit(ctx, input("base", i)))
	}
	baseline := c.results(ctx, baseRuns)
	baseRevisions := c.revisions(ctx, "base", count, urlOf)
	before := applied()

	// 2. The same set, held for acknowledgement, checkpointed mid-flight. A
	// slower model (same answers: they depend only on the messages and the
	// seed) keeps most rollouts between turns at the cut.
	policy.kill()
	c.startPolicyServer("--latency", "1s", "--jitter", "100ms", "--imperfection", "0.2")
	var armed *proc
	if opts.checkpointKill != "" {
		// The armed worker must be the only one, or the commit may run
		// elsewhere and the failpoint never be reached.
		first.kill()
		armed = c.startWorker("TURNSTILE_FAILPOINTS=" + opts.checkpointKill)
	}
	for i := range count {
		in := input("rec", i)
		in.RequireAck = true
		c.submit(ctx, in)
	}
	// Cut when the set is mid-flight: at least half of its rollouts, and at
	// least one of every environment, have applied an operation and are not
	// finished. Asking for a state rather than a time keeps the test
	// meaningful on a loaded machine, where starts spread out.
	c.waitFor("set mid-flight", nil, 2*time.Minute, func() bool {
		busy, busyEnv := 0, map[string]bool{}
		for i := range count {
			info, err := c.dataClient(urlOf(i)).Session(ctx, fmt.Sprintf("rec-%04d", i))
			if err == nil && info.Revision >= 1 && !info.Retired {
				busy++
				busyEnv[info.Env] = true
			}
		}
		return 2*busy >= count && len(busyEnv) == len(envList)
	})
	t.Logf("cut after %d mutations of the set", applied()-before)
	root := filepath.Join(c.dir, "checkpoints")
	cpRun, err := c.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: checkpoint.CheckpointWorkflowID("cp-1"), TaskQueue: rollout.TaskQueue,
	}, checkpoint.CheckpointWorkflowName, checkpoint.CheckpointInput{
		CheckpointID: "cp-1", Set: "rec", Root: root, Participants: participantURLs(), Timeout: "60s",
	})
	require.NoError(t, err)
	if armed != nil {
		c.replaceWhenDead(ctx, armed)
	}
	var cp checkpoint.CheckpointResult
	require.NoError(t, cpRun.Get(ctx, &cp))
	t.Logf("checkpoint: %d members, %d parked, %d completed unacknowledged, %d bytes, cut %d ms, total %d ms",
		cp.Members, cp.Parked, cp.CompletedUnacked, cp.Bytes, cp.CutMillis, cp.TotalMillis)
	require.Equal(t, count, cp.Members+cp.Closed)
	records := readRecords(t, root, "cp-1")
	require.Len(t, records, cp.Members)

	// 3. Everything dies; only the checkpoint directory survives.
	c.killAll()
	require.NoError(t, os.RemoveAll(c.store))

	// 4. Fresh processes, then the restore.
	c.startTemporal()
	c.startParticipant(opts)
	old := second
	if twoServers {
		second = c.startSecondEnvServer() // a new address
		require.NotEqual(t, old, second)
	}
	c.startPolicyServer("--latency", "20ms", "--jitter", "5ms", "--imperfection", "0.2")
	armed = nil
	if opts.restoreKill != "" {
		armed = c.startWorker("TURNSTILE_FAILPOINTS=" + opts.restoreKill)
	} else {
		c.startWorker()
	}
	restoreStart := time.Now()
	rsRun, err := c.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: checkpoint.RestoreWorkflowID("cp-1"), TaskQueue: rollout.TaskQueue,
	}, checkpoint.RestoreWorkflowName, checkpoint.RestoreInput{CheckpointID: "cp-1", Root: root, Participants: participantURLs()})
	require.NoError(t, err)
	if armed != nil {
		c.replaceWhenDead(ctx, armed)
	}
	var rs checkpoint.RestoreResult
	require.NoError(t, rsRun.Get(ctx, &rs))
	t.Logf("restore: %d restored from their boundary, %d started over, %d offered again, in %s",
		rs.Restored, rs.StartedOver, rs.OfferedAgain, time.Since(restoreStart).Round(time.Millisecond))
	require.Equal(t, cp.Members, rs.Restored+rs.StartedOver+rs.OfferedAgain)

	// Fencing: attempt 0 is refused once attempt 1 is installed.
	for id, rec := range records {
		if rec.Result != nil || envs.EffectiveMode(rec.Boundary.EnvMode) != envs.ModeExportRestore {
			continue
		}
		var i int
		fmt.Sscanf(strings.TrimPrefix(id, "rec-"), "%d", &i)
		env := c.dataClient(urlOf(i))
		_, err := env.Operate(ctx, protocol.OperateRequest{
			Identity:         protocol.Identity{RolloutID: id, Attempt: rec.Boundary.Attempt, RequestID: id + "/stale-probe"},
			ExpectedRevision: rec.Boundary.Revision, Tool: "step", Arguments: json.RawMessage(`{}`),
		})
		var re *protocol.RemoteError
		require.ErrorAs(t, err, &re, "rollout %s", id)
		require.Equal(t, protocol.CodeStaleAttempt, re.Code, "rollout %s: %v", id, err)
	}

	// 5. Every rollout completes once; acknowledge each result.
	recovered := c.acknowledgeAll(ctx, "rec", count)

	want := outcomes("base", baseline)
	got := outcomes("rec", recovered)
	require.Equal(t, want, got, "same trajectories, rewards and turns as the uninterrupted run")
	recRevisions := c.revisions(ctx, "rec", count, urlOf)
	for i, rev := range recRevisions {
		require.Equal(t, baseRevisions[i], rev, "rollout %d: final environment revision (a mutation applied twice would raise it)", i)
	}
	for id, res := range recovered {
		rec, inCut := records[id]
		checkLineage(t, res)
		switch {
		case inCut && rec.Result != nil:
			require.Equal(t, *rec.Result.Receipt, *res.Receipt, "%s: the completed result is offered again with its receipt", id)
		case inCut:
			require.Greater(t, res.Attempt, rec.Boundary.Attempt, "%s: continued as a new attempt", id)
			newCalls := 0
			for _, e := range res.Lineage {
				if strings.Contains(e.CallID, fmt.Sprintf("/a%d/", res.Attempt)) {
					newCalls++
				}
			}
			if envs.EffectiveMode(rec.Boundary.EnvMode) == envs.ModeRestartOnly || !rec.Boundary.Seeded {
				require.Equal(t, len(res.Lineage), newCalls, "%s: a restart-only rollout starts over with no state", id)
			} else {
				require.Equal(t, len(res.Lineage)-rec.Boundary.Turn, newCalls, "%s: the calls before the cut are kept, none repeated", id)
			}
		}
	}
	// Sandbox rollouts (a replay environment) continue from their boundary
	// like the others: the lineage check above keeps their calls before the
	// cut.
	restored, _ := logPassCounts(t, recovered, records)
	require.Positive(t, restored, "some rollouts continue from their boundary")
	// Exactly one completed run per rollout in the new Temporal.
	for id := range recovered {
		n := c.completedRuns(ctx, id)
		require.Equal(t, 1, n, "rollout %s: completed runs", id)
	}
}

// logPassCounts reports, per environment, how the rollouts came through.
func logPassCounts(t *testing.T, res map[string]rollout.Result, records map[string]rollout.ParkRecord) (restored int, startedOver map[string]int) {
	type counts struct{ total, passed, restored, startedOver, offered int }
	by := map[string]*counts{}
	for id, r := range res {
		c := by[r.Env]
		if c == nil {
			c = &counts{}
			by[r.Env] = c
		}
		c.total++
		if r.Reward > 0 {
			c.passed++
		}
		rec, ok := records[id]
		switch {
		case !ok:
		case rec.Result != nil:
			c.offered++
		case envs.EffectiveMode(rec.Boundary.EnvMode) == envs.ModeRestartOnly || !rec.Boundary.Seeded:
			c.startedOver++
		default:
			c.restored++
		}
	}
	names := make([]string, 0, len(by))
	for n := range by {
		names = append(names, n)
	}
	sort.Strings(names)
	startedOver = map[string]int{}
	for _, n := range names {
		c := by[n]
		restored += c.restored
		startedOver[n] = c.startedOver
		t.Logf("%-9s %2d rollouts, %2d with reward > 0, identical to the uninterrupted run; %2d restored from their boundary, %2d started over, %2d offered again",
			n, c.total, c.passed, c.restored, c.startedOver, c.offered)
	}
	return restored, startedOver
}

// checkLineage: each model call names the previous call as its parent, so the
// first call of a new attempt links to the saved last call exactly once.
func checkLineage(t *testing.T, res rollout.Result) {
	require.Len(t, res.Lineage, res.Turns, "%s lineage", res.RolloutID)
	seen := map[string]bool{}
	for i, e := range res.Lineage {
		require.False(t, seen[e.CallID], "%s: call %s twice in the lineage", res.RolloutID, e.CallID)
		seen[e.CallID] = true
		if i == 0 {
			require.Empty(t, e.Parent, "%s: first call has no parent", res.RolloutID)
			continue
		}
		require.Equal(t, res.Lineage[i-1].CallID, e.Parent, "%s: call %d's parent", res.RolloutID, i)
	}
}

// readRecords opens the checkpoint's agents artifact (fully validated) and
// decodes its boundary records.
func readRecords(t *testing.T, root, id string) map[string]rollout.ParkRecord {
	ctx := context.Background()
	cp, err := artifact.Open(ctx, filepath.Join(root, id, "agents"), id)
	require.NoError(t, err)
	return parkRecords(t, cp)
}

// parkRecords decodes the boundary records of an agents artifact.
func parkRecords(t *testing.T, cp *artifact.Checkpoint) map[string]rollout.ParkRecord {
	t.Helper()
	recs, err := cp.Section(context.Background(), checkpoint.SectionAgents)
	require.NoError(t, err)
	out := map[string]rollout.ParkRecord{}
	for _, r := range recs {
		var rec rollout.ParkRecord
		require.NoError(t, json.Unmarshal(r.Data, &rec))
		out[rec.Input.RolloutID] = rec
	}
	return out
}

// killAll SIGKILLs every process the cluster started.
func (c *cluster) killAll() {
	c.mu.Lock()
	procs := append([]*proc(nil), c.procs...)
	c.mu.Unlock()
	for _, p := range procs {
		p.kill()
	}
	if c.client != nil {
		c.client.Close()
		c.client = nil
	}
}

// revisions returns the final environment revision of each rollout of a set,
// asking each rollout's environment server.
func (c *cluster) revisions(ctx context.Context, set string, count int, urlOf func(int) string) map[int]int64 {
	c.t.Helper()
	out := map[int]int64{}
	for i := range count {
		info, err := c.dataClient(urlOf(i)).Session(ctx, fmt.Sprintf("%s-%04d", set, i))
		require.NoError(c.t, err)
		out[i] = info.Revision
	}
	return out
}

// acknowledgeAll waits for every rollout of a set to hold its result,
// acknowledges it by receipt, and returns the results.
func (c *cluster) acknowledgeAll(ctx context.Context, set string, count int) map[string]rollout.Result {
	c.t.Helper()
	ids := make([]string, count)
	for i := range count {
		ids[i] = fmt.Sprintf("%s-%04d", set, i)
	}
	return c.acknowledgeIDs(ctx, ids)
}

// acknowledgeIDs waits for each rollout to hold its result, acknowledges
// it by receipt, and returns the results.
func (c *cluster) acknowledgeIDs(ctx context.Context, ids []string) map[string]rollout.Result {
	c.t.Helper()
	out := map[string]rollout.Result{}
	for _, id := range ids {
		var st rollout.Status
		c.waitFor("result of "+id, nil, 5*time.Minute, func() bool {
			v, err := c.client.QueryWorkflow(ctx, rollout.WorkflowID(id), "", rollout.QueryStatus)
			if err != nil {
				return false
			}
			return v.Get(&st) == nil && (st.Phase == rollout.PhaseAwaitingAck || st.Phase == rollout.PhaseFailed)
		})
		require.NotEqual(c.t, rollout.PhaseFailed, st.Phase, "%s failed instead of holding its result", id)
		h, err := c.client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
			WorkflowID: rollout.WorkflowID(id), UpdateName: rollout.UpdateAcknowledge,
			UpdateID: "ack/" + id, Args: []any{rollout.AckRequest{Receipt: *st.Result.Receipt}},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		})
		require.NoError(c.t, err)
		require.NoError(c.t, h.Get(ctx, nil))
		var res rollout.Result
		require.NoError(c.t, c.client.GetWorkflow(ctx, rollout.WorkflowID(id), "").Get(ctx, &res))
		require.Equal(c.t, *st.Result.Receipt, *res.Receipt)
		out[id] = res
	}
	return out
}

// completedRuns counts the completed runs of a rollout's workflow ID.
func (c *cluster) completedRuns(ctx context.Context, rolloutID string) int {
	c.t.Helper()
	q := fmt.Sprintf(`WorkflowId=%q AND ExecutionStatus="Completed"`, rollout.WorkflowID(rolloutID))
	n := 0
	c.waitFor("visibility of "+rolloutID, nil, time.Minute, func() bool {
		resp, err := c.client.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: "default", Query: q})
		if err != nil {
			return false
		}
		n = int(resp.GetCount())
		return n > 0
	})
	return n
}

// TestCheckpointThatCannotFinishAborts: one participant is unreachable, so the
// checkpoint cannot commit. It aborts cleanly: the reachable environment
// server and every parked rollout resume, no aggregate manifest is written,
// and the set finishes as if nothing had happened.
func TestCheckpointThatCannotFinishAborts(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	c := newStack(t, "--latency", "200ms", "--jitter", "50ms")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	var runs []client.WorkflowRun
	for i := range 10 {
		runs = append(runs, c.submit(ctx, counterInput("abort", i, target(i))))
	}
	c.waitFor("set mid-flight", nil, time.Minute, func() bool { return c.envStats(ctx).Applied >= 15 })

	root := filepath.Join(c.dir, "checkpoints")
	unreachable := fmt.Sprintf("http://127.0.0.1:%d", freePort(t)) // nothing listens there
	cpRun, err := c.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: checkpoint.CheckpointWorkflowID("cp-abort"), TaskQueue: rollout.TaskQueue,
	}, checkpoint.CheckpointWorkflowName, checkpoint.CheckpointInput{
		CheckpointID: "cp-abort", Set: "abort", Root: root, Participants: []string{c.envURL, unreachable}, Timeout: "3s",
	})
	require.NoError(t, err)
	err = cpRun.Get(ctx, nil)
	require.Error(t, err, "a checkpoint with an unreachable participant must fail")
	require.ErrorContains(t, err, "aborted", "the failure says the checkpoint was aborted")
	require.ErrorContains(t, err, unreachable, "and names the participant it could not reach")
	// A dead participant holds nothing: it is reported, and the abort
	// itself succeeds (it failed, leaving cleanup to an operator).
	require.ErrorContains(t, err, "unreachable environment servers", "the abort reports the dead server")
	require.NotContains(t, err.Error(), "CLEANUP FAILED", "a dead participant does not fail the abort")
	t.Logf("checkpoint failed as expected: %v", err)

	_, statErr := os.Stat(filepath.Join(root, "cp-abort", "MANIFEST.json"))
	require.ErrorIs(t, statErr, os.ErrNotExist, "nothing half-written looks valid")
	st, err := protocol.NewControlClient(c.envURL, c.token, nil).Status(ctx)
	require.NoError(t, err)
	require.Equal(t, protocol.AdmissionOpen, st.Admission, "the environment server resumed")

	res := c.results(ctx, runs)
	require.Len(t, res, 10)
	for _, r := range res {
		require.Equal(t, 0, r.Attempt)
		require.Equal(t, 1.0, r.Reward, "%s", r.RolloutID)
	}
}
