package set_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/turnstile-rl/turnstile/internal/testsupport"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
	"github.com/turnstile-rl/turnstile/workflows/set"
)

// fakeSet stands in for the admission's activities and for the rollouts:
// it keeps the stored batches, starts what AdmitRollouts names (recording
// the order and the most that ran at once) and finishes rollouts when the
// test says so, with the notice a rollout sends.
type fakeSet struct {
	mu      sync.Mutex
	batches map[string][]rollout.Input
	started []string
	admits  [][]string
	running map[string]int
	most    int
	// earlyFinish finishes each rollout as its start is reported (a
	// rollout faster than its start's answer).
	earlyFinish bool
	env         *testsuite.TestWorkflowEnvironment
	// silent are rollouts whose notice is lost: only reconciliation finds
	// they stopped.
	silent     map[string]bool
	reconciled int
}

func newFakeSet() *fakeSet {
	return &fakeSet{batches: map[string][]rollout.Input{}, running: map[string]int{}, silent: map[string]bool{}}
}

func (f *fakeSet) register(env *testsuite.TestWorkflowEnvironment) {
	f.env = env
	env.RegisterActivityWithOptions(f.store, activity.RegisterOptions{Name: set.StoreAdmissionBatchName})
	env.RegisterActivityWithOptions(f.admit, activity.RegisterOptions{Name: set.AdmitRolloutsName})
	env.RegisterActivityWithOptions(f.reconcile, activity.RegisterOptions{Name: set.ReconcileAdmissionName})
}

func (f *fakeSet) store(_ context.Context, in set.StoreBatchInput) (set.StoreBatchResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ref := fmt.Sprintf("ref-%d", len(f.batches))
	f.batches[ref] = append([]rollout.Input(nil), in.Inputs...)
	return set.StoreBatchResult{Ref: ref, Count: len(in.Inputs)}, nil
}

func (f *fakeSet) admit(_ context.Context, in set.AdmitInput) (set.AdmitResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	res := set.AdmitResult{}
	var ids []string
	for _, s := range in.Slices {
		for _, r := range f.batches[s.Ref][s.From : s.From+s.Count] {
			ids = append(ids, r.RolloutID)
			f.started = append(f.started, r.RolloutID)
			f.running[r.RolloutID] = r.Attempt
			res.Admitted = append(res.Admitted, set.RunningRollout{RolloutID: r.RolloutID, Attempt: r.Attempt})
			res.Started++
		}
	}
	f.admits = append(f.admits, ids)
	f.most = max(f.most, len(f.running))
	if f.earlyFinish {
		for _, id := range ids {
			delete(f.running, id)
			n := rollout.AdmissionNotice{Set: in.Set, RolloutID: id, Outcome: rollout.OutcomeCompleted}
			f.env.RegisterDelayedCallback(func() { f.env.SignalWorkflow(set.SignalFinished, n) }, 0)
		}
	}
	return res, nil
}

func (f *fakeSet) reconcile(_ context.Context, in set.ReconcileInput) (set.ReconcileResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reconciled++
	res := set.ReconcileResult{Finished: []set.RunningRollout{}}
	for _, r := range in.Running {
		if _, ok := f.running[r.RolloutID]; !ok {
			res.Finished = append(res.Finished, r)
		}
	}
	return res, nil
}

// finish ends up to n running rollouts, oldest first, each sending its
// notice (unless silent).
func (f *fakeSet) finish(n int) {
	f.mu.Lock()
	var notices []rollout.AdmissionNotice
	for _, id := range f.started {
		if len(notices) == n {
			break
		}
		if at, ok := f.running[id]; ok {
			delete(f.running, id)
			if !f.silent[id] {
				notices = append(notices, rollout.AdmissionNotice{Set: "s1", RolloutID: id, Attempt: at, Outcome: rollout.OutcomeCompleted})
			}
		}
	}
	f.mu.Unlock()
	for _, n := range notices {
		f.env.SignalWorkflow(set.SignalFinished, n)
	}
}

func (f *fakeSet) order() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.started...)
}

// inputs are n counter rollouts of set s1, or, with groups of size g,
// n/g groups.
func inputs(n, g int) []rollout.Input {
	out := make([]rollout.Input, n)
	for i := range out {
		out[i] = rollout.Input{RolloutID: fmt.Sprintf("s1-%04d", i), Set: "s1", Env: rollout.EnvRef{Name: []string{"counter", "blackjack"}[i%2]},
			Policy: rollout.PolicyRef{Model: "m"}, Task: json.RawMessage(`{}`)}
		if g > 1 {
			out[i].Group, out[i].Repeat, out[i].GroupSize = fmt.Sprintf("g%d", i/g), i%g, g
			out[i].RolloutID = rollout.GroupRolloutID("s1", out[i].Group, out[i].Repeat)
		}
	}
	return out
}

var stamp = set.SubmitStamp{RequestID: "r1", Digest: "d1"}

// start is an admission of total rollouts in batches of size, receiving
// nothing yet.
func start(total, batches, maxInFlight int) set.AdmissionInput {
	return set.AdmissionInput{Set: "s1", TaskQueue: "q", Stamp: stamp, MaxInFlight: maxInFlight, Batches: batches, Total: total}
}

// enqueueAll sends every batch of in (of size each) at time at, in order.
func enqueueAll(t *testing.T, env *testsuite.TestWorkflowEnvironment, in []rollout.Input, size int, at time.Duration) {
	t.Helper()
	batches := (len(in) + size - 1) / size
	var send func(b int)
	send = func(b int) {
		if b == batches {
			return
		}
		req := set.EnqueueRequest{Stamp: stamp, Batch: b, Batches: batches, Total: len(in), Inputs: in[b*size : min(len(in), (b+1)*size)]}
		env.UpdateWorkflow(set.UpdateEnqueue, fmt.Sprintf("b%d", b), &testsuite.TestUpdateCallback{
			OnReject:   func(err error) { assert.Fail(t, "batch refused", "batch %d: %v", b, err) },
			OnAccept:   func() {},
			OnComplete: func(_ any, err error) { assert.NoError(t, err, "batch %d", b); send(b + 1) },
		}, req)
	}
	env.RegisterDelayedCallback(func() { send(0) }, at)
}

// finishEvery ends k running rollouts every second, for steps seconds.
func finishEvery(env *testsuite.TestWorkflowEnvironment, f *fakeSet, k, steps int) {
	finishFrom(env, f, k, steps, 0)
}

// finishFrom is finishEvery starting at from.
func finishFrom(env *testsuite.TestWorkflowEnvironment, f *fakeSet, k, steps int, from time.Duration) {
	for i := 1; i <= steps; i++ {
		env.RegisterDelayedCallback(func() { f.finish(k) }, from+time.Duration(i)*time.Second)
	}
}

func newEnv(f *fakeSet) *testsuite.TestWorkflowEnvironment {
	env := testsupport.NewWorkflowEnv()
	f.register(env)
	return env
}

func ids(in []rollout.Input) []string {
	out := make([]string, len(in))
	for i, r := range in {
		out[i] = r.RolloutID
	}
	return out
}

func result(t *testing.T, env *testsuite.TestWorkflowEnvironment) set.AdmissionResult {
	t.Helper()
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var res set.AdmissionResult
	require.NoError(t, env.GetWorkflowResult(&res))
	return res
}

// TestAdmissionRunsAtMostMaxInFlightInOrder: 10 rollouts, 3 at a time: the
// admission starts them in submission order, never more than 3 running,
// the next as soon as one reports, and closes when all have finished.
func TestAdmissionRunsAtMostMaxInFlightInOrder(t *testing.T) {
	f := newFakeSet()
	env := newEnv(f)
	in := inputs(10, 1)
	enqueueAll(t, env, in, 4, 0)
	finishEvery(env, f, 1, 12)
	env.ExecuteWorkflow(set.SetAdmission, start(10, 3, 3))

	res := result(t, env)
	require.Equal(t, set.AdmissionResult{Set: "s1", Total: 10, Counts: set.AdmissionCounts{Admitted: 10, Finished: 10}}, res)
	require.Equal(t, ids(in), f.order(), "start order = submission order")
	require.Equal(t, 3, f.most, "never more than max_in_flight running")
	require.Equal(t, []string{"s1-0000", "s1-0001", "s1-0002"}, f.admits[0], "the first admission fills max_in_flight")
}

// TestAdmissionAdmitsGroupsWhole: groups of 3 with max_in_flight 4: a
// group is admitted only when 3 slots are free (never with 1 or 2 of its
// rollouts), in order.
func TestAdmissionAdmitsGroupsWhole(t *testing.T) {
	f := newFakeSet()
	env := newEnv(f)
	in := inputs(12, 3)
	enqueueAll(t, env, in, 6, 0)
	finishEvery(env, f, 1, 20)
	env.ExecuteWorkflow(set.SetAdmission, start(12, 2, 4))

	result(t, env)
	require.Equal(t, ids(in), f.order())
	require.LessOrEqual(t, f.most, 4)
	for _, a := range f.admits {
		require.Zero(t, len(a)%3, "an admission of %v splits a group", a)
	}
}

// TestAdmissionGroupLargerThanMaxRunsAlone: a group larger than
// max_in_flight is admitted whole when nothing else runs.
func TestAdmissionGroupLargerThanMaxRunsAlone(t *testing.T) {
	f := newFakeSet()
	env := newEnv(f)
	in := inputs(8, 4)
	enqueueAll(t, env, in, 8, 0)
	finishEvery(env, f, 4, 4)
	env.ExecuteWorkflow(set.SetAdmission, start(8, 1, 2))

	result(t, env)
	require.Equal(t, [][]string{ids(in[:4]), ids(in[4:])}, f.admits)
}

// TestAdmissionRaiseMaxInFlightLive: max_in_flight 1, raised to 4 while
// rollouts wait: the admission starts 3 more at once.
func TestAdmissionRaiseMaxInFlightLive(t *testing.T) {
	f := newFakeSet()
	env := newEnv(f)
	in := inputs(8, 1)
	enqueueAll(t, env, in, 8, 0)
	var status set.AdmissionStatus
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(set.UpdateMaxInFlight, "raise", &testsuite.TestUpdateCallback{
			OnReject: func(err error) { assert.Fail(t, "raise refused", "%v", err) },
			OnAccept: func() {},
			OnComplete: func(v any, err error) {
				assert.NoError(t, err)
				status, _ = v.(set.AdmissionStatus)
			},
		}, set.MaxInFlightRequest{MaxInFlight: 4})
	}, 30*time.Second)
	// Until the raise, nothing finishes: exactly one runs.
	finishFrom(env, f, 4, 40, 30*time.Second)
	env.ExecuteWorkflow(set.SetAdmission, start(8, 1, 1))

	result(t, env)
	require.Equal(t, []string{"s1-0000"}, f.admits[0])
	require.Equal(t, []string{"s1-0001", "s1-0002", "s1-0003"}, f.admits[1], "the raise takes effect at once")
	require.Equal(t, 4, status.MaxInFlight)
	require.Equal(t, ids(in), f.order())
}

// TestAdmissionHoldAndRelease: a hold answers what runs and what waits and
// stops admission until its checkpoint's release; a hold for another
// checkpoint is refused meanwhile.
func TestAdmissionHoldAndRelease(t *testing.T) {
	f := newFakeSet()
	env := newEnv(f)
	in := inputs(6, 1)
	enqueueAll(t, env, in, 6, 0)
	var snap set.AdmissionSnapshot
	var admitsAtRelease int
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(set.UpdateHold, set.HoldUpdateID("k1"), &testsuite.TestUpdateCallback{
			OnReject: func(err error) { assert.Fail(t, "hold refused", "%v", err) },
			OnAccept: func() {},
			OnComplete: func(v any, err error) {
				assert.NoError(t, err)
				snap, _ = v.(set.AdmissionSnapshot)
			},
		}, set.HoldRequest{CheckpointID: "k1"})
	}, 500*time.Millisecond)
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(set.UpdateHold, set.HoldUpdateID("k2"), &testsuite.TestUpdateCallback{
			OnReject:   func(err error) { assert.ErrorContains(t, err, `held for checkpoint "k1"`) },
			OnAccept:   func() { assert.Fail(t, "a second checkpoint's hold was accepted") },
			OnComplete: func(any, error) {},
		}, set.HoldRequest{CheckpointID: "k2"})
	}, time.Second)
	// Two finish while held: nothing is admitted in their place.
	finishEvery(env, f, 1, 2)
	env.RegisterDelayedCallback(func() {
		f.mu.Lock()
		admitsAtRelease = len(f.admits)
		f.mu.Unlock()
		env.SignalWorkflow(set.SignalRelease, set.ReleaseRequest{CheckpointID: "k1"})
	}, 10*time.Second)
	for i := 11; i < 30; i++ {
		env.RegisterDelayedCallback(func() { f.finish(2) }, time.Duration(i)*time.Second)
	}
	env.ExecuteWorkflow(set.SetAdmission, start(6, 1, 2))

	result(t, env)
	require.Equal(t, "k1", snap.CheckpointID)
	require.Equal(t, []set.RunningRollout{{RolloutID: "s1-0000"}, {RolloutID: "s1-0001"}}, snap.Running)
	require.Len(t, snap.Queue, 1)
	require.Equal(t, 4, snap.Queue[0].Queued(), "the queue at the hold")
	require.Equal(t, 2, snap.Queue[0].Admitted)
	require.Equal(t, 1, admitsAtRelease, "nothing admitted while held")
	require.Equal(t, ids(in), f.order())
}

// TestAdmissionEnqueueChecks: a batch of another submission, one out of
// order, and a malformed one are refused without a trace; a batch sent
// again is accepted and queues nothing twice.
func TestAdmissionEnqueueChecks(t *testing.T) {
	f := newFakeSet()
	env := newEnv(f)
	in := inputs(4, 1)
	type sent struct {
		name string
		req  set.EnqueueRequest
		want string // "" accepted
	}
	cases := []sent{
		{"another request", set.EnqueueRequest{Stamp: set.SubmitStamp{RequestID: "r2", Digest: "d2"}, Batch: 0, Batches: 2, Total: 4, Inputs: in[:2]}, `submitted by request "r1"`},
		{"out of order", set.EnqueueRequest{Stamp: stamp, Batch: 1, Batches: 2, Total: 4, Inputs: in[2:]}, "batch 1 before batch 0"},
		{"another set", set.EnqueueRequest{Stamp: stamp, Batch: 0, Batches: 2, Total: 4, Inputs: []rollout.Input{{RolloutID: "x", Set: "s2"}}}, `not of set "s1"`},
		{"first", set.EnqueueRequest{Stamp: stamp, Batch: 0, Batches: 2, Total: 4, Inputs: in[:2]}, ""},
		{"first again", set.EnqueueRequest{Stamp: stamp, Batch: 0, Batches: 2, Total: 4, Inputs: in[:2]}, ""},
		{"second", set.EnqueueRequest{Stamp: stamp, Batch: 1, Batches: 2, Total: 4, Inputs: in[2:]}, ""},
	}
	var send func(i int)
	send = func(i int) {
		if i == len(cases) {
			return
		}
		c := cases[i]
		env.UpdateWorkflow(set.UpdateEnqueue, c.name, &testsuite.TestUpdateCallback{
			OnReject: func(err error) {
				assert.NotEmpty(t, c.want, "%s refused: %v", c.name, err)
				assert.ErrorContains(t, err, c.want, c.name)
				send(i + 1)
			},
			OnAccept:   func() { assert.Empty(t, c.want, "%s accepted", c.name) },
			OnComplete: func(any, error) { send(i + 1) },
		}, c.req)
	}
	env.RegisterDelayedCallback(func() { send(0) }, 0)
	finishEvery(env, f, 4, 3)
	env.ExecuteWorkflow(set.SetAdmission, start(4, 2, 8))

	res := result(t, env)
	require.Equal(t, 4, res.Counts.Admitted, "the batch sent twice is queued once")
	require.Equal(t, ids(in), f.order())
	require.Len(t, f.batches, 2, "the batch sent again is not stored again")
}

// TestAdmissionEarlyNotice: a rollout that finishes before its start is
// reported frees its slot all the same.
func TestAdmissionEarlyNotice(t *testing.T) {
	f := newFakeSet()
	f.earlyFinish = true
	env := newEnv(f)
	in := inputs(5, 1)
	enqueueAll(t, env, in, 5, 0)
	env.ExecuteWorkflow(set.SetAdmission, start(5, 1, 1))

	res := result(t, env)
	require.Equal(t, set.AdmissionCounts{Admitted: 5, Finished: 5}, res.Counts)
	require.Equal(t, ids(in), f.order())
}

// TestAdmissionReconcilesLostNotices: a rollout whose notice is lost (its
// run terminated) is found stopped by reconciliation after a quiet minute,
// and its slot goes to the next.
func TestAdmissionReconcilesLostNotices(t *testing.T) {
	f := newFakeSet()
	f.silent["s1-0000"] = true
	env := newEnv(f)
	in := inputs(3, 1)
	enqueueAll(t, env, in, 3, 0)
	finishEvery(env, f, 1, 200)
	env.ExecuteWorkflow(set.SetAdmission, start(3, 1, 1))

	res := result(t, env)
	require.Equal(t, set.AdmissionCounts{Admitted: 3, Finished: 3}, res.Counts)
	require.GreaterOrEqual(t, f.reconciled, 1)
	require.Equal(t, ids(in), f.order())
}

// TestAdmissionIgnoresStaleNotices: a notice of an earlier attempt than
// the one admitted (a run of a world a restore replaced) frees nothing.
func TestAdmissionIgnoresStaleNotices(t *testing.T) {
	f := newFakeSet()
	env := newEnv(f)
	in := inputs(2, 1)
	in[0].Attempt = 2
	enqueueAll(t, env, in, 2, 0)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(set.SignalFinished, rollout.AdmissionNotice{Set: "s1", RolloutID: "s1-0000", Attempt: 1})
	}, time.Second)
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(set.QueryStatus)
		require.NoError(t, err)
		var st set.AdmissionStatus
		require.NoError(t, v.Get(&st))
		assert.Equal(t, 1, st.Running, "the stale notice freed the slot")
		assert.Equal(t, 1, st.Queued)
		assert.Equal(t, map[string]int{"blackjack": 1}, st.QueuedByEnv)
	}, 2*time.Second)
	finishFrom(env, f, 1, 10, 3*time.Second)
	env.ExecuteWorkflow(set.SetAdmission, start(2, 1, 1))
	result(t, env)
	require.Equal(t, [][]string{{"s1-0000"}, {"s1-0001"}}, f.admits)
}

// TestAdmissionContinuesAsNew: when Temporal suggests it, the admission
// carries its queue, its running rollouts, its hold and its counts into a
// new run.
func TestAdmissionContinuesAsNew(t *testing.T) {
	f := newFakeSet()
	env := newEnv(f)
	in := inputs(6, 1)
	enqueueAll(t, env, in, 6, 0)
	env.RegisterDelayedCallback(func() { env.SetContinueAsNewSuggested(true) }, time.Second)
	env.ExecuteWorkflow(set.SetAdmission, start(6, 1, 2))

	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, env.GetWorkflowError(), &can)
	require.Equal(t, set.AdmissionWorkflowName, can.WorkflowType.Name)
	var next set.AdmissionInput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	require.Equal(t, []set.RunningRollout{{RolloutID: "s1-0000"}, {RolloutID: "s1-0001"}}, next.Running)
	require.Len(t, next.Queue, 1)
	require.Equal(t, 2, next.Queue[0].Admitted)
	require.Equal(t, 1, next.Received)
	require.Equal(t, 6, next.Enqueued)
	require.Equal(t, set.AdmissionCounts{Admitted: 2}, next.Counts)

	// The next run goes on from there.
	f2 := newFakeSet()
	f2.batches = f.batches
	f2.started = []string{"s1-0000", "s1-0001"}
	f2.running = map[string]int{"s1-0000": 0, "s1-0001": 0}
	env2 := newEnv(f2)
	finishEvery(env2, f2, 1, 10)
	env2.ExecuteWorkflow(set.SetAdmission, next)
	res := result(t, env2)
	require.Equal(t, set.AdmissionCounts{Admitted: 6, Finished: 6}, res.Counts)
	require.Equal(t, ids(in), f2.order())
}

// TestAdmissionRefusesBadInput: a malformed input fails the run at once.
func TestAdmissionRefusesBadInput(t *testing.T) {
	env := newEnv(newFakeSet())
	in := start(1, 1, 0)
	env.ExecuteWorkflow(set.SetAdmission, in)
	require.ErrorContains(t, env.GetWorkflowError(), "max_in_flight 0")
}
