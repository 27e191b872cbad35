package trainer

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/turnstile-rl/turnstile/internal/testsupport/temporalfake"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

const (
	running   = enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	completed = enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	failed    = enumspb.WORKFLOW_EXECUTION_STATUS_FAILED
	canAsNew  = enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW
	term      = enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED
)

func TestPercentile(t *testing.T) {
	ms := func(vs ...int) []time.Duration {
		out := make([]time.Duration, len(vs))
		for i, v := range vs {
			out[i] = time.Duration(v) * time.Millisecond
		}
		return out
	}
	tests := []struct {
		name string
		ds   []time.Duration
		p    float64
		want time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one", ms(5), 50, 5 * time.Millisecond},
		{"one p95", ms(5), 95, 5 * time.Millisecond},
		{"p50 of 4 is the 2nd", ms(40, 10, 30, 20), 50, 20 * time.Millisecond},
		{"p50 of 5 is the 3rd", ms(5, 1, 4, 2, 3), 50, 3 * time.Millisecond},
		{"p95 of 20 is the 19th", ms(20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1), 95, 19 * time.Millisecond},
		{"p95 of 21 is the 20th", ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21), 95, 20 * time.Millisecond},
		{"p100 is the max", ms(3, 9, 1), 100, 9 * time.Millisecond},
		{"tiny p is the min", ms(3, 9, 1), 0.1, 1 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			orig := fmt.Sprint(tt.ds)
			got := Percentile(tt.ds, tt.p)
			assert.Equal(t, tt.want, got, "Percentile(%v, %v) = %v, want %v", tt.ds, tt.p, got, tt.want)
			assert.Equal(t, orig, fmt.Sprint(tt.ds), "input reordered: %v", tt.ds)
		})
	}
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func rec(id string, st enumspb.WorkflowExecutionStatus, dur time.Duration, res *rollout.Result) RolloutRecord {
	r := RolloutRecord{RolloutID: id, WorkflowID: rollout.WorkflowID(id), Status: st, Start: t0, Result: res}
	if r.Closed() {
		r.Close = t0.Add(dur)
	}
	return r
}

func TestSummarize(t *testing.T) {
	recs := []RolloutRecord{
		rec("a", completed, 1*time.Second, &rollout.Result{Reward: 1, Turns: 3}),
		rec("b", completed, 3*time.Second, &rollout.Result{Reward: 0, Turns: 5}),
		rec("c", completed, 2*time.Second, &rollout.Result{Reward: 0.5, Turns: 7}),
		rec("d", failed, 9*time.Second, nil),
		rec("e", term, 9*time.Second, nil),
		rec("f", running, 0, nil),
		rec("g", canAsNew, 0, nil),
	}
	got := Summarize(recs)
	want := Summary{
		Rollouts: 7, Completed: 3, Failed: 2, Running: 2,
		MeanReward: 0.5, MeanTurns: 5,
		P50: 2 * time.Second, P95: 3 * time.Second,
	}
	require.Equal(t, want, got, "Summarize = %+v\nwant        %+v", got, want)
	assert.Equal(t, Summary{}, Summarize(nil), "empty set")

}

func info(t *testing.T, id, run string, st enumspb.WorkflowExecutionStatus, start time.Time, attempt int64, phase string) *workflowpb.WorkflowExecutionInfo {
	i := &workflowpb.WorkflowExecutionInfo{
		Execution: &commonpb.WorkflowExecution{WorkflowId: rollout.WorkflowID(id), RunId: run},
		Status:    st,
		StartTime: timestamppb.New(start),
		SearchAttributes: &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{
			rollout.SARolloutID:      temporalfake.Payload(id),
			rollout.SARolloutSet:     temporalfake.Payload("s1"),
			rollout.SARolloutAttempt: temporalfake.Payload(attempt),
			rollout.SARolloutTurn:    temporalfake.Payload(int64(4)),
			rollout.SARolloutPhase:   temporalfake.Payload(phase),
		}},
	}
	if st != running {
		i.CloseTime = timestamppb.New(start.Add(time.Second))
	}
	return i
}

func TestLatestRuns(t *testing.T) {
	infos := []*workflowpb.WorkflowExecutionInfo{
		info(t, "s1-0001", "r1b", running, t0.Add(time.Minute), 1, "model"),
		info(t, "s1-0001", "r1a", term, t0, 0, "environment"),
		info(t, "s1-0000", "r0a", canAsNew, t0, 0, "model"),
		info(t, "s1-0000", "r0b", completed, t0.Add(time.Second), 0, "completed"),
		// A tie on start time: the open run is the successor.
		info(t, "s1-0002", "r2x", canAsNew, t0, 0, "model"),
		info(t, "s1-0002", "r2y", running, t0, 0, "verifying"),
	}
	got := latestRuns(infos)
	want := []struct {
		id, run, phase string
		attempt        int64
	}{
		{"s1-0000", "r0b", "completed", 0},
		{"s1-0001", "r1b", "model", 1},
		{"s1-0002", "r2y", "verifying", 0},
	}
	require.Len(t, got, len(want), "got %d records: %+v", len(got), got)
	for i, w := range want {
		g := got[i]
		require.Equal(t, w.id, g.RolloutID, "record %d = %+v, want %+v", i, g, w)
		require.Equal(t, w.run, g.RunID, "record %d = %+v, want %+v", i, g, w)
		require.Equal(t, w.phase, g.Phase, "record %d = %+v, want %+v", i, g, w)
		require.Equal(t, w.attempt, g.Attempt, "record %d = %+v, want %+v", i, g, w)
		require.Equal(t, int64(4), g.Turn, "record %d = %+v, want %+v", i, g, w)
	}
	require.True(t, got[0].Close.Equal(t0.Add(2*time.Second)), "close times: %v %v", got[0].Close, got[1].Close)
	require.True(t, got[1].Close.IsZero(), "close times: %v %v", got[0].Close, got[1].Close)

	counts := CountStatus(got)
	require.Equal(t, 1, counts.Phases["completed"], "CountStatus = %+v", counts)
	require.Equal(t, 1, counts.Phases["model"], "CountStatus = %+v", counts)
	require.Equal(t, 2, counts.Statuses["Running"], "CountStatus = %+v", counts)
	require.Equal(t, 1, counts.Statuses["Completed"], "CountStatus = %+v", counts)
}

func TestRecordWithoutSearchAttributes(t *testing.T) {
	r := recordFromInfo(&workflowpb.WorkflowExecutionInfo{
		Execution: &commonpb.WorkflowExecution{WorkflowId: "rollout/x-0001", RunId: "r"},
		Status:    running,
	})
	require.Equal(t, "x-0001", r.RolloutID, "record = %+v", r)
	require.Equal(t, "", r.Phase, "record = %+v", r)
	require.Equal(t, int64(0), r.Attempt, "record = %+v", r)
}

func TestListLatestPagesThroughAll(t *testing.T) {
	var pages [][]*workflowpb.WorkflowExecutionInfo
	for p := 0; p < 3; p++ {
		var page []*workflowpb.WorkflowExecutionInfo
		for i := 0; i < 2; i++ {
			page = append(page, info(t, RolloutID("s1", p*2+i), "r", running, t0, 0, "model"))
		}
		pages = append(pages, page)
	}
	pages = append(pages, nil) // an empty last page with no token
	l := &temporalfake.Client{Pages: pages}
	got, err := listLatest(t.Context(), l, "s1")
	require.NoError(t, err)
	queries := l.ListQueries()
	require.Len(t, got, 6, "got %d runs in %d calls", len(got), len(queries))
	require.Len(t, queries, 4, "got %d runs in %d calls", len(got), len(queries))
	assert.Equal(t, `RolloutSet = "s1"`, queries[3], "query")
}

func withEnv(r RolloutRecord, env string) RolloutRecord {
	r.Env = env
	return r
}

func TestSummarizeByEnv(t *testing.T) {
	res := func(reward float64, turns int) *rollout.Result {
		return &rollout.Result{Reward: reward, Turns: turns}
	}
	recs := []RolloutRecord{
		withEnv(rec("c0", completed, time.Second, res(1, 4)), "counter"),
		withEnv(rec("c1", completed, time.Second, res(0, 6)), "counter"),
		withEnv(rec("c2", failed, time.Second, nil), "counter"),
		withEnv(rec("b0", completed, time.Second, res(2, 10)), "blackjack"),
		withEnv(rec("b1", completed, time.Second, res(-1, 4)), "blackjack"),
		withEnv(rec("b2", completed, time.Second, res(0, 7)), "blackjack"),
		withEnv(rec("b3", running, 0, nil), "blackjack"),
		withEnv(rec("w0", completed, time.Second, res(0.5, 9)), "workplace"),
		withEnv(rec("w1", canAsNew, 0, nil), "workplace"),
		withEnv(rec("w2", term, time.Second, nil), "workplace"),
		rec("x0", failed, time.Second, nil),
	}
	got := SummarizeByEnv(recs)
	want := []EnvSummary{
		{Env: UnknownEnv, Rollouts: 1, Failed: 1},
		{Env: "blackjack", Rollouts: 4, Completed: 3, Running: 1, Passed: 1, MeanReward: 1.0 / 3, MeanTurns: 7},
		{Env: "counter", Rollouts: 3, Completed: 2, Failed: 1, Passed: 1, MeanReward: 0.5, MeanTurns: 5},
		{Env: "workplace", Rollouts: 3, Completed: 1, Failed: 1, Running: 1, MeanReward: 0.5, MeanTurns: 9},
	}
	require.Len(t, got, len(want), "SummarizeByEnv = %+v\nwant %+v", got, want)
	for i := range want {
		assert.Equal(t, want[i], got[i], "row %d = %+v\nwant   %+v", i, got[i], want[i])
	}
	assert.Empty(t, SummarizeByEnv(nil), "empty set")
}

func TestPassed(t *testing.T) {
	tests := []struct {
		env    string
		reward float64
		want   bool
	}{
		{"counter", 1, true},
		{"counter", 0.99, false},
		{"workplace", 1, true},
		{"sandbox", 0, false},
		{"arithmetic", 1, true},
		{"blackjack", 1, true},
		{"blackjack", 0.5, true},
		{"blackjack", 0, false},
		{"blackjack", -2, false},
	}
	for _, tt := range tests {
		got := Passed(tt.env, tt.reward)
		assert.Equal(t, tt.want, got, "Passed(%q, %v) = %v, want %v", tt.env, tt.reward, got, tt.want)
	}
}

func TestRecordEnvFromMemo(t *testing.T) {
	i := info(t, "s1-0003", "r", running, t0, 0, "model")
	i.Memo = &commonpb.Memo{Fields: map[string]*commonpb.Payload{rollout.MemoEnv: temporalfake.Payload("sandbox")}}
	r := recordFromInfo(i)
	assert.Equal(t, "sandbox", r.Env, "env %q, want sandbox", r.Env)
}
