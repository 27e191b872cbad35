package soak

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
)

func TestJudgeRuns(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 20, 24, 0, 0, time.UTC)
	run := func(id string, st enumspb.WorkflowExecutionStatus, attempt int64, has bool) runView {
		return runView{RunID: id, Status: st, Attempt: attempt, HasAttempt: has, Start: t0, Close: t0.Add(time.Minute)}
	}
	const (
		done = enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
		term = enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED
		fail = enumspb.WORKFLOW_EXECUTION_STATUS_FAILED
	)
	tests := []struct {
		name string
		runs []runView
		want []string // substrings, one per problem, in order
	}{
		{name: "one completed run", runs: []runView{run("a", done, 0, true)}},
		{name: "recovery ended attempt 0, attempt 1 completed",
			runs: []runView{run("old", term, 0, true), run("new", done, 1, true)}},
		{name: "older attempt completed, newer one terminated (a fence broken)",
			runs: []runView{run("new", term, 1, true), run("old", done, 0, true)},
			want: []string{"run new (terminated, attempt 1, started 20:24:00.000 closed 20:25:00.000) closed without completing, not below the completed run old (completed, attempt 0"}},
		{name: "terminated and completed runs of the same attempt",
			runs: []runView{run("x", term, 1, true), run("y", done, 1, true)},
			want: []string{"run x (terminated, attempt 1,"}},
		{name: "terminated run without an attempt is not read as attempt 0",
			runs: []runView{run("x", term, 0, false), run("y", done, 1, true)},
			want: []string{"run x (terminated, no RolloutAttempt,"}},
		{name: "completed run without an attempt is named, and the terminated one not judged against 0",
			runs: []runView{run("x", term, 0, true), run("y", done, 0, false)},
			want: []string{"run x (terminated, attempt 0", "run y (completed, no RolloutAttempt"}},
		{name: "failed run below the completed attempt (its server died, recovery moved it)",
			runs: []runView{run("x", fail, 0, true), run("y", done, 1, true)}},
		{name: "failed run at the completed attempt", runs: []runView{run("x", fail, 1, true), run("y", done, 1, true)},
			want: []string{"run x (failed, attempt 1, started 20:24:00.000 closed 20:25:00.000) closed without completing, not below the completed run y"}},
		{name: "two completed runs", runs: []runView{run("x", done, 0, true), run("y", done, 1, true)},
			want: []string{"2 completed runs, want 1: run x"}},
		{name: "no run", want: []string{"0 completed runs, want 1"}},
		{name: "terminated, nothing completed", runs: []runView{run("x", term, 0, true)},
			want: []string{"0 completed runs, want 1", "run x (terminated, attempt 0, started 20:24:00.000 closed 20:25:00.000) closed without completing and no single run completed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := judgeRuns(tt.runs)
			require.Len(t, got, len(tt.want), "problems: %q", got)
			for i, w := range tt.want {
				require.Contains(t, got[i], w)
			}
		})
	}
}
