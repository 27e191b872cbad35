package main

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/cmd/internal/cli"
	"github.com/turnstile-rl/turnstile/envs/catalog"
	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// The starter's own tests: what it prints. The logic it prints is tested in
// the client package.

const (
	running   = enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	completed = enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	failed    = enumspb.WORKFLOW_EXECUTION_STATUS_FAILED
	term      = enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func rec(id string, st enumspb.WorkflowExecutionStatus, dur time.Duration, res *rollout.Result) trainer.RolloutRecord {
	r := trainer.RolloutRecord{RolloutID: id, WorkflowID: rollout.WorkflowID(id), Status: st, Start: t0, Result: res}
	if r.Closed() {
		r.Close = t0.Add(dur)
	}
	return r
}

func TestWriteOverall(t *testing.T) {
	got := trainer.Summary{Rollouts: 7, Completed: 3, Failed: 2, Running: 2, MeanReward: 0.5, MeanTurns: 5, P50: 2 * time.Second, P95: 3 * time.Second}

	var buf bytes.Buffer
	require.NoError(t, writeOverall(&buf, "s1", got))
	out := buf.String()
	for _, line := range []string{
		"completed         3",
		"mean reward       0.5000",
		"mean turns        5.00",
		"p50 rollout time  2s",
		"p95 rollout time  3s",
	} {
		assert.Contains(t, out, line, "summary lacks %q:\n%s", line, out)
	}
}

func TestWriteStatus(t *testing.T) {
	got := []trainer.RolloutRecord{
		{RolloutID: "s1-0000", Status: completed, Phase: "completed", Turn: 4},
		{RolloutID: "s1-0001", Status: running, Phase: "model", Attempt: 1, Turn: 4},
		{RolloutID: "s1-0002", Status: running, Phase: "verifying", Turn: 4},
	}

	var buf bytes.Buffer
	require.NoError(t, writeStatus(&buf, "s1", setStatus{recs: got, admission: trainer.AdmissionStatus{MaxInFlight: 2, Running: 2, Queued: 5}}, true))
	for _, want := range []string{"Running    2", "s1-0001  1        4     model", "queued     5", "8 rollouts", "2 running of at most 2, 5 queued", "(5 more queued"} {
		assert.Contains(t, buf.String(), want, "status lacks %q:\n%s", want, buf.String())
	}
}

func TestWriteSummary(t *testing.T) {
	withEnv := func(r trainer.RolloutRecord, env string) trainer.RolloutRecord {
		r.Env = env
		return r
	}
	res := func(reward float64, turns int) *rollout.Result { return &rollout.Result{Reward: reward, Turns: turns} }
	recs := []trainer.RolloutRecord{
		withEnv(rec("c0", completed, time.Second, res(1, 4)), "counter"),
		withEnv(rec("c1", completed, time.Second, res(0, 6)), "counter"),
		withEnv(rec("c2", failed, time.Second, nil), "counter"),
		withEnv(rec("b0", completed, time.Second, res(2, 10)), "blackjack"),
		withEnv(rec("b1", completed, time.Second, res(-1, 4)), "blackjack"),
		withEnv(rec("b2", completed, time.Second, res(0, 7)), "blackjack"),
		withEnv(rec("b3", running, 0, nil), "blackjack"),
		withEnv(rec("w0", completed, time.Second, res(0.5, 9)), "workplace"),
		withEnv(rec("w1", running, 0, nil), "workplace"),
		withEnv(rec("w2", term, time.Second, nil), "workplace"),
		rec("x0", failed, time.Second, nil),
	}
	sum := trainer.SetSummary{Overall: trainer.Summarize(recs), ByEnv: trainer.SummarizeByEnv(recs)}

	var buf bytes.Buffer
	require.NoError(t, writeSummary(&buf, "s1", sum))
	out := buf.String()
	for _, line := range []string{
		"rollouts          11\n",
		"ENV        ROLLOUTS  COMPLETED  FAILED  RUNNING  QUEUED  PASSED  MEAN REWARD  MEAN TURNS\n",
		"blackjack  4         3          0       1        0       1       0.3333       7.00\n",
		"counter    3         2          1       0        0       1       0.5000       5.00\n",
		"passed: completed with reward >= 1; blackjack (summed step rewards): reward > 0\n",
	} {
		assert.Contains(t, out, line, "summary lacks %q:\n%s", line, out)
	}
}

func TestMaxTurnsDefaults(t *testing.T) {
	// --help lists every environment's default, in name order.
	got, want := catalog.TurnLimits(), "arithmetic 4, blackjack 64, counter 16, sandbox 12, workplace 24"
	assert.True(t, containsInOrder(got, strings.Split(want, ", ")), "catalog.TurnLimits() = %q, want %q in this order among the others", got, want)
}

// containsInOrder reports whether every part occurs in s, each after the
// previous one.
func containsInOrder(s string, parts []string) bool {
	for _, p := range parts {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return true
}

// valueColumn is where the second column starts on each line of a table.
func valueColumn(t *testing.T, out string) map[int]int {
	t.Helper()
	cols := map[int]int{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		fields := strings.Fields(line)
		cols[strings.LastIndex(line, fields[len(fields)-1])]++
	}
	return cols
}

func TestWriteCoordinatorResults(t *testing.T) {
	var ck bytes.Buffer
	require.NoError(t, writeCheckpointResult(&ck, checkpoint.CheckpointResult{
		CheckpointID: "ck1", Dir: "/r/ck1", Members: 24, Parked: 20, CompletedUnacked: 3, Closed: 1,
		Bytes: 123456, ManifestDigest: "abc", CutMillis: 812, TotalMillis: 1500,
	}))
	for _, want := range []string{"members ", " 24\n", "completed_unacked  3\n", "bytes ", " 123456\n", "manifest digest ", " abc\n", "cut_ms ", " 812\n", "total_ms ", " 1500\n"} {
		assert.Contains(t, ck.String(), want, "checkpoint table lacks %q:\n%s", want, ck.String())
	}
	assert.Len(t, valueColumn(t, ck.String()), 1, "values not aligned:\n%s", ck.String())
	var rs bytes.Buffer
	require.NoError(t, writeRestoreResult(&rs, checkpoint.RestoreResult{CheckpointID: "ck1", Restored: 17, StartedOver: 2, OfferedAgain: 3, Started: 22}))
	for _, want := range []string{" 17\n", "started_over ", "offered_again ", " 22\n"} {
		assert.Contains(t, rs.String(), want, "restore table lacks %q:\n%s", want, rs.String())
	}
	cols := valueColumn(t, rs.String())
	assert.Len(t, cols, 1, "values not aligned (%v):\n%s", cols, rs.String())
}

func TestLineProgress(t *testing.T) {
	tests := []struct {
		total int
		want  []string
	}{
		{1, []string{"closed 1/1 rollouts"}},
		{3, []string{"closed 1/3 rollouts", "closed 2/3 rollouts", "closed 3/3 rollouts"}},
		{20, []string{"closed 2/20 rollouts", "closed 4/20 rollouts", "closed 6/20 rollouts", "closed 8/20 rollouts", "closed 10/20 rollouts",
			"closed 12/20 rollouts", "closed 14/20 rollouts", "closed 16/20 rollouts", "closed 18/20 rollouts", "closed 20/20 rollouts"}},
	}
	for _, tt := range tests {
		var buf strings.Builder
		p := newProgress(t.Context(), &buf, tt.total)
		for range tt.total {
			p.Increment()
		}
		p.Finish(true)
		got := strings.Split(strings.TrimSpace(buf.String()), "\n")
		assert.Equal(t, strings.Join(tt.want, "|"), strings.Join(got, "|"), "total %d: lines %q, want %q", tt.total, got, tt.want)
	}
}

func TestWritePlan(t *testing.T) {
	inputs, err := trainer.BuildInputs(trainer.SubmitRequest{Set: "mix", Count: 5, Envs: []string{"sandbox", "blackjack"}, Seed: 1})
	require.NoError(t, err)
	var buf strings.Builder
	require.NoError(t, writePlan(&buf, "mix", inputs))
	want := "would start 5 rollouts of set mix:\n" +
		"  3 × sandbox, policy scripted-sandbox, max turns 12\n" +
		"  2 × blackjack, policy scripted-blackjack, max turns 64\n"
	assert.Equal(t, want, buf.String(), "plan:\n%s\nwant:\n%s", buf.String(), want)
}

func TestWriteResults(t *testing.T) {
	recs := []trainer.RolloutRecord{
		rec("a", completed, time.Second, &rollout.Result{RolloutID: "a", Set: "s1", Reward: 1, Turns: 2}),
		{RolloutID: "b", Status: failed, Err: "environment refused"},
		rec("c", running, 0, nil),
		{RolloutID: "d", Status: term, Err: "terminated"},
	}
	var buf bytes.Buffer
	open, err := writeResults(&buf, recs)
	require.NoError(t, err)
	assert.Equal(t, 1, open, "open")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 3, "lines")
	var res rollout.Result
	err = json.Unmarshal([]byte(lines[0]), &res)
	require.NoError(t, err, "line 0 %s: %+v %v", lines[0], res, err)
	require.Equal(t, "a", res.RolloutID, "line 0 %s: %+v %v", lines[0], res, err)
	require.Equal(t, float64(1), res.Reward, "line 0 %s: %+v %v", lines[0], res, err)
	require.Equal(t, 2, res.Turns, "line 0 %s: %+v %v", lines[0], res, err)
	require.Equal(t, `{"rollout_id":"b","error":"environment refused"}`, lines[1], "failure lines: %q", lines[1:])
	require.Equal(t, `{"rollout_id":"d","error":"terminated"}`, lines[2], "failure lines: %q", lines[1:])
}

// pflag reads a `backquoted` word in a usage string as the flag's value
// name, which garbles the help line; every command's help must read as
// written.
func TestHelpTextsHaveNoStrayValueNames(t *testing.T) {
	root := newRootCmd()
	for _, c := range root.Commands() {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			assert.NotContains(t, f.Usage, "`", "starter %s --%s: usage %q holds a backquote", c.Name(), f.Name, f.Usage)
		})
		var b strings.Builder
		c.SetOut(&b)
		require.NoError(t, c.Help(), "starter %s --help", c.Name())
		assert.Contains(t, b.String(), "Usage:", "starter %s --help prints no usage:\n%s", c.Name(), b.String())
	}
}

// -o json: status is one document of counts, or with --verbose one JSON
// line per rollout; field names are the documented ones.
func TestStatusJSON(t *testing.T) {
	recs := []trainer.RolloutRecord{
		{RolloutID: "s1-0000", Phase: "completed", Attempt: 1, Turn: 4, RunID: "r0", Env: "counter", Status: enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED},
		{RolloutID: "s1-0001", Phase: "model", Turn: 2, RunID: "r1", Env: "counter", Status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING},
	}
	var b strings.Builder
	require.NoError(t, jsonStatus(&b, "s1", setStatus{recs: recs, admission: trainer.AdmissionStatus{Queued: 3}}, false))
	var doc struct {
		Set      string         `json:"set"`
		Rollouts int            `json:"rollouts"`
		Queued   int            `json:"queued"`
		Phases   map[string]int `json:"phases"`
		Statuses map[string]int `json:"statuses"`
	}
	require.NoError(t, json.Unmarshal([]byte(b.String()), &doc))
	require.Equal(t, "s1", doc.Set)
	require.Equal(t, 5, doc.Rollouts)
	require.Equal(t, 3, doc.Queued)
	require.Equal(t, map[string]int{"completed": 1, "model": 1, "queued": 3}, doc.Phases)

	b.Reset()
	require.NoError(t, jsonStatus(&b, "s1", setStatus{recs: recs}, true))
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	require.Len(t, lines, 2)
	var line map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &line))
	for _, k := range []string{"rollout_id", "attempt", "turn", "phase", "status", "run_id", "env"} {
		require.Contains(t, line, k)
	}
}

func TestSummaryJSONSpellsDurationsInMillis(t *testing.T) {
	raw, err := json.Marshal(trainer.Summary{Rollouts: 3, Completed: 2, P50: 1500 * time.Millisecond, P95: 2 * time.Second})
	require.NoError(t, err)
	var got map[string]any
	require.NoError(t, json.Unmarshal(raw, &got))
	require.Equal(t, 1500.0, got["p50_ms"])
	require.Equal(t, 2000.0, got["p95_ms"])
	require.Equal(t, 3.0, got["rollouts"])
	require.NotContains(t, got, "P50")
}

func TestOutputFlagIsChecked(t *testing.T) {
	root := newRootCmd()
	root.SetArgs([]string{"status", "--set", "s1", "-o", "yaml"})
	root.SetOut(io.Discard)
	err := root.Execute()
	require.ErrorContains(t, err, `--output "yaml": want table or json`)
	require.Equal(t, 2, cli.ExitCode(cli.CobraUsage(err)))
}
