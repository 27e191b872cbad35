package trainer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	failurepb "go.temporal.io/api/failure/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"

	"github.com/turnstile-rl/turnstile/internal/testsupport/temporalfake"
	"github.com/turnstile-rl/turnstile/internal/visibility"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
	"github.com/turnstile-rl/turnstile/workflows/set"
)

// healthAnswers answers counts by filter, lists by filter and describes
// runs with the pending model calls a test set.
type healthAnswers struct {
	counts   func(query string) int
	lists    func(query string) []*workflowpb.WorkflowExecutionInfo
	attempts map[string]int32 // workflow id → attempt of its pending model call
	failure  string
	// noAttributes: the namespace lacks the progress attributes.
	noAttributes bool
	// admission is the set's admission status (nil: the set has none).
	admission *set.AdmissionStatus
	// declarations are in the memo of the set's watchdog (nil: none).
	declarations []checkpoint.Declaration
}

// client is a Temporal client giving the answers.
func (f *healthAnswers) client() *temporalfake.Client {
	return &temporalfake.Client{
		Count: func(query string) (int64, error) {
			if f.noAttributes && strings.Contains(query, "At ") {
				return 0, errors.New("invalid query: search attribute RolloutProgressAt is not defined")
			}
			return int64(f.counts(query)), nil
		},
		List: func(query string) ([]*workflowpb.WorkflowExecutionInfo, error) { return f.lists(query), nil },
		Describe: func(workflowID, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
			resp := &workflowservice.DescribeWorkflowExecutionResponse{}
			if workflowID == checkpoint.WatchdogWorkflowID("s1") {
				if f.declarations == nil {
					return nil, serviceerror.NewNotFound("workflow not found: " + workflowID)
				}
				resp.WorkflowExecutionInfo = &workflowpb.WorkflowExecutionInfo{Memo: &commonpb.Memo{Fields: map[string]*commonpb.Payload{
					checkpoint.MemoDeclarations: temporalfake.Payload(f.declarations)}}}
			}
			if a, ok := f.attempts[workflowID]; ok {
				resp.PendingActivities = []*workflowpb.PendingActivityInfo{{
					ActivityType: &commonpb.ActivityType{Name: rollout.CallModelName}, Attempt: a,
					LastFailure: &failurepb.Failure{Message: workflowID[len("rollout/"):] + "/a0/t1: " + f.failure},
				}}
			}
			return resp, nil
		},
		Query: func(workflowID, _, _ string, _ ...any) (converter.EncodedValue, error) {
			if f.admission == nil {
				return nil, serviceerror.NewNotFound("workflow not found: " + workflowID)
			}
			return temporalfake.Value{V: *f.admission}, nil
		},
	}
}

// finishedRun is a listed run that finished at t0+at with a status and
// phase.
func finishedRun(t *testing.T, id string, st enumspb.WorkflowExecutionStatus, phase string, at time.Duration) *workflowpb.WorkflowExecutionInfo {
	i := info(t, id, "r", st, t0, 0, phase)
	i.SearchAttributes.IndexedFields[rollout.SARolloutFinishedAt] = temporalfake.Payload(t0.Add(at))
	return i
}

// TestHealth: a set whose working rollouts made no progress within the
// window is stalled, and the reason names the model errors (read once for
// many rollouts); progress makes it ok; failures since the last success
// make it degraded.
func TestHealth(t *testing.T) {
	waiting := []*workflowpb.WorkflowExecutionInfo{
		info(t, "s1-0000", "r", running, t0, 0, "model"), info(t, "s1-0001", "r", running, t0, 0, "model"),
	}
	tests := []struct {
		name       string
		progressed int
		attempts   map[string]int32
		finished   []*workflowpb.WorkflowExecutionInfo
		state      string
		streak     int
		rate       float64
		reason     []string
	}{
		{name: "stalled", attempts: map[string]int32{"rollout/s1-0000": 4, "rollout/s1-0001": 3}, state: HealthStalled, rate: 1,
			reason: []string{"no rollout of set s1 made progress in the last 5m0s while 3 are working", "model calls failing in 100% of sampled rollouts: call model: connection refused"}},
		{name: "progressing", progressed: 2, state: HealthOK},
		{name: "retrying", progressed: 1, attempts: map[string]int32{"rollout/s1-0001": 2}, state: HealthDegraded, rate: 0.5},
		{name: "failing", progressed: 1, state: HealthDegraded, streak: 2, finished: []*workflowpb.WorkflowExecutionInfo{
			finishedRun(t, "s1-0003", failed, "failed", time.Second),
			finishedRun(t, "s1-0004", running, "awaiting_ack", 2*time.Second),
			finishedRun(t, "s1-0005", failed, "failed", 3*time.Second),
			finishedRun(t, "s1-0006", enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED, "failed", 4*time.Second),
		}, reason: []string{"2 consecutive failures"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &healthAnswers{attempts: tt.attempts, failure: "call model: connection refused"}
			f.counts = func(q string) int {
				switch {
				case strings.Contains(q, runSucceededQ):
					return countAfter(t, q, tt.finished, false)
				case strings.Contains(q, rollout.SARolloutProgressAt):
					return tt.progressed
				case strings.Contains(q, rollout.SARolloutFinishedAt):
					return len(tt.finished)
				case strings.Contains(q, "RolloutPhase != "):
					return 3
				}
				return 1
			}
			f.lists = func(q string) []*workflowpb.WorkflowExecutionInfo {
				switch {
				case strings.Contains(q, `RolloutPhase = "model"`):
					return waiting
				case strings.Contains(q, runFailedQ):
					var out []*workflowpb.WorkflowExecutionInfo
					for _, i := range tt.finished {
						if failedRun(i) {
							out = append(out, i)
						}
					}
					return out
				}
				return nil
			}
			h, err := setHealth(context.Background(), f.client(), HealthRequest{Set: "s1", Window: 5 * time.Minute, Now: t0.Add(time.Hour)})
			require.NoError(t, err)
			require.Equal(t, tt.state, h.State, "health %+v", h)
			require.Equal(t, tt.streak, h.ConsecutiveFailures, "health %+v", h)
			require.Equal(t, tt.rate, h.ModelErrorRate, "health %+v", h)
			for _, r := range tt.reason {
				assert.Contains(t, h.Reason, r, "reason %q lacks %q", h.Reason, r)
			}
			if tt.rate > 0 {
				assert.Equal(t, "[call model: connection refused]", fmt.Sprint(h.ModelErrors), "model errors")
			}
		})
	}
}

// TestHealthCountsQueued: the rollouts the set's admission has not started
// are counted as queued, and as rollouts of the set.
func TestHealthCountsQueued(t *testing.T) {
	f := &healthAnswers{admission: &set.AdmissionStatus{Set: "s1", Queued: 7, Total: 20, Enqueued: 20},
		counts: func(string) int { return 1 }, lists: func(string) []*workflowpb.WorkflowExecutionInfo { return nil }}
	h, err := setHealth(context.Background(), f.client(), HealthRequest{Set: "s1", Window: time.Minute, Now: t0})
	require.NoError(t, err)
	require.Equal(t, 7, h.Queued)
	require.Equal(t, 1+1+1+7, h.Rollouts, "running + completed + failed + queued")
}

// TestHealthSettled: a set is settled only when nothing runs, nothing waits
// in its admission, no batch of its submission is still to arrive, and no
// rollout the admission started is still working (one just started is not
// in visibility yet: only the admission counts it).
func TestHealthSettled(t *testing.T) {
	none := func(string) int { return 0 }
	for _, tc := range []struct {
		name      string
		adm       *set.AdmissionStatus
		settled   bool
		queued    int
		admitting int
	}{
		{"no admission", nil, true, 0, 0},
		{"admission finished", &set.AdmissionStatus{Total: 8, Enqueued: 8}, true, 0, 0},
		{"queued", &set.AdmissionStatus{Total: 8, Enqueued: 8, Queued: 2}, false, 2, 0},
		{"batches to arrive", &set.AdmissionStatus{Total: 8, Enqueued: 5}, false, 3, 0},
		{"started, not visible yet", &set.AdmissionStatus{Total: 8, Enqueued: 8, Running: 4}, false, 0, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &healthAnswers{admission: tc.adm, counts: none, lists: func(string) []*workflowpb.WorkflowExecutionInfo { return nil }}
			h, err := setHealth(context.Background(), f.client(), HealthRequest{Set: "s1", Window: time.Minute, Now: t0})
			require.NoError(t, err)
			require.Equal(t, tc.queued, h.Queued, "health %+v", h)
			require.Equal(t, tc.admitting, h.Admitting, "health %+v", h)
			require.Equal(t, tc.settled, h.Settled(), "health %+v", h)
		})
	}
}

// TestHealthServerRecoveries: the watchdog's declarations are listed; one
// recovered leaves the set ok, one recovering or failed degrades it and
// says why.
func TestHealthServerRecoveries(t *testing.T) {
	at := time.Date(2026, 12, 1, 23, 0, 0, 0, time.UTC)
	done := checkpoint.Declaration{Server: "http://127.0.0.1:4", Replacement: "http://127.0.0.1:5", DeclaredAt: at, Misses: 6,
		RecoveredAt: at.Add(9 * time.Second), Recovered: 3}
	f := &healthAnswers{declarations: []checkpoint.Declaration{done},
		counts: func(q string) int { return 1 }, lists: func(string) []*workflowpb.WorkflowExecutionInfo { return nil }}
	h, err := setHealth(context.Background(), f.client(), HealthRequest{Set: "s1", Window: time.Minute, Now: t0})
	require.NoError(t, err)
	require.Equal(t, HealthOK, h.State, h.Reason)
	require.Equal(t, []string{"env server http://127.0.0.1:4 declared dead at 2026-12-01T23:00:00Z (6 probes missed), recovered 3 rollouts onto http://127.0.0.1:5"}, h.ServerRecoveries)

	failed := checkpoint.Declaration{Server: "http://127.0.0.1:6", DeclaredAt: at, Misses: 6, RecoveredAt: at, Error: "no checkpoint"}
	f.declarations = append(f.declarations, failed)
	h, err = setHealth(context.Background(), f.client(), HealthRequest{Set: "s1", Window: time.Minute, Now: t0})
	require.NoError(t, err)
	require.Equal(t, HealthDegraded, h.State)
	require.Len(t, h.ServerRecoveries, 2)
	require.Contains(t, h.Reason, "env server http://127.0.0.1:6 declared dead at 2026-12-01T23:00:00Z (6 probes missed), recovery failed: no checkpoint")

	f.declarations = nil
	h, err = setHealth(context.Background(), f.client(), HealthRequest{Set: "s1", Window: time.Minute, Now: t0})
	require.NoError(t, err)
	require.Equal(t, []string{}, h.ServerRecoveries, "no watchdog: none")
}

// TestHealthQueriesUseTheWindow: every time filter compares against the
// start of the window, as visibility spells a Datetime.
func TestHealthQueriesUseTheWindow(t *testing.T) {
	var queries []string
	f := &healthAnswers{
		counts: func(q string) int { queries = append(queries, q); return 0 },
		lists:  func(q string) []*workflowpb.WorkflowExecutionInfo { queries = append(queries, q); return nil },
	}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	_, err := setHealth(context.Background(), f.client(), HealthRequest{Set: "s1", Window: time.Minute, Now: now})
	require.NoError(t, err)
	since := `"2026-11-30T11:59:00Z"`
	for _, q := range queries {
		assert.True(t, strings.HasPrefix(q, `RolloutSet = "s1" AND `), "query %q is not limited to the set", q)
		if strings.Contains(q, "At ") && !strings.Contains(q, "1970-01-01") {
			assert.Contains(t, q, since, "query does not compare with the window's start")
		}
	}
}

// failedRun is the fake's reading of runFailedQ.
func failedRun(i *workflowpb.WorkflowExecutionInfo) bool {
	phase, _ := visibility.SAKeyword(i.GetSearchAttributes(), rollout.SARolloutPhase)
	return i.GetStatus() == failed || i.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED || phase == "failed"
}

// countAfter counts the successes (or failures) of runs that finished after
// the time a "RolloutFinishedAt > \"…\"" filter names.
func countAfter(t *testing.T, q string, runs []*workflowpb.WorkflowExecutionInfo, failures bool) int {
	t.Helper()
	_, rest, ok := strings.Cut(q, rollout.SARolloutFinishedAt+" > ")
	require.True(t, ok, "query %q has no lower bound", q)
	raw, _, _ := strings.Cut(rest[1:], `"`)
	after, err := time.Parse(time.RFC3339Nano, raw)
	require.NoError(t, err)
	n := 0
	for _, i := range runs {
		at, _ := visibility.SATime(i.GetSearchAttributes(), rollout.SARolloutFinishedAt)
		if at.After(after) && failedRun(i) == failures {
			n++
		}
	}
	return n
}

// TestFailureStreak: the failures after the newest success, found with a
// few counts (never a scan of the successes).
func TestFailureStreak(t *testing.T) {
	ok := func(at int) *workflowpb.WorkflowExecutionInfo {
		return finishedRun(t, fmt.Sprintf("s1-ok%d", at), enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, "completed", time.Duration(at)*time.Second)
	}
	bad := func(at int) *workflowpb.WorkflowExecutionInfo {
		return finishedRun(t, fmt.Sprintf("s1-bad%d", at), failed, "failed", time.Duration(at)*time.Second)
	}
	tests := []struct {
		name string
		runs []*workflowpb.WorkflowExecutionInfo
		want int
	}{
		{"none", nil, 0},
		{"only successes", []*workflowpb.WorkflowExecutionInfo{ok(1), ok(2)}, 0},
		{"only failures", []*workflowpb.WorkflowExecutionInfo{bad(1), bad(2), bad(3)}, 3},
		{"success last", []*workflowpb.WorkflowExecutionInfo{bad(1), bad(2), ok(3)}, 0},
		{"failures after a success", []*workflowpb.WorkflowExecutionInfo{bad(1), ok(2), bad(3), bad(4), bad(5), ok(0)}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			counts := 0
			f := &healthAnswers{
				counts: func(q string) int { counts++; return countAfter(t, q, tt.runs, false) },
				lists: func(string) []*workflowpb.WorkflowExecutionInfo {
					var out []*workflowpb.WorkflowExecutionInfo
					for _, i := range tt.runs {
						if failedRun(i) {
							out = append(out, i)
						}
					}
					return out
				},
			}
			got, err := failureStreak(context.Background(), f.client(), "s1", visibility.VisibilityTime(t0))
			require.NoError(t, err, "streak %d (%v), want %d", got, err, tt.want)
			require.Equal(t, tt.want, got, "streak %d (%v), want %d", got, err, tt.want)
			assert.LessOrEqual(t, counts, 3, "%d counts for %d runs", counts, len(tt.runs))
		})
	}
}

// TestHealthWithoutProgressAttributes: on a namespace without the progress
// attributes the health still answers, says the watchdog is off, and never
// stalls.
func TestHealthWithoutProgressAttributes(t *testing.T) {
	var queries []string
	f := &healthAnswers{noAttributes: true,
		counts: func(q string) int { queries = append(queries, q); return 2 },
		lists:  func(q string) []*workflowpb.WorkflowExecutionInfo { queries = append(queries, q); return nil },
	}
	h, err := setHealth(context.Background(), f.client(), HealthRequest{Set: "s1", Window: time.Minute, Now: t0})
	require.NoError(t, err)
	require.Equal(t, HealthOK, h.State, "health %+v", h)
	require.Contains(t, h.Reason, "no watchdog", "health %+v", h)
	require.Equal(t, 2, h.Running, "health %+v", h)
	for _, q := range queries {
		assert.NotContains(t, q, "At ", "query %q uses an attribute the namespace lacks", q)
	}
}
