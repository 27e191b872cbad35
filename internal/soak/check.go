package soak

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"

	"github.com/turnstile-rl/turnstile/internal/stack"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
	"github.com/turnstile-rl/turnstile/internal/visibility"
	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// drain waits until every rollout started has ended for good.
func (r *run) drain(ctx context.Context) error {
	began := time.Now()
	defer func() { r.report.Drain = time.Since(began) }()
	r.cfg.Logf("%s draining %d rollouts", r.since(), r.submitted)
	var lastErr error
	err := stack.WaitFor(ctx, "every rollout closed", nil, r.cfg.DrainTimeout, func() bool {
		n, err := r.closed(ctx)
		lastErr = err
		return err == nil && n >= r.submitted
	})
	if err != nil && lastErr != nil {
		return lastErr
	}
	return err
}

// check runs the end-of-soak checks; what fails goes to Problems.
func (r *run) check(ctx context.Context) {
	r.checkRuns(ctx)
	want := r.checkResults(ctx)
	r.checkExport(ctx)
	r.checkCounters(ctx, want)
	r.checkFlat()
}

// checkRuns: every rollout has exactly one completed run and no run that
// timed out or was cancelled. A terminated or failed run is fine only below
// the attempt that completed (see judgeRuns).
// The judgment is judgeRuns; this lists the runs for it.
func (r *run) checkRuns(ctx context.Context) {
	runs := map[string][]runView{}
	err := visibility.ListSet(ctx, r.st.tc, r.set, "", func(e *workflowpb.WorkflowExecutionInfo) error {
		v := runView{RunID: e.GetExecution().GetRunId(), Status: e.GetStatus(),
			Start: e.GetStartTime().AsTime(), Close: e.GetCloseTime().AsTime()}
		v.Attempt, v.HasAttempt = visibility.SAInt(e.GetSearchAttributes(), rollout.SARolloutAttempt)
		id := e.GetExecution().GetWorkflowId()
		runs[id] = append(runs[id], v)
		return nil
	})
	if err != nil {
		r.problem("list runs: %v", err)
		return
	}
	for i := range r.submitted {
		id := rollout.WorkflowID(trainer.RolloutID(r.set, i))
		for _, p := range judgeRuns(runs[id]) {
			r.problem("%s: %s", id, p)
		}
	}
	for _, rs := range runs {
		if completedRun(rs) != nil {
			r.report.Completed++
		}
	}
}

// runView is one run of a rollout as visibility lists it.
type runView struct {
	RunID        string
	Status       enumspb.WorkflowExecutionStatus
	Attempt      int64
	HasAttempt   bool
	Start, Close time.Time
}

func (v runView) String() string {
	attempt := "no RolloutAttempt"
	if v.HasAttempt {
		attempt = fmt.Sprintf("attempt %d", v.Attempt)
	}
	closed := ""
	if !v.Close.IsZero() && v.Close.Unix() > 0 {
		closed = " closed " + v.Close.UTC().Format("15:04:05.000")
	}
	return fmt.Sprintf("run %s (%s, %s, started %s%s)", v.RunID, strings.ToLower(strings.TrimPrefix(v.Status.String(), "WORKFLOW_EXECUTION_STATUS_")),
		attempt, v.Start.UTC().Format("15:04:05.000"), closed)
}

// completedRun is the rollout's first completed run, nil when none.
func completedRun(runs []runView) *runView {
	for i := range runs {
		if runs[i].Status == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
			return &runs[i]
		}
	}
	return nil
}

// judgeRuns names what is wrong with one rollout's runs: not exactly one
// completed run; a run that failed, timed out or was cancelled; a
// terminated run not below the completed run's attempt (an older attempt
// that completed after a newer one started breaks the fence). Each
// problem names the runs it compares, with their attempts and times, so a
// report tells a fencing violation from a misread attribute. A run
// without RolloutAttempt (every start sets it) is a problem of its own,
// never read as attempt 0.
func judgeRuns(runs []runView) []string {
	var out []string
	var completed []runView
	for _, v := range runs {
		if v.Status == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
			completed = append(completed, v)
		}
	}
	if len(completed) != 1 {
		out = append(out, fmt.Sprintf("%d completed runs, want 1%s", len(completed), listRuns(completed)))
	}
	for _, v := range runs {
		switch v.Status {
		case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING,
			enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW:
			if !v.HasAttempt {
				out = append(out, fmt.Sprintf("%s has no RolloutAttempt", v))
			}
		case enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, enumspb.WORKFLOW_EXECUTION_STATUS_FAILED:
			// Superseded: recovery terminates the runs it replaces, and a
			// run whose environment server died may fail before recovery
			// reaches it (its calls are refused); either is fine below the
			// attempt that completed, and a fence broken otherwise.
			if len(completed) != 1 {
				out = append(out, fmt.Sprintf("%s closed without completing and no single run completed", v))
			} else if c := completed[0]; !v.HasAttempt || !c.HasAttempt || v.Attempt >= c.Attempt {
				out = append(out, fmt.Sprintf("%s closed without completing, not below the completed %s", v, c))
			}
		default:
			out = append(out, fmt.Sprintf("%s closed without completing", v))
		}
	}
	return out
}

// listRuns is ": run, run" for a problem message, empty for none.
func listRuns(runs []runView) string {
	if len(runs) == 0 {
		return ""
	}
	s := make([]string, len(runs))
	for i, v := range runs {
		s[i] = v.String()
	}
	return ": " + strings.Join(s, "; ")
}

// checkResults: each completed rollout holds one result with its own
// receipt. It returns the environment mutations each server should have
// applied: per rollout a start, one per operation and a verify.
func (r *run) checkResults(ctx context.Context) [2]int64 {
	var want [2]int64
	recs, err := r.ts.Results(ctx, r.set)
	if err != nil {
		r.problem("results: %v", err)
		return want
	}
	for _, rec := range recs {
		res := rec.Result
		switch {
		case res == nil:
			r.problem("%s: no result (%s)", rec.RolloutID, rec.Err)
			continue
		case res.Receipt == nil:
			r.problem("%s: result without receipt", rec.RolloutID)
		case res.Receipt.RolloutID != rec.RolloutID || res.Receipt.Attempt != res.Attempt:
			r.problem("%s: receipt %+v is not its own (attempt %d)", rec.RolloutID, *res.Receipt, res.Attempt)
		}
		want[r.serverOf[rec.RolloutID]] += int64(2 + len(res.StepRewards))
	}
	return want
}

// checkExport: the export holds every rollout exactly once.
func (r *run) checkExport(ctx context.Context) {
	store, err := transcriptstore.Open(r.st.store)
	if err != nil {
		r.problem("transcript store: %v", err)
		return
	}
	var buf bytes.Buffer
	stats, err := r.ts.Export(ctx, r.set, store, &buf)
	if err != nil {
		r.problem("export: %v", err)
		return
	}
	r.report.Exported = stats.Completed
	lines := map[string]int{}
	sc := bufio.NewScanner(&buf)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var line struct {
			RolloutID string `json:"rollout_id"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			r.problem("export line: %v", err)
			return
		}
		lines[line.RolloutID]++
	}
	if stats.Failed > 0 {
		r.problem("export: %d failed rollouts", stats.Failed)
	}
	for i := range r.submitted {
		if id := trainer.RolloutID(r.set, i); lines[id] != 1 {
			r.problem("export: %s on %d lines, want 1", id, lines[id])
		}
	}
}

// checkCounters: a server that lived through the soak applied exactly the
// mutations its rollouts' results account for (replays of re-sent
// requests are counted apart); a replaced one is only reported.
func (r *run) checkCounters(ctx context.Context, want [2]int64) {
	for i := range r.st.envs {
		r.st.mu.Lock()
		m := *r.st.envs[i]
		r.st.mu.Unlock()
		stats, err := protocol.NewDataClient(m.url, dataToken, nil).Stats(ctx)
		if err != nil {
			r.problem("%s stats: %v", m.role, err)
			continue
		}
		c := EnvCounters{Name: m.role, Killed: m.killed, Applied: stats.Applied, Want: want[i],
			Replayed: stats.Replayed, Parked: stats.Parked, Refused: stats.Refused, Sessions: stats.Sessions}
		r.report.Envs = append(r.report.Envs, c)
		if !c.Killed && c.Applied != c.Want {
			r.problem("%s applied %d mutations, its rollouts' results account for %d", m.role, c.Applied, c.Want)
		}
	}
}
