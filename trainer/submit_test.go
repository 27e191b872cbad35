package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/envs/catalog"
	"github.com/turnstile-rl/turnstile/internal/fanout"
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
		if got := RolloutID(tt.set, tt.i); got != tt.want {
			t.Errorf("RolloutID(%q, %d) = %q, want %q", tt.set, tt.i, got, tt.want)
		}
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
	if err != nil {
		t.Fatal(err)
	}
	if len(inputs) != req.Count {
		t.Fatalf("got %d inputs", len(inputs))
	}
	seeds := map[int64]bool{}
	for i, in := range inputs {
		task, err := catalog.Task("counter", 7, i)
		if err != nil {
			t.Fatal(err)
		}
		if in.RolloutID != RolloutID("s1", i) || in.Set != "s1" || in.Attempt != 0 {
			t.Errorf("input %d identity: %+v", i, in)
		}
		if string(in.Task) != string(task) {
			t.Errorf("input %d task %s, want %s", i, in.Task, task)
		}
		if in.Env.Name != "counter" || in.Env.URL != req.EnvURL || in.Policy.Model != "scripted-counter" || in.Policy.BaseURL != req.ModelURL {
			t.Errorf("input %d refs: %+v %+v", i, in.Env, in.Policy)
		}
		if in.Seed != 7*seedStride+int64(i) {
			t.Errorf("input %d seed %d", i, in.Seed)
		}
		seeds[in.Seed] = true
		if in.Limits.MaxTurns != 16 || !in.RequireAck || in.Resume != nil {
			t.Errorf("input %d limits/ack/resume: %+v", i, in)
		}
	}
	if len(seeds) != req.Count {
		t.Errorf("rollout seeds not distinct: %v", seeds)
	}
	again, err := BuildInputs(req)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(inputs)
	b, _ := json.Marshal(again)
	if string(a) != string(b) {
		t.Error("BuildInputs is not deterministic")
	}
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
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not mention %q", err, tt.want)
			}
		})
	}
}

func TestStartOptions(t *testing.T) {
	inputs, err := BuildInputs(validRequest())
	if err != nil {
		t.Fatal(err)
	}
	in := inputs[3]
	o := rollout.StartOptions(in, "q1")
	if o.ID != "rollout/s1-0003" || o.TaskQueue != "q1" {
		t.Errorf("ID %q queue %q", o.ID, o.TaskQueue)
	}
	if o.WorkflowIDConflictPolicy != enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL ||
		o.WorkflowIDReusePolicy != enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE ||
		!o.WorkflowExecutionErrorWhenAlreadyStarted {
		t.Errorf("ID policies: %v %v %v", o.WorkflowIDConflictPolicy, o.WorkflowIDReusePolicy, o.WorkflowExecutionErrorWhenAlreadyStarted)
	}
	if o.RetryPolicy != nil {
		t.Error("a workflow retry policy is set")
	}
	if !strings.Contains(o.StaticSummary, "s1-0003") {
		t.Errorf("summary %q", o.StaticSummary)
	}
	sa := o.TypedSearchAttributes
	kw := func(name string) string {
		v, _ := sa.GetKeyword(temporal.NewSearchAttributeKeyKeyword(name))
		return v
	}
	i64 := func(name string) int64 {
		v, ok := sa.GetInt64(temporal.NewSearchAttributeKeyInt64(name))
		if !ok {
			t.Errorf("search attribute %s unset", name)
		}
		return v
	}
	if kw(rollout.SARolloutID) != "s1-0003" || kw(rollout.SARolloutSet) != "s1" || kw(rollout.SARolloutPhase) != "seeding" {
		t.Errorf("keyword search attributes: %v", sa)
	}
	if i64(rollout.SARolloutAttempt) != 0 || i64(rollout.SARolloutTurn) != 0 {
		t.Errorf("int search attributes: %v", sa)
	}
}

// fakeStarter records starts; failAt makes one rollout's start fail.
type fakeStarter struct {
	mu       sync.Mutex
	ids      []string
	inFlight atomic.Int32
	maxSeen  atomic.Int32
	failAt   string
	failWith error
}

func (f *fakeStarter) ExecuteWorkflow(_ context.Context, o client.StartWorkflowOptions, wf any, args ...any) (client.WorkflowRun, error) {
	n := f.inFlight.Add(1)
	defer f.inFlight.Add(-1)
	for {
		m := f.maxSeen.Load()
		if n <= m || f.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	if wf != rollout.WorkflowName || len(args) != 1 {
		return nil, errors.New("wrong workflow or args")
	}
	if in, ok := args[0].(rollout.Input); !ok || rollout.WorkflowID(in.RolloutID) != o.ID {
		return nil, errors.New("input does not match ID")
	}
	if o.ID == f.failAt {
		return nil, f.failWith
	}
	f.mu.Lock()
	f.ids = append(f.ids, o.ID)
	f.mu.Unlock()
	return nil, nil
}

func TestStartAll(t *testing.T) {
	req := validRequest()
	req.Count = 40
	inputs, err := BuildInputs(req)
	if err != nil {
		t.Fatal(err)
	}
	var f fakeStarter
	n, _, err := startAll(t.Context(), &f, inputs, startSpec{taskQueue: "q", limit: 4})
	if err != nil {
		t.Fatal(err)
	}
	if n != 40 || len(f.ids) != 40 {
		t.Fatalf("started %d (recorded %d), want 40", n, len(f.ids))
	}
	if m := f.maxSeen.Load(); m > 4 {
		t.Errorf("%d starts in flight, limit 4", m)
	}
}

func TestStartAllErrors(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"already started", serviceerror.NewWorkflowExecutionAlreadyStarted("exists", "", "run"), `set "s1" already exists`},
		{"unknown search attribute", errors.New("search attribute RolloutSet is not defined"), "make devserver"},
		{"other", errors.New("boom"), "start rollout s1-0002: boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inputs, err := BuildInputs(validRequest())
			if err != nil {
				t.Fatal(err)
			}
			f := fakeStarter{failAt: "rollout/s1-0002", failWith: tt.err}
			n, _, err := startAll(t.Context(), &f, inputs, startSpec{taskQueue: "q", limit: 1})
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
			// One start at a time: the failure stops the ones after it.
			if n != 2 {
				t.Errorf("started %d, want 2", n)
			}
		})
	}
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
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	if c := calls.Load(); c != 4 {
		t.Errorf("%d calls after a failure at index 3 with limit 1", c)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := fanout.Each(ctx, 3, 2, func(context.Context, int) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: err = %v", err)
	}
}

func TestBuildInputsMixedSet(t *testing.T) {
	req := SubmitRequest{Set: "mix", Count: 10, Envs: []string{"counter", "blackjack", "workplace", "sandbox"}, Seed: 3}
	inputs, err := BuildInputs(req)
	if err != nil {
		t.Fatal(err)
	}
	wantEnv := []string{"counter", "blackjack", "workplace", "sandbox", "counter", "blackjack", "workplace", "sandbox", "counter", "blackjack"}
	wantTurns := map[string]int{"counter": 16, "blackjack": 64, "workplace": 24, "sandbox": 12}
	for i, in := range inputs {
		env := wantEnv[i]
		if in.Env.Name != env {
			t.Errorf("rollout %d env %q, want %q", i, in.Env.Name, env)
		}
		if in.Policy.Model != "scripted-"+env {
			t.Errorf("rollout %d policy %q, want scripted-%s", i, in.Policy.Model, env)
		}
		if in.Limits.MaxTurns != wantTurns[env] {
			t.Errorf("rollout %d (%s) max turns %d, want %d", i, env, in.Limits.MaxTurns, wantTurns[env])
		}
		task, err := catalog.Task(env, 3, i)
		if err != nil {
			t.Fatal(err)
		}
		if string(in.Task) != string(task) {
			t.Errorf("rollout %d task %s, want %s", i, in.Task, task)
		}
		if o := rollout.StartOptions(in, "q"); o.Memo[rollout.MemoEnv] != env {
			t.Errorf("rollout %d memo %v", i, o.Memo)
		}
	}

	// An explicit policy and limit apply to every rollout.
	req.Policy, req.MaxTurns = "gpt-x", 5
	inputs, err = BuildInputs(req)
	if err != nil {
		t.Fatal(err)
	}
	for i, in := range inputs {
		if in.Policy.Model != "gpt-x" || in.Limits.MaxTurns != 5 {
			t.Errorf("rollout %d: policy %q max turns %d", i, in.Policy.Model, in.Limits.MaxTurns)
		}
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
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseEnvs(%q) error %v, want one containing %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || strings.Join(got, ",") != strings.Join(tt.want, ",") {
			t.Errorf("ParseEnvs(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

// scriptedCounter answers counts from a script: listed[i] and working[i]
// on the i-th poll (the last entry repeats).
type scriptedCounter struct {
	mu              sync.Mutex
	listed, working []int64
	pollsL, pollsW  int
	queries         map[string]bool
}

func (s *scriptedCounter) CountWorkflow(_ context.Context, req *workflowservice.CountWorkflowExecutionsRequest) (*workflowservice.CountWorkflowExecutionsResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.queries == nil {
		s.queries = map[string]bool{}
	}
	s.queries[req.Query] = true
	next := func(list []int64, n *int) int64 {
		v := list[min(*n, len(list)-1)]
		*n++
		return v
	}
	if req.Query == rollout.SetQuery("s1") {
		return &workflowservice.CountWorkflowExecutionsResponse{Count: next(s.listed, &s.pollsL)}, nil
	}
	return &workflowservice.CountWorkflowExecutionsResponse{Count: next(s.working, &s.pollsW)}, nil
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
	c := &scriptedCounter{listed: []int64{0, 3, 5}, working: []int64{0, 3, 5, 2, 0}}
	var bar countingProgress
	if err := awaitHeld(t.Context(), c, "s1", 5, &bar); err != nil {
		t.Fatal(err)
	}
	if bar.n != 5 || bar.ok == nil || !*bar.ok {
		t.Errorf("progress %d, finished %v", bar.n, bar.ok)
	}
	if c.pollsW != 5 {
		t.Errorf("%d polls, want 5: zero working counts only once the set is listed whole", c.pollsW)
	}
	want := `RolloutSet = "s1" AND ExecutionStatus="Running" AND RolloutPhase!="awaiting_ack"`
	if !c.queries[want] {
		t.Errorf("queries %v lack %s", c.queries, want)
	}
}

// failingCounter answers every count with err.
type failingCounter struct{ err error }

func (f failingCounter) CountWorkflow(context.Context, *workflowservice.CountWorkflowExecutionsRequest) (*workflowservice.CountWorkflowExecutionsResponse, error) {
	return &workflowservice.CountWorkflowExecutionsResponse{}, f.err
}

// TestCheckGroupAttribute: a dataset is refused before anything starts on a
// namespace that lacks the group ledgers' search attribute, with the fix.
func TestCheckGroupAttribute(t *testing.T) {
	if err := checkGroupAttribute(t.Context(), failingCounter{}); err != nil {
		t.Fatal(err)
	}
	err := checkGroupAttribute(t.Context(), failingCounter{errors.New("invalid query: unknown search attribute: RolloutGroupStatus")})
	if err == nil || !strings.Contains(err.Error(), "starter setup") || !strings.Contains(err.Error(), rollout.SARolloutGroupStatus) {
		t.Fatalf("err = %v, want one naming the attribute and starter setup", err)
	}
	// A server that cannot answer is not taken for a missing attribute.
	err = checkGroupAttribute(t.Context(), failingCounter{errors.New("connection refused")})
	if err == nil || !strings.Contains(err.Error(), "look up group ledgers") || strings.Contains(err.Error(), "starter setup") {
		t.Fatalf("err = %v, want a lookup failure, not a setup hint", err)
	}
}
