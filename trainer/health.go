package trainer

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"

	"github.com/turnstile-rl/turnstile/internal/fanout"
	"github.com/turnstile-rl/turnstile/internal/visibility"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// A set's health is what a trainer needs to decide whether to keep waiting
// (NeMo-RL #3488: a run idled for hours on an empty buffer after every
// collector had died, because nothing said so). It is computed from
// visibility counts and a bounded sample, never by describing every
// rollout: a few CountWorkflow calls, one page of at most Sample stuck
// rollouts, Sample descriptions of rollouts waiting on the model, and a scan
// of the runs that finished within the window (at most maxHealthScan).

// Health states.
const (
	HealthOK       = "ok"
	HealthDegraded = "degraded"
	HealthStalled  = "stalled"
)

// Health describes a set now.
type Health struct {
	// State is HealthOK, HealthDegraded (failures, model errors or stuck
	// rollouts) or HealthStalled (no progress within the window while
	// rollouts run); Reason says why it is not ok.
	State string `json:"state"`
	// Rollouts counts the set's rollouts; Completed their completed runs
	// (acknowledged, or never held); Failed the runs that failed, timed
	// out or were cancelled (a restore terminates the attempts it replaces,
	// so terminated runs are not counted); Running the running runs, Held
	// of which hold a result for acknowledgement.
	Rollouts  int `json:"rollouts"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	Running   int `json:"running"`
	Held      int `json:"held"`
	// Queued counts the rollouts the set's admission has not started yet
	// (those of a submission still arriving included); they are part of
	// Rollouts.
	Queued int `json:"queued"`
	// Admitting counts the rollouts the set's admission started and has not
	// heard finish working. A rollout it just started shows in Running a
	// moment later (visibility lags); until then only this counts it.
	Admitting int `json:"admitting"`
	// ProgressPerMin counts rollouts finished (held, completed or failed)
	// per minute over the window.
	ProgressPerMin float64 `json:"progress_per_min"`
	// ConsecutiveFailures counts rollouts that failed, in completion order,
	// after the last one that succeeded, among those finished within the
	// window.
	ConsecutiveFailures int `json:"consecutive_failures"`
	// ModelErrorRate is the share of sampled rollouts waiting on a model
	// call whose call has failed at least once; ModelErrors are the
	// distinct last failures seen (at most healthErrors).
	ModelErrorRate float64  `json:"model_error_rate"`
	ModelErrors    []string `json:"model_errors"`
	// Stuck are running rollouts (at most Sample) that made no progress
	// within the window.
	Stuck []string `json:"stuck"`
	// ServerRecoveries are the environment servers the set's watchdog
	// (automatic recovery) declared dead, one line each: when, and onto
	// which replacement it recovered how many rollouts. A recovery still
	// running or failed makes the set degraded.
	ServerRecoveries []string `json:"server_recoveries"`
	Reason           string   `json:"reason"`
	WindowMS         int64    `json:"window_ms"`
}

// HealthRequest asks for a set's health over the window ending Now.
type HealthRequest struct {
	Set    string
	Window time.Duration
	Now    time.Time
	// Sample bounds the rollouts described for model errors and listed as
	// stuck (default healthSample).
	Sample int
}

// Bounds of a health computation.
const (
	healthSample  = 8
	healthErrors  = 3
	maxHealthScan = 5000
)

// healthSource is what a health computation reads from Temporal.
type healthSource interface {
	visibility.Lister
	CountWorkflow(ctx context.Context, req *workflowservice.CountWorkflowExecutionsRequest) (*workflowservice.CountWorkflowExecutionsResponse, error)
	DescribeWorkflowExecution(ctx context.Context, workflowID, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error)
	admissionQuerier
}

// Health computes r.Set's health.
func (c *Client) Health(ctx context.Context, r HealthRequest) (Health, error) {
	if err := rollout.ValidateSet(r.Set); err != nil {
		return Health{}, err
	}
	if r.Window <= 0 {
		return Health{}, fmt.Errorf("health window %s: want a positive duration", r.Window)
	}
	return setHealth(ctx, c.tc, r)
}

// Visibility filters of a health computation.
var (
	runningQ  = `ExecutionStatus = "Running"`
	heldQ     = fmt.Sprintf(`ExecutionStatus = "Running" AND %s = %q`, rollout.SARolloutPhase, rollout.PhaseAwaitingAck)
	workingQ  = fmt.Sprintf(`ExecutionStatus = "Running" AND %[1]s != %[2]q AND %[1]s != %[3]q`, rollout.SARolloutPhase, rollout.PhaseAwaitingAck, rollout.PhaseParked)
	failedQ   = `(ExecutionStatus = "Failed" OR ExecutionStatus = "TimedOut" OR ExecutionStatus = "Canceled")`
	rolloutsQ = fmt.Sprintf(`%s = 0 AND ExecutionStatus != "ContinuedAsNew"`, rollout.SARolloutAttempt)
)

// healthCounts are the counts of a health computation.
type healthCounts struct {
	attempt0, working, progressed, finished int
}

// Settled says nothing of the set is left to run: no run is running, the
// admission has no rollout to start and none it started still working.
func (h Health) Settled() bool { return h.Running == 0 && h.Queued == 0 && h.Admitting == 0 }

func setHealth(ctx context.Context, src healthSource, r HealthRequest) (Health, error) {
	if r.Sample < 1 {
		r.Sample = healthSample
	}
	h := Health{State: HealthOK, WindowMS: r.Window.Milliseconds(), ModelErrors: []string{}, Stuck: []string{}, ServerRecoveries: []string{}}
	// A namespace set up before the progress attributes existed has no
	// RolloutFinishedAt to count by: health without the watchdog then.
	watchdog, err := hasProgressAttributes(ctx, src, r.Set)
	if err != nil {
		return Health{}, err
	}
	var n healthCounts
	sinceTS := visibility.VisibilityTime(r.Now.Add(-r.Window))
	if err := countAll(ctx, src, r.Set, healthFilters(&h, &n, sinceTS, watchdog)); err != nil {
		return Health{}, err
	}
	adm, _, err := queryAdmission(ctx, src, r.Set)
	if err != nil {
		return Health{}, err
	}
	h.Queued, h.Admitting = adm.Queued+max(0, adm.Total-adm.Enqueued), adm.Running
	h.Rollouts = max(n.attempt0, h.Running+h.Completed+h.Failed) + h.Queued
	h.ProgressPerMin = float64(n.finished) / r.Window.Minutes()
	if err := sampleModel(ctx, src, r, &h); err != nil {
		return Health{}, err
	}
	if watchdog {
		if err := sampleStuck(ctx, src, r, sinceTS, &h); err != nil {
			return Health{}, err
		}
		if h.ConsecutiveFailures, err = failureStreak(ctx, src, r.Set, sinceTS); err != nil {
			return Health{}, err
		}
	}
	decls, err := serverDeclarations(ctx, src, r.Set)
	if err != nil {
		return Health{}, err
	}
	judge(&h, r, n, watchdog)
	noteRecoveries(&h, decls)
	return h, nil
}

// serverDeclarations are the declarations in the memo of the set's
// watchdog (none without one).
func serverDeclarations(ctx context.Context, src healthSource, set string) ([]checkpoint.Declaration, error) {
	id := checkpoint.WatchdogWorkflowID(set)
	d, err := src.DescribeWorkflowExecution(ctx, id, "")
	var notFound *serviceerror.NotFound
	switch {
	case errors.As(err, &notFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("look up %s: %w", id, err)
	}
	p, ok := d.GetWorkflowExecutionInfo().GetMemo().GetFields()[checkpoint.MemoDeclarations]
	if !ok {
		return nil, nil
	}
	var decls []checkpoint.Declaration
	if err := converter.GetDefaultDataConverter().FromPayload(p, &decls); err != nil {
		return nil, fmt.Errorf("memo %s of %s: %w", checkpoint.MemoDeclarations, id, err)
	}
	return decls, nil
}

// noteRecoveries lists the declarations in h; one whose recovery runs or
// failed makes an ok set degraded.
func noteRecoveries(h *Health, decls []checkpoint.Declaration) {
	var why []string
	for _, d := range decls {
		h.ServerRecoveries = append(h.ServerRecoveries, d.Summary())
		if d.Error != "" || d.RecoveredAt.IsZero() {
			why = append(why, d.Summary())
		}
	}
	if len(why) == 0 {
		return
	}
	if h.State == HealthOK {
		h.State = HealthDegraded
	}
	h.Reason = strings.Join(append([]string{h.Reason}, why...), "; ")
	h.Reason = strings.TrimPrefix(h.Reason, "; ")
}

// healthCount is one count of a health computation.
type healthCount struct {
	dst    *int
	filter string
}

// healthFilters are the counts of a health computation: those by the
// progress attributes only when the namespace has them.
func healthFilters(h *Health, n *healthCounts, sinceTS string, watchdog bool) []healthCount {
	counts := []healthCount{
		{&n.attempt0, rolloutsQ}, {&h.Running, runningQ}, {&h.Held, heldQ},
		{&h.Completed, `ExecutionStatus = "Completed"`}, {&h.Failed, failedQ}, {&n.working, workingQ},
	}
	if !watchdog {
		return counts
	}
	// A run that ended without publishing its finish (terminated, timed
	// out, or cancelled in the middle of a call) counts by its close time:
	// counted after the working ones, a run that closes between the counts
	// is seen here, and a set whose rollouts were all just cancelled is not
	// called stalled.
	return append(counts,
		healthCount{&n.finished, fmt.Sprintf(`(%s >= %s OR (CloseTime >= %[2]s AND (ExecutionStatus = "Terminated" OR ExecutionStatus = "TimedOut" OR ExecutionStatus = "Canceled")))`, rollout.SARolloutFinishedAt, sinceTS)},
		healthCount{&n.progressed, fmt.Sprintf(`ExecutionStatus = "Running" AND (%s >= %s OR StartTime >= %[2]s)`, rollout.SARolloutProgressAt, sinceTS)})
}

func countAll(ctx context.Context, src healthSource, set string, counts []healthCount) error {
	for _, c := range counts {
		v, err := countSet(ctx, src, set, c.filter)
		if err != nil {
			return err
		}
		*c.dst = v
	}
	return nil
}

// countSet counts the runs of set matching filter.
func countSet(ctx context.Context, src healthSource, set, filter string) (int, error) {
	q := rollout.SetQuery(set) + " AND " + filter
	resp, err := src.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: q})
	if err != nil {
		return 0, fmt.Errorf("count rollouts of set %q (%s): %w", set, q, err)
	}
	return int(resp.GetCount()), nil
}

// sampleStuck lists up to r.Sample rollouts working without progress
// within the window.
func sampleStuck(ctx context.Context, src healthSource, r HealthRequest, sinceTS string, h *Health) error {
	stuckQ := fmt.Sprintf(`%s AND %s < %s AND StartTime < %[3]s`, workingQ, rollout.SARolloutProgressAt, sinceTS)
	stuck, err := listSome(ctx, src, r.Set, stuckQ, r.Sample)
	if err != nil {
		return err
	}
	for _, info := range stuck {
		h.Stuck = append(h.Stuck, PositionOf(info).RolloutID)
	}
	sort.Strings(h.Stuck)
	return nil
}

// sampleModel describes up to r.Sample rollouts waiting on the model, for
// the model error rate.
func sampleModel(ctx context.Context, src healthSource, r HealthRequest, h *Health) error {
	modelQ := fmt.Sprintf(`ExecutionStatus = "Running" AND %s = %q`, rollout.SARolloutPhase, rollout.PhaseModel)
	waiting, err := listSome(ctx, src, r.Set, modelQ, r.Sample)
	if err != nil {
		return err
	}
	failing, msgs, err := modelFailures(ctx, src, waiting)
	if err != nil {
		return err
	}
	if len(waiting) > 0 {
		h.ModelErrorRate = float64(failing) / float64(len(waiting))
	}
	h.ModelErrors = msgs
	return nil
}

// listSome returns one page of at most n runs of set matching filter.
func listSome(ctx context.Context, l visibility.Lister, set, filter string, n int) ([]*workflowpb.WorkflowExecutionInfo, error) {
	q := rollout.SetQuery(set) + " AND " + filter
	resp, err := l.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: q, PageSize: int32(n)})
	if err != nil {
		return nil, fmt.Errorf("list rollouts of set %q (%s): %w", set, q, err)
	}
	execs := resp.GetExecutions()
	return execs[:min(n, len(execs))], nil
}

// modelFailures describes the runs and counts those whose pending model
// call has failed at least once, with the distinct last failures.
func modelFailures(ctx context.Context, src healthSource, runs []*workflowpb.WorkflowExecutionInfo) (int, []string, error) {
	failed := make([]string, len(runs))
	err := fanout.Each(ctx, len(runs), healthSample, func(ctx context.Context, i int) error {
		ex := runs[i].GetExecution()
		d, err := src.DescribeWorkflowExecution(ctx, ex.GetWorkflowId(), ex.GetRunId())
		if err != nil {
			return fmt.Errorf("describe %s: %w", ex.GetWorkflowId(), err)
		}
		for _, pa := range d.GetPendingActivities() {
			if pa.GetActivityType().GetName() != rollout.CallModelName || pa.GetAttempt() < 2 {
				continue
			}
			failed[i] = "model call retrying (attempt " + fmt.Sprint(pa.GetAttempt()) + ")"
			if msg := pa.GetLastFailure().GetMessage(); msg != "" {
				failed[i] = withoutCallID(msg)
			}
		}
		return nil
	})
	if err != nil {
		return 0, nil, err
	}
	n, msgs := 0, []string{}
	for _, f := range failed {
		if f == "" {
			continue
		}
		n++
		if len(msgs) < healthErrors && !contains(msgs, f) {
			msgs = append(msgs, f)
		}
	}
	return n, msgs, nil
}

// callIDPrefix is the model call id a model activity's error starts with
// ("s1-0002/a0/t1: call model …"): left out, so the same failure of many
// rollouts reads once.
var callIDPrefix = regexp.MustCompile(`^\S+/a\d+/t\d+: `)

func withoutCallID(msg string) string { return callIDPrefix.ReplaceAllString(msg, "") }

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// Filters of a failure streak: a finished run failed (it ended without a
// result, or published the failed phase on its way there) or succeeded
// (holds or completed with a result).
var (
	runFailedQ    = fmt.Sprintf(`(ExecutionStatus = "Failed" OR ExecutionStatus = "TimedOut" OR ExecutionStatus = "Canceled" OR %s = %q)`, rollout.SARolloutPhase, rollout.PhaseFailed)
	runSucceededQ = fmt.Sprintf(`(ExecutionStatus = "Completed" OR (ExecutionStatus = "Running" AND %s = %q))`, rollout.SARolloutPhase, rollout.PhaseAwaitingAck)
)

// failureStreak counts the rollouts that failed after the last one that
// succeeded, in completion order, among those that finished since sinceTS.
// It reads the failures of the window (at most maxHealthScan) and no
// success: a binary search over the failures, newest first, counts the
// successes finished after each (SQL visibility cannot ORDER BY to find the
// newest success), so a healthy set of thousands costs a few counts.
func failureStreak(ctx context.Context, src healthSource, set string, sinceTS string) (int, error) {
	var fails []time.Time
	filter := fmt.Sprintf(`%s >= %s AND %s`, rollout.SARolloutFinishedAt, sinceTS, runFailedQ)
	err := visibility.ListSet(ctx, src, set, filter, func(info *workflowpb.WorkflowExecutionInfo) error {
		if len(fails) >= maxHealthScan {
			return errScanDone
		}
		at, _ := visibility.SATime(info.GetSearchAttributes(), rollout.SARolloutFinishedAt)
		fails = append(fails, at)
		return nil
	})
	if err != nil && err != errScanDone {
		return 0, err
	}
	sort.Slice(fails, func(i, j int) bool { return fails[i].After(fails[j]) })
	// The streak is the largest k such that no success finished after the
	// k-th newest failure.
	var countErr error
	k := sort.Search(len(fails), func(i int) bool {
		if countErr != nil {
			return true
		}
		n, err := countSet(ctx, src, set, fmt.Sprintf(`%s > %s AND %s`, rollout.SARolloutFinishedAt, visibility.VisibilityTime(fails[i]), runSucceededQ))
		countErr = err
		return n > 0
	})
	return k, countErr
}

// errScanDone stops a scan that has read enough.
var errScanDone = errors.New("scan bound reached")

// judge sets h's state and reason: stalled when rollouts are working and
// none progressed within the window (with the watchdog on), degraded on
// failures, model errors or stuck rollouts.
func judge(h *Health, r HealthRequest, n healthCounts, watchdog bool) {
	var why []string
	if !watchdog {
		why = append(why, fmt.Sprintf("no watchdog: the namespace lacks the search attributes %s and %s (run starter setup; sets submitted after it have them)", rollout.SARolloutProgressAt, rollout.SARolloutFinishedAt))
	}
	if watchdog && n.working > 0 && n.progressed == 0 && n.finished == 0 {
		h.State = HealthStalled
		why = append(why, fmt.Sprintf("no rollout of set %s made progress in the last %s while %d are working", r.Set, r.Window, n.working))
	}
	if len(h.ModelErrors) > 0 {
		why = append(why, fmt.Sprintf("model calls failing in %.0f%% of sampled rollouts: %s", 100*h.ModelErrorRate, strings.Join(h.ModelErrors, "; ")))
	}
	if len(h.Stuck) > 0 && h.State != HealthStalled {
		why = append(why, fmt.Sprintf("%d rollouts without progress for %s (e.g. %s)", len(h.Stuck), r.Window, h.Stuck[0]))
	}
	if h.ConsecutiveFailures > 0 {
		why = append(why, fmt.Sprintf("%d consecutive failures", h.ConsecutiveFailures))
	}
	if len(why) > 0 && h.State == HealthOK && (watchdog || len(why) > 1) {
		h.State = HealthDegraded
	}
	h.Reason = strings.Join(why, "; ")
}
