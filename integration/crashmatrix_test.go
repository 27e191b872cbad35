package integration_test

// The crash matrix: every named failpoint ×
// the process it kills (worker, environment server, coordinator worker,
// Temporal dev server with its database file) × environment class
// (export-restore, gym, replay, restart-only, stateless). Each case runs one set of
// ten rollouts holding every class on its own stack of real processes, kills
// its process at its point, recovers, and checks the invariants of
// ARCHITECTURE.md rollout by rollout against one uninterrupted run of the
// same seeds: a case yields one scenario row per environment class.
//
// CI runs a sample of the cases, drawn with a fixed seed and printed with
// the whole table; TURNSTILE_CRASH_MATRIX=all runs every case, and any other
// value is a regular expression over case names.

import (
	"fmt"
	"math/rand"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/failpoint"
)

// Settings of the crash matrix.
const (
	// envCrashMatrix selects the cases: empty samples, "all" runs every
	// case, anything else is a regular expression over case names.
	envCrashMatrix = "TURNSTILE_CRASH_MATRIX"
	// envCrashMatrixSeed changes the sampling seed.
	envCrashMatrixSeed = "TURNSTILE_CRASH_MATRIX_SEED"
	// matrixSeed is the fixed default sampling seed. It draws one network
	// case (the Toxiproxy mid-turn partition, as seed 12 did before the
	// network group grew) and, like 12, no streamed case (which needs a
	// baseline of its own): the sample's cost stays what it was.
	matrixSeed = 28
	// matrixExtra is how many cases the sample draws beyond one per group:
	// 8 groups + 3 = 11 cases, 55 scenarios, about 5 minutes two at a time
	// on a loaded 2-core machine (every case: about 9 minutes).
	matrixExtra = 3
)

// The processes a case kills.
const (
	procWorker      = "worker"
	procEnvServer   = "envserver"
	procCoordinator = "coordinator"
	procTemporal    = "temporal"
)

// flow is the recovery story a case runs its kill in.
type flow int

const (
	// flowRun: the set runs to completion while the process dies; nothing
	// is checkpointed (worker and Temporal crashes need no new attempt).
	flowRun flow = iota
	// flowCheckpoint: the process dies during a checkpoint of the set
	// mid-flight; the checkpoint then restores live.
	flowCheckpoint
	// flowRestore: the process dies during a restore of a checkpoint.
	flowRestore
	// flowEnv: the environment server that dies is started armed by a
	// restore of the checkpoint (a server's state exists only in it);
	// after it dies, the checkpoint is restored again.
	flowEnv
	// flowNet: the set runs through Toxiproxy proxies while a network
	// fault is on their links (crashmatrix_net_test.go).
	flowNet
)

func (f flow) String() string {
	return [...]string{"run", "checkpoint", "restore", "env-restore", "net"}[f]
}

// matrixCase is one kill: a process, the named point it dies at, and the
// flow it dies in.
type matrixCase struct {
	proc  string
	point string // a failpoint, or for Temporal the moment it is killed
	flow  flow
	// killAt: the process dies on the killAt-th pass through point.
	killAt int
	// streamed: the set captures tokens and its tools answers stream long
	// enough for durable prefixes (the policy server paced and padded,
	// workers keeping a prefix every few tokens); compared with a
	// streamed baseline.
	streamed bool
	// bounded: a streamed case whose workers generate in bounded chunks
	// (TURNSTILE_MODEL_PREFIX_BOUND=strict); its answers are the
	// unbounded baseline's, byte for byte.
	bounded bool
}

func (m matrixCase) name() string {
	if m.bounded {
		return m.proc + "/" + m.point + "+strict"
	}
	return m.proc + "/" + m.point
}

// group is the sampling stratum: the sample holds one case of each.
func (m matrixCase) group() string { return m.proc + "/" + m.flow.String() }

// The moments a Temporal dev server is killed at (it has no failpoints).
const (
	temporalMidSet        = "mid-set"
	temporalMidCheckpoint = "mid-checkpoint"
	temporalMidRestore    = "mid-restore"
)

// matrixCases is every case: the failpoints of package failpoint, each
// killed in the process that passes it, plus Temporal's moments.
func matrixCases() []matrixCase {
	var cs []matrixCase
	for _, fp := range []string{
		failpoint.WorkerModelAnsweredBeforeTranscript, failpoint.WorkerModelAnsweredBeforeReport,
		failpoint.WorkerEnvAppliedBeforeTranscript, failpoint.WorkerEnvAppliedBeforeReport,
	} {
		cs = append(cs, matrixCase{proc: procWorker, point: fp, flow: flowRun, killAt: 5})
	}
	for _, fp := range []string{
		failpoint.WorkerModelPrefixWrittenBeforeHeartbeat, failpoint.WorkerModelPrefixHeartbeatBeforeNextChunk,
	} {
		cs = append(cs, matrixCase{proc: procWorker, point: fp, flow: flowRun, killAt: 5, streamed: true},
			matrixCase{proc: procWorker, point: fp, flow: flowRun, killAt: 5, streamed: true, bounded: true})
	}
	for _, fp := range []string{
		failpoint.CoordinatorAfterPrepare, failpoint.CoordinatorAfterFreeze, failpoint.CoordinatorAfterPark,
		failpoint.CheckpointBetweenFiles, failpoint.CoordinatorAfterCommit, failpoint.CoordinatorAfterResumeParticipants,
	} {
		cs = append(cs, matrixCase{proc: procCoordinator, point: fp, flow: flowCheckpoint, killAt: 1})
	}
	for _, fp := range []string{
		failpoint.RestoreAfterValidate, failpoint.RestoreAfterPlan, failpoint.RestoreAfterParticipants,
		failpoint.RestoreAfterTerminate, failpoint.RestoreAfterStart, failpoint.RestoreAfterResumeParticipants,
	} {
		cs = append(cs, matrixCase{proc: procCoordinator, point: fp, flow: flowRestore, killAt: 1})
	}
	cs = append(cs,
		matrixCase{proc: procEnvServer, point: failpoint.EnvAfterApplyBeforeReply, flow: flowEnv, killAt: 3},
		matrixCase{proc: procEnvServer, point: failpoint.CheckpointBetweenFiles, flow: flowEnv, killAt: 1},
		matrixCase{proc: procEnvServer, point: failpoint.RestoreAfterValidate, flow: flowEnv, killAt: 1},
		matrixCase{proc: procEnvServer, point: failpoint.EnvRestoreMidInstall, flow: flowEnv, killAt: 1},
		matrixCase{proc: procTemporal, point: temporalMidSet, flow: flowRun},
		matrixCase{proc: procTemporal, point: temporalMidCheckpoint, flow: flowCheckpoint},
		matrixCase{proc: procTemporal, point: temporalMidRestore, flow: flowRestore},
	)
	return append(cs, netCases()...)
}

// envClass is an environment class of the matrix and the environments of
// the set that stand for it; secondOnly: only on the second environment
// server (which serves the sandbox restart_only), firstOnly: only on the
// first.
type envClass struct {
	name                  string
	envs                  []string
	firstOnly, secondOnly bool
}

var matrixClasses = []envClass{
	{name: "export-restore", envs: []string{"counter", "workplace"}},
	{name: "gym", envs: []string{"blackjack"}},
	{name: "replay", envs: []string{"sandbox"}, firstOnly: true},
	{name: "restart-only", envs: []string{"sandbox"}, secondOnly: true},
	{name: "stateless", envs: []string{"arithmetic"}},
}

// classOf is the class of rollout i of the matrix's set: odd rollouts run
// on the second environment server.
func classOf(i int) string {
	env, second := matrixEnvs[i%len(matrixEnvs)], i%2 == 1
	for _, c := range matrixClasses {
		if (c.firstOnly && second) || (c.secondOnly && !second) {
			continue
		}
		for _, e := range c.envs {
			if e == env {
				return c.name
			}
		}
	}
	return "?"
}

// selectCases picks the cases to run and says how they were picked.
func selectCases(t *testing.T, all []matrixCase) (map[string]bool, string) {
	spec := os.Getenv(envCrashMatrix)
	picked := map[string]bool{}
	switch spec {
	case "all":
		for _, c := range all {
			picked[c.name()] = true
		}
		return picked, envCrashMatrix + "=all: every case"
	case "":
	default:
		re, err := regexp.Compile(spec)
		require.NoError(t, err, "%s=%q: not a regular expression", envCrashMatrix, spec)
		for _, c := range all {
			picked[c.name()] = re.MatchString(c.name())
		}
		return picked, fmt.Sprintf("%s=%q: the cases it matches", envCrashMatrix, spec)
	}
	seed := int64(matrixSeed)
	if s := os.Getenv(envCrashMatrixSeed); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		require.NoError(t, err, "%s=%q: not an integer", envCrashMatrixSeed, s)
		seed = v
	}
	return sampleCases(all, seed, matrixExtra), fmt.Sprintf(
		"sampled with seed %d: one case per process and flow, plus %d more; run all with %s=all (or %s=<seed>, or %s=<regexp>)",
		seed, matrixExtra, envCrashMatrix, envCrashMatrixSeed, envCrashMatrix)
}

// sampleCases draws one case of every group and extra more, with seed.
// Bounded cases are not drawn: they repeat streamed cases (which a sample
// avoids, for their own baseline's cost) in the other generation mode,
// and leaving them out keeps what a seed draws unchanged. They run with
// TURNSTILE_CRASH_MATRIX=all or a pattern naming them ("strict").
func sampleCases(all []matrixCase, seed int64, extra int) map[string]bool {
	rng := rand.New(rand.NewSource(seed))
	byGroup := map[string][]matrixCase{}
	var groups []string
	for _, c := range all {
		if c.bounded {
			continue
		}
		if byGroup[c.group()] == nil {
			groups = append(groups, c.group())
		}
		byGroup[c.group()] = append(byGroup[c.group()], c)
	}
	picked := map[string]bool{}
	for _, g := range groups {
		cs := byGroup[g]
		picked[cs[rng.Intn(len(cs))].name()] = true
	}
	rest := []string{}
	for _, c := range all {
		if !picked[c.name()] && !c.bounded {
			rest = append(rest, c.name())
		}
	}
	rng.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
	for _, n := range rest[:min(extra, len(rest))] {
		picked[n] = true
	}
	return picked
}

// scenarioRow is one line of the table.
type scenarioRow struct {
	c        matrixCase
	class    string
	outcome  string // pass, FAIL, not sampled
	evidence string
}

// matrixTable collects the rows of the cases as they finish.
type matrixTable struct {
	mu   sync.Mutex
	rows map[string][]scenarioRow
}

func (m *matrixTable) put(c matrixCase, rows []scenarioRow) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rows[c.name()] = rows
}

// print logs the whole table, sampled or not, and the pass count.
func (m *matrixTable) print(t *testing.T, all []matrixCase, how string, took time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var b strings.Builder
	passed, ran := 0, 0
	fmt.Fprintf(&b, "crash matrix: %d cases × %d environment classes = %d scenarios; %s\n",
		len(all), len(matrixClasses), len(all)*len(matrixClasses), how)
	fmt.Fprintf(&b, "%-3s %-12s %-42s %-12s %-15s %-11s %s\n", "#", "process", "point", "flow", "class", "outcome", "evidence")
	n := 0
	for _, c := range all {
		rows := m.rows[c.name()]
		if rows == nil {
			for _, cl := range matrixClasses {
				rows = append(rows, scenarioRow{c: c, class: cl.name, outcome: "not sampled"})
			}
		}
		for _, r := range rows {
			n++
			if r.outcome != "not sampled" && r.outcome != "skipped" {
				ran++
			}
			if r.outcome == "pass" {
				passed++
			}
			fmt.Fprintf(&b, "%-3d %-12s %-42s %-12s %-15s %-11s %s\n", n, c.proc, strings.TrimPrefix(c.name(), c.proc+"/"), c.flow, r.class, r.outcome, r.evidence)
		}
	}
	fmt.Fprintf(&b, "passed %d of %d scenarios run (%d in the matrix), in %s", passed, ran, n, took.Round(time.Second))
	t.Log("\n" + b.String())
}

// TestCrashMatrix runs the sampled (or selected) cases, two at a time, and
// prints the whole table.
func TestCrashMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	start := time.Now()
	all := matrixCases()
	picked, how := selectCases(t, all)
	names := make([]string, 0, len(picked))
	for n, ok := range picked {
		if ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	t.Logf("crash matrix: running %d of %d cases (%s): %s", len(names), len(all), how, strings.Join(names, ", "))
	bases := map[bool]matrixBase{}
	for _, c := range all {
		if _, ok := bases[c.streamed]; picked[c.name()] && !ok {
			bases[c.streamed] = matrixBaseline(t, c.streamed)
		}
	}
	table := &matrixTable{rows: map[string][]scenarioRow{}}
	t.Run("cases", func(t *testing.T) {
		for _, c := range all {
			if !picked[c.name()] {
				continue
			}
			t.Run(c.name(), func(t *testing.T) {
				t.Parallel()
				runMatrixCase(t, c, bases[c.streamed], func(rows []scenarioRow) { table.put(c, rows) })
			})
		}
	})
	table.print(t, all, how, time.Since(start))
}

// TestCrashMatrixCoversEveryFailpoint: a failpoint added to package
// failpoint without a case here would never be crashed at.
func TestCrashMatrixCoversEveryFailpoint(t *testing.T) {
	covered := map[string]bool{}
	for _, c := range matrixCases() {
		covered[c.point] = true
	}
	for _, fp := range failpoint.All {
		assert.True(t, covered[fp], "failpoint %s has no crash-matrix case", fp)
	}
	n := len(matrixCases()) * len(matrixClasses)
	assert.GreaterOrEqual(t, n, 60, "the matrix holds %d scenarios, want at least 60", n)
}

// TestCrashMatrixSampleIsFixed: the same seed draws the same cases, one of
// every group, so a CI failure can be run again as it was.
func TestCrashMatrixSampleIsFixed(t *testing.T) {
	all := matrixCases()
	a, b := sampleCases(all, matrixSeed, matrixExtra), sampleCases(all, matrixSeed, matrixExtra)
	require.Equal(t, fmt.Sprint(b), fmt.Sprint(a), "seed %d drew %v, then %v", matrixSeed, a, b)
	groups := map[string]bool{}
	for _, c := range all {
		if a[c.name()] {
			groups[c.group()] = true
		}
	}
	want := map[string]bool{}
	for _, c := range all {
		want[c.group()] = true
	}
	assert.Len(t, groups, len(want), "the sample covers groups %v, want all of %v", groups, want)
	assert.True(t, groups[procNet+"/"+flowNet.String()], "the sample draws no network case: %v", groups)
	var net []string
	for _, c := range all {
		if a[c.name()] && c.proc == procNet {
			net = append(net, c.name())
		}
	}
	assert.Len(t, net, 1, "the sample draws one network case, so CI's time stays what it was: %v", net)
}
