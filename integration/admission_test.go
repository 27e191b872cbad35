package integration_test

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/turnstile-rl/turnstile/internal/visibility"
	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
	"github.com/turnstile-rl/turnstile/workflows/set"
)

// The admission semantics of a set on the real stack: never more than
// max_in_flight rollouts working at once, started in submission order with
// a group's rollouts together, queued rollouts checkpointed and restored,
// a submitter killed mid-submit, max_in_flight raised live. What works at a
// moment is read from the environment server: a rollout holds a live
// session from its seed to its verify, so its live sessions are the
// rollouts working (no visibility lag), and from the admission's own
// status. No assertion is about time.

// peak samples the environment server's live sessions and the admission's
// running count while a set runs, and keeps the most of each.
type peak struct {
	mu                 sync.Mutex
	sessions, admitted int
	queuedSeen         bool
	stop               chan struct{}
	done               chan struct{}
}

func (c *cluster) samplePeak(t *testing.T, ts *trainer.Client, set string) *peak {
	p := &peak{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			select {
			case <-p.stop:
				return
			case <-time.After(20 * time.Millisecond): // sampling, not waiting for a state
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			st, err := c.dataClient(c.envURL).Stats(ctx)
			adm, ok, aerr := ts.Admission(ctx, set)
			cancel()
			p.mu.Lock()
			if err == nil {
				p.sessions = max(p.sessions, st.Sessions)
			}
			if aerr == nil && ok {
				p.admitted = max(p.admitted, adm.Running)
				p.queuedSeen = p.queuedSeen || adm.Queued > 0
			}
			p.mu.Unlock()
		}
	}()
	t.Cleanup(p.end)
	return p
}

func (p *peak) end() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
}

func (p *peak) most() (sessions, admitted int, queuedSeen bool) {
	p.end()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sessions, p.admitted, p.queuedSeen
}

// startOrder lists the set's attempt-0 runs by start time and returns
// their rollout ids in that order.
func (c *cluster) startOrder(ctx context.Context, set string) []string {
	c.t.Helper()
	type run struct {
		id    string
		start time.Time
	}
	var runs []run
	require.NoError(c.t, visibility.ListSet(ctx, c.client, set, rollout.SARolloutAttempt+" = 0", func(info *workflowpb.WorkflowExecutionInfo) error {
		if info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW {
			return nil
		}
		id, _ := rollout.IDOf(info.GetExecution().GetWorkflowId())
		runs = append(runs, run{id, info.GetStartTime().AsTime()})
		return nil
	}))
	sort.SliceStable(runs, func(i, j int) bool { return runs[i].start.Before(runs[j].start) })
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = r.id
	}
	return out
}

func inputIDs(in []rollout.Input) []string {
	out := make([]string, len(in))
	for i, r := range in {
		out[i] = r.RolloutID
	}
	return out
}

// TestAdmissionAtMostMaxInFlightInOrder: a set of 24 rollouts submitted
// with max_in_flight 4 never has more than 4 working at once, starts them
// in submission order, and completes every one exactly once.
func TestAdmissionAtMostMaxInFlightInOrder(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	c := newStack(t, "--latency", "50ms", "--jitter", "30ms")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ts := trainer.New(c.client, rollout.TaskQueue)
	const n, most = 24, 4

	p := c.samplePeak(t, ts, "adm1")
	res, err := ts.Submit(ctx, trainer.SubmitRequest{Set: "adm1", Count: n, Envs: []string{"counter"}, Seed: 5, MaxInFlight: most, RequestID: "adm1"})
	require.NoError(t, err)
	require.Equal(t, n, res.Started)
	require.NoError(t, ts.Wait(ctx, trainer.WaitRequest{Set: "adm1", Inputs: res.Inputs}))
	sessions, admitted, queued := p.most()

	assert.LessOrEqual(t, sessions, most, "live environment sessions: more than max_in_flight rollouts worked at once")
	assert.LessOrEqual(t, admitted, most, "the admission counted more than max_in_flight running")
	assert.True(t, queued, "no rollout was ever seen queued")
	require.Equal(t, inputIDs(res.Inputs), c.startOrder(ctx, "adm1"), "start order is not submission order")
	sum, err := ts.Summary(ctx, "adm1")
	require.NoError(t, err)
	require.Equal(t, trainer.Summary{Rollouts: n, Completed: n}, zeroMeans(sum.Overall), "every rollout completes once")
	st := c.envStats(ctx)
	require.Zero(t, st.Sessions)
	adm, ok, err := ts.Admission(ctx, "adm1")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, n, adm.Counts.Admitted)
	require.Equal(t, n, adm.Counts.Finished)
	require.Zero(t, adm.Queued)
	require.Zero(t, adm.Running)
	c.recordAdmission(ctx, "adm1", "admission.json")
}

// recordAdmission exports the latest run of a set's admission with the
// Temporal CLI, replays it against the current SetAdmission code, and with
// TURNSTILE_UPDATE_REPLAY=1 writes it to set/testdata/<fixture>.
func (c *cluster) recordAdmission(ctx context.Context, name, fixture string) {
	c.t.Helper()
	out, err := c.temporalCLI(ctx, "workflow", "show", "--workflow-id", set.AdmissionWorkflowID(name), "--output", "json")
	require.NoError(c.t, err, out)
	path := filepath.Join(c.t.TempDir(), fixture)
	require.NoError(c.t, os.WriteFile(path, []byte(out), 0o644))
	r := worker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(set.SetAdmission, workflow.RegisterOptions{Name: set.AdmissionWorkflowName})
	require.NoError(c.t, r.ReplayWorkflowHistoryFromJSONFile(nil, path), "replay of the admission of set %s", name)
	if os.Getenv("TURNSTILE_UPDATE_REPLAY") == "1" {
		dst := filepath.Join(bins.root, "workflows", "set", "testdata", fixture)
		require.NoError(c.t, os.MkdirAll(filepath.Dir(dst), 0o755))
		require.NoError(c.t, os.WriteFile(dst, []byte(out), 0o644))
	}
}

// zeroMeans keeps a summary's counts only.
func zeroMeans(s trainer.Summary) trainer.Summary {
	return trainer.Summary{Rollouts: s.Rollouts, Completed: s.Completed, Failed: s.Failed, Running: s.Running, Queued: s.Queued}
}
