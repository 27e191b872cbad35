package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/envs/catalog"
	"github.com/turnstile-rl/turnstile/internal/fanout"
	"github.com/turnstile-rl/turnstile/internal/testsupport/temporalfake"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

func TestRolloutID(t *testing.T) {
	tests := []struct {
		set  string
		i    int
		want string
	}{
		{"s1", 0, "s1-0000"},
		{"s1", 7, "s1-0007"},
		{"run.a_b", 1234, "run.a_b-1234"},
		{"s1", 12345, "s1-12345"},
	}
	for _, tt := range tests {
		got := RolloutID(tt.set, tt.i)
		assert.Equal(t, tt.want, got, "RolloutID(%q, %d) = %q, want %q", tt.set, tt.i, got, tt.want)
	}
}

func validRequest() SubmitRequest {
	return SubmitRequest{Set: "s1", Count: 5, Envs: []string{"counter"}, Policy: "scripted-counter", Seed: 7, MaxTurns: 16}
}

func TestBuildInputs(t *testing.T) {
	req := validRequest()
	req.EnvURL = "http://127.0.0.1:9000"
	req.ModelURL = "http://127.0.0.1:9001/v1"
	req.RequireAck = true
	inputs, err := BuildInputs(req)
	require.NoError(t, err)
	require.Len(t, inputs, req.Count, "got %d inputs", len(inputs))
	seeds := map[int64]bool{}
	for i, in := range inputs {
		task, err := catalog.Task("counter", 7, i)
		require.NoError(t, err)
		require.Equal(t, RolloutID("s1", i), in.RolloutID, "input %d identity: %+v", i, in)
		require.Equal(t, "s1", in.Set, "input %d identity: %+v", i, in)
		require.Equal(t, 0, in.Attempt, "input %d identity: %+v", i, in)
		assert.Equal(t, string(task), string(in.Task), "input %d task %s, want %s", i, in.Task, task)
		require.Equal(t, "counter", in.Env.Name, "input %d refs: %+v %+v", i, in.Env, in.Policy)
		require.Equal(t, req.EnvURL, in.Env.URL, "input %d refs: %+v %+v", i, in.Env, in.Policy)
		require.Equal(t, "scripted-counter", in.Policy.Model, "input %d refs: %+v %+v", i, in.Env, in.Policy)
		require.Equal(t, req.ModelURL, in.Policy.BaseURL, "input %d refs: %+v %+v", i, in.Env, in.Policy)
		assert.Equal(t, 7*seedStride+int64(i), in.Seed, "input %d seed %d", i, in.Seed)
		seeds[in.Seed] = true
		require.Equal(t, 16, in.Limits.MaxTurns, "input %d limits/ack/resume: %+v", i, in)
		require.True(t, in.RequireAck, "input %d limits/ack/resume: %+v", i, in)
		require.Nil(t, in.Resume, "input %d limits/ack/resume: %+v", i, in)
	}
	assert.Len(t, seeds, req.Count, "rollout seeds not distinct")
	again, err := BuildInputs(req)
	require.NoError(t, err)
	a, _ := json.Marshal(inputs)
	b, _ := json.Marshal(again)
	assert.Equal(t, string(b), string(a), "BuildInputs is not deterministic")
}

func TestBuildInputsRejects(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*SubmitRequest)
		want   string
	}{
		{"empty set", func(r *SubmitRequest) { r.Set = "" }, "want 1-100 letters"},
		{"quote in set", func(r *SubmitRequest) { r.Set = `a"b` }, "want 1-100 letters"},
		{"slash in set", func(r *SubmitRequest) { r.Set = "a/b" }, "want 1-100 letters"},
		{"zero count", func(r *SubmitRequest) { r.Count = 0 }, "--count"},
		{"huge count", func(r *SubmitRequest) { r.Count = maxCount + 1 }, "--count"},
		{"no env", func(r *SubmitRequest) { r.Envs = nil }, "--env is required"},
		{"unknown env", func(r *SubmitRequest) { r.Envs = []string{"chess"} }, "counter"},
		{"unknown env in a list", func(r *SubmitRequest) { r.Envs = []string{"counter", "chess"} }, `"chess"`},
		{"repeated env", func(r *SubmitRequest) { r.Envs = []string{"counter", "counter"} }, "twice"},
		{"policy with spaces", func(r *SubmitRequest) { r.Policy = " scripted-counter" }, "--policy"},
		{"negative max turns", func(r *SubmitRequest) { r.MaxTurns = -1 }, "--max-turns"},
		{"huge max turns", func(r *SubmitRequest) { r.MaxTurns = rollout.MaxMaxTurns + 1 }, "--max-turns"},
		{"env url without scheme", func(r *SubmitRequest) { r.EnvURL = "localhost:1" }, "--env-url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := validRequest()
			tt.mutate(&req)
			_, err := BuildInputs(req)
			require.Error(t, err, "accepted")
			assert.ErrorContains(t, err, tt.want, "error %q does not mention %q", err, tt.want)
		})
	}
}

func TestStartOptions(t *testing.T) {
	inputs, err := BuildInputs(validRequest())
	require.NoError(t, err)
	in := inputs[3]
	o := rollout.StartOptions(in, "q1")
	require.Equal(t, "rollout/s1-0003", o.ID, "ID %q queue %q", o.ID, o.TaskQueue)
	require.Equal(t, "q1", o.TaskQueue, "ID %q queue %q", o.ID, o.TaskQueue)
	require.Equal(t, enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL, o.WorkflowIDConflictPolicy, "ID policies: %v %v %v", o.WorkflowIDConflictPolicy, o.WorkflowIDReusePolicy, o.WorkflowExecutionErrorWhenAlreadyStarted)
	require.Equal(t, enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE, o.WorkflowIDReusePolicy, "ID policies: %v %v %v", o.WorkflowIDConflictPolicy, o.WorkflowIDReusePolicy, o.WorkflowExecutionErrorWhenAlreadyStarted)
	require.True(t, o.WorkflowExecutionErrorWhenAlreadyStarted, "ID policies: %v %v %v", o.WorkflowIDConflictPolicy, o.WorkflowIDReusePolicy, o.WorkflowExecutionErrorWhenAlreadyStarted)
	assert.Nil(t, o.RetryPolicy, "a workflow retry policy is set")
	assert.Contains(t, o.StaticSummary, "s1-0003", "summary %q", o.StaticSummary)
	sa := o.TypedSearchAttributes
	kw := func(name string) string {
		v, _ := sa.GetKeyword(temporal.NewSearchAttributeKeyKeyword(name))
		return v
	}
	i64 := func(name string) int64 {
		v, ok := sa.GetInt64(temporal.NewSearchAttributeKeyInt64(name))
		assert.True(t, ok, "search attribute %s unset", name)
		return v
	}
	require.Equal(t, "s1-0003", kw(rollout.SARolloutID), "keyword search attributes: %v", sa)
	require.Equal(t, "s1", kw(rollout.SARolloutSet), "keyword search attributes: %v", sa)
	require.Equal(t, "seeding", kw(rollout.SARolloutPhase), "keyword search attributes: %v", sa)
	require.Equal(t, int64(0), i64(rollout.SARolloutAttempt), "int search attributes: %v", sa)
	require.Equal(t, int64(0), i64(rollout.SARolloutTurn), "int search attributes: %v", sa)
}

func TestForEachStopsAtFirstError(t *testing.T) {
	var calls atomic.Int32
	boom := errors.New("boom")
	err := fanout.Each(t.Context(), 100, 1, func(_ context.Context, i int) error {
		calls.Add(1)
		if i == 3 {
			return boom
		}
		return nil
	})
	require.ErrorIs(t, err, boom, "err = %v", err)
	c := calls.Load()
	assert.Equal(t, int32(4), c, "%d calls after a failure at index 3 with limit 1", c)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err = fanout.Each(ctx, 3, 2, func(context.Context, int) error { return nil })
	assert.ErrorIs(t, err, context.Canceled, "cancelled context: err = %v", err)
}

func TestBuildInputsMixedSet(t *testing.T) {
	req := SubmitRequest{Set: "mix", Count: 10, Envs: []string{"counter", "blackjack", "workplace", "sandbox"}, Seed: 3}
	inputs, err := BuildInputs(req)
	require.NoError(t, err)
	wantEnv := []string{"counter", "blackjack", "workplace", "sandbox", "counter", "blackjack", "workplace", "sandbox", "counter", "blackjack"}
	wantTurns := map[string]int{"counter": 16, "blackjack": 64, "workplace": 24, "sandbox": 12}
	for i, in := range inputs {
		env := wantEnv[i]
		assert.Equal(t, env, in.Env.Name, "rollout %d env %q, want %q", i, in.Env.Name, env)
		assert.Equal(t, "scripted-"+env, in.Policy.Model, "rollout %d policy %q, want scripted-%s", i, in.Policy.Model, env)
		assert.Equal(t, wantTurns[env], in.Limits.MaxTurns, "rollout %d (%s) max turns %d, want %d", i, env, in.Limits.MaxTurns, wantTurns[env])
		task, err := catalog.Task(env, 3, i)
		require.NoError(t, err)
		assert.Equal(t, string(task), string(in.Task), "rollout %d task %s, want %s", i, in.Task, task)
		o := rollout.StartOptions(in, "q")
		assert.Equal(t, env, o.Memo[rollout.MemoEnv], "rollout %d memo %v", i, o.Memo)
	}

	// An explicit policy and limit apply to every rollout.
	req.Policy, req.MaxTurns = "gpt-x", 5
	inputs, err = BuildInputs(req)
	require.NoError(t, err)
	for i, in := range inputs {
		require.Equal(t, "gpt-x", in.Policy.Model, "rollout %d: policy %q max turns %d", i, in.Policy.Model, in.Limits.MaxTurns)
		require.Equal(t, 5, in.Limits.MaxTurns, "rollout %d: policy %q max turns %d", i, in.Policy.Model, in.Limits.MaxTurns)
	}
}

func TestParseEnvs(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr string
	}{
		{"counter", []string{"counter"}, ""},
		{"counter,blackjack,workplace,sandbox", []string{"counter", "blackjack", "workplace", "sandbox"}, ""},
		{" sandbox , arithmetic ", []string{"sandbox", "arithmetic"}, ""},
		{"", nil, "--env is required"},
		{"counter,", nil, "name 2 is empty"},
		{"counter,chess", nil, `"chess"`},
		{"counter,counter", nil, "twice"},
	}
	for _, tt := range tests {
		got, err := ParseEnvs(tt.in)
		if tt.wantErr != "" {
			assert.ErrorContains(t, err, tt.wantErr, "ParseEnvs(%q) error %v, want one containing %q", tt.in, err, tt.wantErr)
			continue
		}
		require.NoError(t, err, "ParseEnvs(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		require.Equal(t, strings.Join(tt.want, ","), strings.Join(got, ","), "ParseEnvs(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
	}
}

// scriptedCounts answers counts from a script: listed[i] and working[i]
// on the i-th poll (the last entry repeats).
type scriptedCounts struct {
	mu              sync.Mutex
	listed, working []int64
	pollsL, pollsW  int
}

func (s *scriptedCounts) count(query string) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := func(list []int64, n *int) int64 {
		v := list[min(*n, len(list)-1)]
		*n++
		return v
	}
	if query == rollout.SetQuery("s1") {
		return next(s.listed, &s.pollsL), nil
	}
	return next(s.working, &s.pollsW), nil
}

type countingProgress struct {
	n  int
	ok *bool
}

func (p *countingProgress) Increment()     { p.n++ }
func (p *countingProgress) Finish(ok bool) { p.ok = &ok }

func TestAwaitHeld(t *testing.T) {
	// Visibility lists nothing at first (working 0 must not count), then
	// part of the set, then all of it working, then rollouts come to hold
	// their results.
	script := &scriptedCounts{listed: []int64{0, 3, 5}, working: []int64{0, 3, 5, 2, 0}}
	c := &temporalfake.Client{Count: script.count}
	var bar countingProgress
	require.NoError(t, awaitHeld(t.Context(), c, "s1", 5, &bar))
	require.Equal(t, 5, bar.n, "progress %d, finished %v", bar.n, bar.ok)
	require.NotNil(t, bar.ok, "progress %d, finished %v", bar.n, bar.ok)
	require.True(t, *bar.ok, "progress %d, finished %v", bar.n, bar.ok)
	assert.Equal(t, 5, script.pollsW, "polls: zero working counts only once the set is listed whole")
	want := `RolloutSet = "s1" AND ExecutionStatus="Running" AND RolloutPhase!="awaiting_ack"`
	assert.Contains(t, c.CountQueries(), want)
}

// TestCheckGroupAttribute: a dataset is refused before anything starts on a
// namespace that lacks the group ledgers' search attribute, with the fix.
func TestCheckGroupAttribute(t *testing.T) {
	require.NoError(t, checkGroupAttribute(t.Context(), counts(nil)))
	err := checkGroupAttribute(t.Context(), counts(errors.New("invalid query: unknown search attribute: RolloutGroupStatus")))
	require.ErrorContains(t, err, "starter setup", "err = %v, want one naming the attribute and starter setup", err)
	require.ErrorContains(t, err, rollout.SARolloutGroupStatus, "err = %v, want one naming the attribute and starter setup", err)
	// A server that cannot answer is not taken for a missing attribute.
	err = checkGroupAttribute(t.Context(), counts(errors.New("connection refused")))
	require.ErrorContains(t, err, "look up group ledgers", "err = %v, want a lookup failure, not a setup hint", err)
	require.NotContains(t, err.Error(), "starter setup", "err = %v, want a lookup failure, not a setup hint", err)
}
