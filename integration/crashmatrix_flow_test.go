package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/activities/model"
	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/internal/netns"
	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// The set every case runs: two rollouts of each environment, spread over
// two environment servers so every class lives on both.
const (
	matrixSet   = "m"
	matrixCount = 10
	// matrixCaseTimeout bounds one case.
	matrixCaseTimeout = 5 * time.Minute
)

var matrixEnvs = []string{"counter", "workplace", "blackjack", "sandbox", "arithmetic"}

// matrixBase is the uninterrupted run every case is compared with.
type matrixBase struct {
	out     map[int]outcome
	rev     map[int]int64
	applied int64
}

// matrixStack is the processes of one case: Temporal, environment servers
// A (the one that dies in flowEnv; it keeps its address) and B, the policy
// server and the workers.
type matrixStack struct {
	t        *testing.T
	c        *cluster
	second   string
	root     string
	port     int    // Temporal's port, kept across its restart
	db       string // Temporal's database file ("" in-memory)
	streamed bool   // see matrixCase.streamed
	evidence []string
	net      *netLinks // the proxies of a network case (nil: none)
	// ns is the namespace environment server A runs in, in a partition
	// case (nil: none); workerEnv are entries every worker of the case
	// gets (a later entry wins).
	ns        *netns.Netns
	workerEnv []string
}

// The streamed stacks' policy pace and padding and the workers' prefix
// interval: tools answers of about 120 tokens streamed over a third of a
// second, a durable prefix at least every 16 tokens (and heartbeat throttle).
var (
	matrixStreamedPolicy = []string{"--tokens-per-second", "400", "--pad-tokens", "120"}
	matrixStreamedWorker = []string{"TURNSTILE_MODEL_PREFIX_TOKENS=16"}
)

func newMatrixStack(t *testing.T, temporalDB bool, latency string, streamed bool) *matrixStack {
	t.Helper()
	c := newCluster(t)
	s := &matrixStack{t: t, c: c, root: filepath.Join(c.dir, "checkpoints"), port: freePort(t), streamed: streamed}
	if temporalDB {
		s.db = filepath.Join(c.dir, "temporal.db")
	}
	c.startTemporalWith(s.port, s.db)
	c.startEnvServer()
	// The second server serves the sandbox restart_only (the first replays
	// it), so both classes run in every case.
	s.second, _ = c.startEnvServerAs("envserver-2", "env-1", "--restart-only", "sandbox")
	args := []string{"--latency", latency, "--jitter", "5ms", "--imperfection", "0.2"}
	if streamed {
		args = append(args, matrixStreamedPolicy...)
	}
	c.startPolicyServer(args...)
	return s
}

// startWorker starts a worker of the stack (streamed: keeping prefixes
// often); extra environment entries arm it.
func (s *matrixStack) startWorker(extraEnv ...string) *proc {
	if s.streamed {
		extraEnv = append(extraEnv, matrixStreamedWorker...)
	}
	env := append(append(s.netWorkerEnv(), s.workerEnv...), extraEnv...)
	return s.c.startWorker(env...)
}

func (s *matrixStack) urlOf(i int) string {
	if i%2 == 1 {
		return s.second
	}
	return s.c.envURL
}

func (s *matrixStack) participants() []string { return []string{s.c.envURL, s.second} }

func (s *matrixStack) note(format string, args ...any) {
	s.evidence = append(s.evidence, fmt.Sprintf(format, args...))
	s.t.Logf(format, args...)
}

func matrixInput(t testing.TB, s *matrixStack, i int) rollout.Input {
	in := setInput(t, matrixSet, matrixEnvs, i)
	if i%2 == 1 {
		in.Env.URL = s.dataURL(s.second)
	}
	if s.streamed {
		in.Sampling = &rollout.Sampling{CaptureTokens: true}
		in.Policy.ToolParser = rollout.ToolParserTurnstile
	}
	return in
}

func (s *matrixStack) applied(ctx context.Context) int64 {
	var n int64
	for _, u := range s.participants() {
		st, err := s.c.dataClient(u).Stats(ctx)
		require.NoError(s.t, err)
		n += st.Applied
	}
	return n
}

// matrixBaseline runs the set once, uninterrupted, on a stack of its own
// (streamed: as matrixCase.streamed cases run it).
func matrixBaseline(t *testing.T, streamed bool) matrixBase {
	s := newMatrixStack(t, false, "20ms", streamed)
	s.startWorker()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var runs []client.WorkflowRun
	for i := range matrixCount {
		runs = append(runs, s.c.submit(ctx, matrixInput(t, s, i)))
	}
	res := s.c.results(ctx, runs)
	base := matrixBase{out: outcomes(matrixSet, res), rev: s.c.revisions(ctx, matrixSet, matrixCount, s.urlOf), applied: s.applied(ctx)}
	t.Logf("uninterrupted run: %d rollouts, %d mutations applied", len(res), base.applied)
	return base
}

// runMatrixCase runs one case and reports its rows, also when it fails
// half-way (report runs deferred, so a FailNow still fills the table).
func runMatrixCase(t *testing.T, mc matrixCase, base matrixBase, report func([]scenarioRow)) {
	var checks map[string]*classCheck
	stage := "start"
	var s *matrixStack
	defer func() {
		var ev []string
		if s != nil {
			ev = s.evidence
			if t.Failed() {
				s.logUnfinished()
			}
		}
		report(caseRows(mc, checks, ev, stage, t.Failed()))
	}()
	if err := mc.unsupported(); err != nil {
		stage = "skipped: " + err.Error()
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), matrixCaseTimeout)
	defer cancel()
	s = newMatrixStack(t, mc.proc == procTemporal, "600ms", mc.streamed)
	if mc.bounded {
		s.workerEnv = append(s.workerEnv, model.EnvModelPrefixBound+"="+model.PrefixBoundStrict)
	}
	stage = mc.flow.String()
	var records map[string]rollout.ParkRecord
	switch mc.flow {
	case flowRun:
		s.runFlow(ctx, mc)
	case flowCheckpoint:
		records = s.checkpointFlow(ctx, mc)
	case flowRestore:
		records = s.restoreFlow(ctx, mc)
	case flowEnv:
		records = s.envFlow(ctx, mc)
	case flowNet:
		s.netFlow(ctx, mc)
	}
	stage = "acknowledge"
	results := s.c.acknowledgeAll(ctx, matrixSet, matrixCount)
	stage = "check"
	if mc.flow == flowRun || mc.flow == flowNet {
		got := s.applied(ctx)
		s.note("applied %d mutations, uninterrupted %d", got, base.applied)
		assert.Equal(t, base.applied, got, "%s: %d mutations applied, the uninterrupted run applied %d", mc.name(), got, base.applied)
	}
	checks = s.check(ctx, base, results, records)
	stage = "done"
}

// armed is the environment entry that arms failpoint fp of a case.
func armed(mc matrixCase) string {
	return fmt.Sprintf("%s=%s=kill@%d", failpoint.EnvVar, mc.point, mc.killAt)
}

// submitAll starts the set, every result held for acknowledgement.
func (s *matrixStack) submitAll(ctx context.Context) {
	for i := range matrixCount {
		in := matrixInput(s.t, s, i)
		in.RequireAck = true
		s.c.submit(ctx, in)
	}
}

// waitMidFlight waits until half the set, over at least three
// environments, has applied an operation and is not finished: a state, not
// a time. (Every environment at once is too rare a moment on a loaded
// machine: arithmetic episodes are one operation long.)
func (s *matrixStack) waitMidFlight(ctx context.Context) {
	var busyEnv map[string]bool
	s.c.waitFor("set mid-flight", nil, 2*time.Minute, func() bool {
		busy := 0
		busyEnv = map[string]bool{}
		for i := range matrixCount {
			info, err := s.c.dataClient(s.urlOf(i)).Session(ctx, fmt.Sprintf("%s-%04d", matrixSet, i))
			if err == nil && info.Revision >= 1 && !info.Retired {
				busy++
				busyEnv[info.Env] = true
			}
		}
		return 2*busy >= matrixCount && len(busyEnv) >= 3
	})
	envList := make([]string, 0, len(busyEnv))
	for e := range busyEnv {
		envList = append(envList, e)
	}
	sort.Strings(envList)
	s.note("mid-flight: %s working", strings.Join(envList, ", "))
}

// awaitDeath waits until p dies at its failpoint and says so. finished
// (nil: none) reports the end of the workflow p should die in: ending first
// means p never passed its failpoint there.
func (s *matrixStack) awaitDeath(ctx context.Context, p *proc, mc matrixCase, finished <-chan error) {
	s.t.Helper()
	select {
	case <-p.done:
	case err := <-finished:
		require.Failf(s.t, "the workflow ended first", "the workflow ended (error: %v) and %s never reached %s (pass %d)", err, p.name, mc.point, mc.killAt)
	case <-ctx.Done():
		require.Failf(s.t, "the failpoint was never reached", "%s never reached %s (pass %d)", p.name, mc.point, mc.killAt)
	}
	require.ErrorContains(s.t, p.Err(), "killed", "%s died by SIGKILL at its failpoint", p.name)
	s.note("%s SIGKILLed at %s (pass %d)", p.name, mc.point, mc.killAt)
}

// killTemporal SIGKILLs the dev server once the workflow id has made
// progress (minEvents history events), and restarts it on its database file.
func (s *matrixStack) killTemporal(ctx context.Context, workflowID string, minEvents int64) {
	s.t.Helper()
	if workflowID != "" {
		s.c.waitFor("progress of "+workflowID, nil, 2*time.Minute, func() bool {
			d, err := s.c.client.DescribeWorkflow(ctx, workflowID, "")
			return err == nil && d.RawResponse.GetWorkflowExecutionInfo().GetHistoryLength() >= minEvents
		})
	}
	s.c.killProc("temporal")
	s.c.startTemporalWith(s.port, s.db)
	s.note("Temporal SIGKILLed and restarted on its database file")
}

// runFlow: the set runs while the process dies; no checkpoint.
func (s *matrixStack) runFlow(ctx context.Context, mc matrixCase) {
	if mc.proc == procTemporal {
		s.startWorker()
		s.startWorker()
		s.submitAll(ctx)
		s.waitMidFlight(ctx)
		s.killTemporal(ctx, "", 0)
		return
	}
	// The armed worker starts first and takes the first workflow tasks
	// (sticky, with eager activities): the other one could otherwise run the
	// whole set and the failpoint never fire.
	doomed := s.startWorker(armed(mc))
	s.submitAll(ctx)
	s.startWorker()
	s.awaitDeath(ctx, doomed, mc, nil)
	s.note("its work moved to the other worker (none restarted)")
}

// during is what a case does while a coordinator workflow runs; finished
// reports the workflow's end (read it only while Temporal lives).
type during func(finished <-chan error)

// runCoordinator starts a coordinator workflow, runs d while it runs, and
// waits for its result.
func (s *matrixStack) runCoordinator(ctx context.Context, workflowID, name string, in, out any, d during) error {
	_, err := s.c.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflowID, TaskQueue: rollout.TaskQueue}, name, in)
	require.NoError(s.t, err)
	if d != nil {
		finished := make(chan error, 1)
		cl := s.c.client
		go func() { finished <- cl.GetWorkflow(ctx, workflowID, "").Get(ctx, nil) }()
		d(finished)
	}
	return s.c.client.GetWorkflow(ctx, workflowID, "").Get(ctx, out)
}

// checkpoint cuts the set and waits for the result.
func (s *matrixStack) checkpoint(ctx context.Context, id string, d during) (checkpoint.CheckpointResult, error) {
	var cp checkpoint.CheckpointResult
	err := s.runCoordinator(ctx, checkpoint.CheckpointWorkflowID(id), checkpoint.CheckpointWorkflowName, checkpoint.CheckpointInput{
		CheckpointID: id, Set: matrixSet, Root: s.root, Participants: s.controlURLs(), Timeout: "90s",
	}, &cp, d)
	if err == nil {
		s.note("%s: %d members, %d parked, %d completed unacknowledged", id, cp.Members, cp.Parked, cp.CompletedUnacked)
	}
	return cp, err
}

// restore restores checkpoint cp1 as restoreID and waits for it.
func (s *matrixStack) restore(ctx context.Context, restoreID string, d during) {
	var rs checkpoint.RestoreResult
	err := s.runCoordinator(ctx, checkpoint.RestoreWorkflowID(restoreID), checkpoint.RestoreWorkflowName, checkpoint.RestoreInput{
		CheckpointID: "cp1", RestoreID: restoreID, Root: s.root, Participants: s.participants(),
	}, &rs, d)
	require.NoError(s.t, err, "restore %s", restoreID)
	s.note("restore %s: %d from their boundary, %d started over, %d offered again", restoreID, rs.Restored, rs.StartedOver, rs.OfferedAgain)
}

// coordinatorWorkers starts the workers of a case whose process is the
// coordinator's: the armed worker alone (a second worker could run the step
// instead and the failpoint never fire), or two for a Temporal case.
func (s *matrixStack) coordinatorWorkers(mc matrixCase) *proc {
	if mc.proc == procTemporal {
		s.startWorker()
		s.startWorker()
		return nil
	}
	return s.startWorker(armed(mc))
}

// during returns what to do while a coordinator workflow runs: replace the
// armed worker when it dies, or kill Temporal once the workflow progressed.
func (s *matrixStack) during(ctx context.Context, mc matrixCase, doomed *proc, workflowID string) during {
	return func(finished <-chan error) {
		if doomed != nil {
			s.awaitDeath(ctx, doomed, mc, finished)
			s.startWorker()
			return
		}
		s.killTemporal(ctx, workflowID, 8)
	}
}

// checkpointFlow: the process dies during the checkpoint; then the
// checkpoint is restored live, which proves it whole.
func (s *matrixStack) checkpointFlow(ctx context.Context, mc matrixCase) map[string]rollout.ParkRecord {
	doomed := s.coordinatorWorkers(mc)
	s.submitAll(ctx)
	s.waitMidFlight(ctx)
	_, err := s.checkpoint(ctx, "cp1", s.during(ctx, mc, doomed, checkpoint.CheckpointWorkflowID("cp1")))
	require.NoError(s.t, err, "checkpoint")
	records := readRecords(s.t, s.root, "cp1")
	s.restore(ctx, "r1", nil)
	return records
}

// restoreFlow: the process dies during the restore.
func (s *matrixStack) restoreFlow(ctx context.Context, mc matrixCase) map[string]rollout.ParkRecord {
	doomed := s.coordinatorWorkers(mc)
	s.submitAll(ctx)
	s.waitMidFlight(ctx)
	_, err := s.checkpoint(ctx, "cp1", nil)
	require.NoError(s.t, err, "checkpoint")
	records := readRecords(s.t, s.root, "cp1")
	s.restore(ctx, "r1", s.during(ctx, mc, doomed, checkpoint.RestoreWorkflowID("r1")))
	return records
}

// envFlow: environment server A is replaced by one armed at the case's
// failpoint, which a restore of cp1 fills; it dies (during that restore, or
// later on the data path or in a second checkpoint) and a fresh server on
// its address takes its place, filled by a second restore when the first
// one had finished.
func (s *matrixStack) envFlow(ctx context.Context, mc matrixCase) map[string]rollout.ParkRecord {
	s.startWorker()
	s.startWorker()
	s.submitAll(ctx)
	s.waitMidFlight(ctx)
	_, err := s.checkpoint(ctx, "cp1", nil)
	require.NoError(s.t, err, "checkpoint")
	records := readRecords(s.t, s.root, "cp1")
	s.c.killProc("envserver")
	doomed := s.c.startEnvServer(armed(mc))
	replace := func(finished <-chan error) {
		s.awaitDeath(ctx, doomed, mc, finished)
		s.c.startEnvServer()
	}
	switch mc.point {
	case failpoint.RestoreAfterValidate, failpoint.EnvRestoreMidInstall:
		s.restore(ctx, "r1", replace)
		return records
	case failpoint.CheckpointBetweenFiles:
		s.restore(ctx, "r1", nil)
		_, err := s.checkpoint(ctx, "cp2", replace)
		require.Error(s.t, err, "a checkpoint whose server died mid-commit must abort")
		require.ErrorContains(s.t, err, "aborted")
		s.note("cp2 aborted: %s", firstLine(err.Error(), 90))
	default:
		s.restore(ctx, "r1", nil)
		replace(nil)
	}
	s.restore(ctx, "r2", nil)
	return records
}

func firstLine(s string, n int) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// classCheck is what one environment class's rollouts showed.
type classCheck struct {
	total, equal, revOK, oneRun, fenced, fenceTried int
	attempts                                        []int
	refusals                                        []string
	restored, startedOver, offered                  int
	problems                                        []string
}

// check holds every rollout to the invariants, by environment class.
func (s *matrixStack) check(ctx context.Context, base matrixBase, results map[string]rollout.Result, records map[string]rollout.ParkRecord) map[string]*classCheck {
	out := map[string]*classCheck{}
	got := outcomes(matrixSet, results)
	for i := range matrixCount {
		id := fmt.Sprintf("%s-%04d", matrixSet, i)
		cc := out[classOf(i)]
		if cc == nil {
			cc = &classCheck{}
			out[classOf(i)] = cc
		}
		cc.total++
		res := results[id]
		cc.attempts = append(cc.attempts, res.Attempt)
		countCut(cc, records, id)
		if got[i] == base.out[i] {
			cc.equal++
		} else {
			cc.problems = append(cc.problems, fmt.Sprintf("%s: %+v, uninterrupted %+v", id, got[i], base.out[i]))
		}
		s.probeStale(ctx, cc, i, id, res.Attempt)
		info, err := s.c.dataClient(s.urlOf(i)).Session(ctx, id)
		if err == nil && info.Revision == base.rev[i] {
			cc.revOK++
		} else {
			cc.problems = append(cc.problems, fmt.Sprintf("%s: final revision %d (%v), uninterrupted %d", id, info.Revision, err, base.rev[i]))
		}
		if n := s.c.completedRuns(ctx, id); n == 1 {
			cc.oneRun++
		} else {
			cc.problems = append(cc.problems, fmt.Sprintf("%s: %d completed runs", id, n))
		}
	}
	for class, cc := range out {
		assert.Empty(s.t, cc.problems, "class %s", class)
	}
	return out
}

// countCut counts how the checkpoint held a rollout.
func countCut(cc *classCheck, records map[string]rollout.ParkRecord, id string) {
	rec, ok := records[id]
	switch {
	case !ok:
	case rec.Result != nil:
		cc.offered++
	case envs.EffectiveMode(rec.Boundary.EnvMode) == envs.ModeRestartOnly || !rec.Boundary.Seeded:
		cc.startedOver++
	default:
		cc.restored++
	}
}

// probeStale sends an operation as the attempt below the final one: it
// must be refused, and (checked next by the revision) change nothing.
func (s *matrixStack) probeStale(ctx context.Context, cc *classCheck, i int, id string, attempt int) {
	if attempt == 0 {
		return
	}
	cc.fenceTried++
	_, err := s.c.dataClient(s.urlOf(i)).Operate(ctx, protocol.OperateRequest{
		Identity:         protocol.Identity{RolloutID: id, Attempt: attempt - 1, RequestID: id + "/stale-probe"},
		ExpectedRevision: 0, Tool: "step", Arguments: json.RawMessage(`{}`),
	})
	// Any refusal will do here (a rollout offered its result again may hold
	// a retired session): what matters is that nothing lands, which the
	// final revision, read after this probe, shows.
	var re *protocol.RemoteError
	if errors.As(err, &re) && re.Status >= 400 && re.Status < 500 {
		cc.fenced++
		cc.refusals = append(cc.refusals, re.Code)
		return
	}
	cc.problems = append(cc.problems, fmt.Sprintf("%s: attempt %d not refused: %v", id, attempt-1, err))
}

// caseRows turns a case's checks into one row per environment class.
func caseRows(mc matrixCase, checks map[string]*classCheck, evidence []string, stage string, failed bool) []scenarioRow {
	var rows []scenarioRow
	common := strings.Join(evidence, "; ")
	for _, cl := range matrixClasses {
		cc := checks[cl.name]
		row := scenarioRow{c: mc, class: cl.name, outcome: "pass"}
		switch {
		case strings.HasPrefix(stage, "skipped"):
			row.outcome, row.evidence = "skipped", stage
			rows = append(rows, row)
			continue
		case cc == nil:
			row.outcome = "FAIL"
			row.evidence = fmt.Sprintf("the case failed in its %s stage; %s", stage, common)
		default:
			if len(cc.problems) > 0 {
				row.outcome = "FAIL"
			}
			row.evidence = cc.summary() + " | " + common
		}
		if failed && row.outcome == "pass" {
			// The class's rollouts passed; a check of the whole case failed.
			row.outcome = "FAIL"
			row.evidence += " | the case failed a set-wide check (see its log)"
		}
		rows = append(rows, row)
	}
	return rows
}

func (cc *classCheck) summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d/%d equal to uninterrupted, %d/%d final revision equal (each mutation once), %d/%d one completed run, attempts %v",
		cc.equal, cc.total, cc.revOK, cc.total, cc.oneRun, cc.total, cc.attempts)
	if cc.fenceTried > 0 {
		fmt.Fprintf(&b, ", stale attempt refused %d/%d %v", cc.fenced, cc.fenceTried, cc.refusals)
	}
	if cc.restored+cc.startedOver+cc.offered > 0 {
		fmt.Fprintf(&b, ", cut: %d restored %d started over %d offered again", cc.restored, cc.startedOver, cc.offered)
	}
	if len(cc.problems) > 0 {
		fmt.Fprintf(&b, "; PROBLEMS: %s", strings.Join(cc.problems, "; "))
	}
	return b.String()
}
