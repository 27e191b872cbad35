package environment_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/turnstile-rl/turnstile/activities/environment"
	"github.com/turnstile-rl/turnstile/workflows/rollout"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/internal/testsupport"
	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

var counterTools = []envs.Tool{
	{Name: "add", Description: "add n to the counter", Parameters: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)},
	{Name: "read", Description: "read the counter", Parameters: json.RawMessage(`{"type":"object","properties":{}}`)},
}

func TestStartEnvironment(t *testing.T) {
	tests := []struct {
		name      string
		spec      envs.Spec
		start     envs.Start
		wantStyle envs.Style
		wantMode  envs.Mode
		wantItems []transcript.Item
		wantTools []envs.Tool
	}{
		{
			name:      "tools",
			spec:      envs.Spec{Name: "counter", Mode: envs.ModeExportRestore, Style: envs.StyleTools, Tools: counterTools},
			start:     envs.Start{Instructions: "You drive a counter.", Observation: "Reach 7."},
			wantStyle: envs.StyleTools,
			wantMode:  envs.ModeExportRestore,
			wantItems: []transcript.Item{{Role: "system", Content: "You drive a counter."}, {Role: "user", Content: "Reach 7."}},
			wantTools: counterTools,
		},
		{
			name:      "gym, undeclared mode is restart-only",
			spec:      envs.Spec{Name: "walk", Style: envs.StyleGym},
			start:     envs.Start{Instructions: "Answer left or right.", Observation: "position 0"},
			wantStyle: envs.StyleGym,
			wantMode:  envs.ModeRestartOnly,
			wantItems: []transcript.Item{{Role: "system", Content: "Answer left or right."}, {Role: "user", Content: "position 0"}},
			wantTools: []envs.Tool{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := testsupport.NewStore(t)
			env := newFakeEnv(t)
			env.start = func(req protocol.StartRequest) testsupport.Answer {
				return testsupport.OK(protocol.StartResponse{Revision: 1, Spec: tt.spec, Start: tt.start})
			}
			acts := &environment.Activities{Store: store, URL: env.URL}
			ae := testsupport.NewActivityEnv(acts)

			in := rollout.StartEnvironmentInput{
				RolloutID: "r1", Attempt: 2, Env: rollout.EnvRef{Name: tt.spec.Name},
				Seed: 42, Task: json.RawMessage(`{"target":7}`),
			}
			val, err := ae.ExecuteActivity(acts.StartEnvironment, in)
			require.NoError(t, err)
			var res rollout.StartEnvironmentResult
			require.NoError(t, val.Get(&res))

			starts := env.startRequests()
			require.Len(t, starts, 1)
			got := starts[0]
			require.Equal(t, protocol.Identity{RolloutID: "r1", Attempt: 2, RequestID: protocol.SeedRequestID("r1")}, got.Identity)
			require.Equal(t, tt.spec.Name, got.Env)
			require.Equal(t, int64(42), got.Seed)
			require.JSONEq(t, `{"target":7}`, string(got.Task))

			require.Equal(t, int64(1), res.Revision)
			require.Equal(t, tt.wantStyle, res.Style)
			require.Equal(t, tt.wantMode, res.Mode)
			require.Equal(t, tt.wantItems, testsupport.MustLoad(t, store, res.Head))
			var tools []envs.Tool
			require.NoError(t, store.GetJSON(t.Context(), res.Tools, &tools))
			require.Equal(t, tt.wantTools, tools)

			// Same answer, same digests: a retried start is invisible.
			val, err = ae.ExecuteActivity(acts.StartEnvironment, in)
			require.NoError(t, err)
			var again rollout.StartEnvironmentResult
			require.NoError(t, val.Get(&again))
			require.Equal(t, res, again)
		})
	}
}

func TestStartEnvironmentErrors(t *testing.T) {
	tests := []struct {
		name  string
		in    rollout.StartEnvironmentInput
		reply testsupport.Answer
		want  testsupport.ErrorWant
		calls int
	}{
		{
			name:  "empty rollout id",
			in:    rollout.StartEnvironmentInput{Env: rollout.EnvRef{Name: "counter"}},
			want:  testsupport.ErrorWant{Type: rollout.ErrBadInput, NonRetryable: true, Contains: "empty rollout id"},
			calls: 0,
		},
		{
			name:  "stale attempt",
			in:    rollout.StartEnvironmentInput{RolloutID: "r1", Env: rollout.EnvRef{Name: "counter"}},
			reply: envRefusal(http.StatusConflict, protocol.CodeStaleAttempt, "attempt 0 < installed 1"),
			want:  testsupport.ErrorWant{Type: rollout.ErrStaleAttempt, NonRetryable: true, Contains: "attempt 0 < installed 1"},
			calls: 1,
		},
		{
			name:  "parked",
			in:    rollout.StartEnvironmentInput{RolloutID: "r1", Env: rollout.EnvRef{Name: "counter"}},
			reply: envRefusal(http.StatusServiceUnavailable, protocol.CodeParked, "checkpoint c1 in progress"),
			want:  testsupport.ErrorWant{Type: rollout.ErrParked, NonRetryable: true},
			calls: 1,
		},
		{
			name:  "unknown env",
			in:    rollout.StartEnvironmentInput{RolloutID: "r1", Env: rollout.EnvRef{Name: "nope"}},
			reply: envRefusal(http.StatusNotFound, protocol.CodeUnknownEnv, `no environment "nope"`),
			want:  testsupport.ErrorWant{Type: rollout.ErrEnvironment, NonRetryable: true, Contains: `no environment "nope"`},
			calls: 1,
		},
		{
			name:  "unknown style",
			in:    rollout.StartEnvironmentInput{RolloutID: "r1", Env: rollout.EnvRef{Name: "odd"}},
			reply: testsupport.OK(protocol.StartResponse{Spec: envs.Spec{Name: "odd", Style: "telepathy"}}),
			want:  testsupport.ErrorWant{Type: rollout.ErrEnvironment, NonRetryable: true, Contains: "telepathy"},
			calls: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newFakeEnv(t)
			env.start = func(protocol.StartRequest) testsupport.Answer { return tt.reply }
			acts := &environment.Activities{Store: testsupport.NewStore(t), URL: env.URL}
			_, err := testsupport.NewActivityEnv(acts).ExecuteActivity(acts.StartEnvironment, tt.in)
			testsupport.CheckError(t, err, tt.want)
			require.Len(t, env.startRequests(), tt.calls)
		})
	}
}

func TestOperateEnvironment(t *testing.T) {
	call := transcript.ToolCall{ID: "call_1", Name: "add", Arguments: `{"n": 3}`}
	step := transcript.ToolCall{ID: "step-0", Name: envs.StepTool, Arguments: `{"action":"left"}`}
	tests := []struct {
		name     string
		style    envs.Style
		call     transcript.ToolCall
		reply    testsupport.Answer
		want     rollout.OperateEnvironmentResult // Head is checked through wantItem
		wantItem transcript.Item
	}{
		{
			name:     "tools observation",
			style:    envs.StyleTools,
			call:     call,
			reply:    testsupport.OK(protocol.OperateResponse{Revision: 6, Outcome: envs.Outcome{Observation: "counter is 3"}}),
			want:     rollout.OperateEnvironmentResult{Revision: 6},
			wantItem: transcript.Item{Role: "tool", ToolCallID: "call_1", Content: "counter is 3"},
		},
		{
			name:     "tools replayed response",
			style:    envs.StyleTools,
			call:     call,
			reply:    testsupport.OK(protocol.OperateResponse{Revision: 6, Outcome: envs.Outcome{Observation: "counter is 3", Terminated: true}, Replayed: true}),
			want:     rollout.OperateEnvironmentResult{Revision: 6, Terminated: true, Replayed: true},
			wantItem: transcript.Item{Role: "tool", ToolCallID: "call_1", Content: "counter is 3"},
		},
		{
			name:     "gym step",
			style:    envs.StyleGym,
			call:     step,
			reply:    testsupport.OK(protocol.OperateResponse{Revision: 6, Outcome: envs.Outcome{Observation: "position -1", Reward: 0.25, Truncated: true}}),
			want:     rollout.OperateEnvironmentResult{Revision: 6, Reward: 0.25, Truncated: true},
			wantItem: transcript.Item{Role: "user", Content: "position -1"},
		},
		{
			name:     "tools refusal is shown to the model",
			style:    envs.StyleTools,
			call:     call,
			reply:    envRefusal(http.StatusUnprocessableEntity, envs.CodeUnknownTool, `no tool "add"`),
			want:     rollout.OperateEnvironmentResult{Revision: 5, Refusal: `unknown_tool: no tool "add"`},
			wantItem: transcript.Item{Role: "tool", ToolCallID: "call_1", Content: `error: unknown_tool: no tool "add"`},
		},
		{
			name:     "gym refusal is a user message",
			style:    envs.StyleGym,
			call:     step,
			reply:    envRefusal(http.StatusUnprocessableEntity, envs.CodeIllegalAction, "left is a wall"),
			want:     rollout.OperateEnvironmentResult{Revision: 5, Refusal: "illegal_action: left is a wall"},
			wantItem: transcript.Item{Role: "user", Content: "error: illegal_action: left is a wall"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := testsupport.NewStore(t)
			before := []transcript.Item{{Role: "user", Content: "go"}, {Role: "assistant", ToolCalls: []transcript.ToolCall{tt.call}}}
			head := testsupport.MustAppend(t, store, before...)
			env := newFakeEnv(t)
			env.operate = func(protocol.OperateRequest) testsupport.Answer { return tt.reply }
			fp, err := failpoint.Parse(failpoint.WorkerEnvAppliedBeforeReport + "=kill@1")
			require.NoError(t, err)
			var kills int
			fp.SetKill(func() { kills++ })
			acts := &environment.Activities{Store: store, URL: "http://unused.invalid", Failpoints: fp,
				Destinations: testsupport.LoopbackDestinations(t, "http://unused.invalid", "")}

			in := rollout.OperateEnvironmentInput{
				RolloutID: "r1", Attempt: 1, RequestID: protocol.OperateRequestID("r1", 0, 0),
				ExpectedRevision: 5, Env: rollout.EnvRef{Name: "counter", URL: env.URL},
				Style: tt.style, Head: head, Call: tt.call,
			}
			val, err := testsupport.NewActivityEnv(acts).ExecuteActivity(acts.OperateEnvironment, in)
			require.NoError(t, err)
			var res rollout.OperateEnvironmentResult
			require.NoError(t, val.Get(&res))

			reqs := env.operateRequests()
			require.Len(t, reqs, 1)
			require.Equal(t, protocol.Identity{RolloutID: "r1", Attempt: 1, RequestID: "r1/t0/c0"}, reqs[0].Identity)
			require.Equal(t, int64(5), reqs[0].ExpectedRevision)
			require.Equal(t, tt.call.Name, reqs[0].Tool)
			require.JSONEq(t, tt.call.Arguments, string(reqs[0].Arguments))

			require.Equal(t, append(before, tt.wantItem), testsupport.MustLoad(t, store, res.Head))
			res.Head = ""
			require.Equal(t, tt.want, res)
			require.Equal(t, 1, kills, "the failpoint stands between the server's answer and the report")
		})
	}
}

func TestOperateEnvironmentInvalidArgumentsAreRefusedLocally(t *testing.T) {
	for _, style := range []envs.Style{envs.StyleTools, envs.StyleGym} {
		t.Run(string(style), func(t *testing.T) {
			store := testsupport.NewStore(t)
			call := transcript.ToolCall{ID: "call_9", Name: "add", Arguments: `{"n": 3`}
			before := []transcript.Item{{Role: "user", Content: "go"}, {Role: "assistant", ToolCalls: []transcript.ToolCall{call}}}
			head := testsupport.MustAppend(t, store, before...)
			env := newFakeEnv(t)
			env.operate = func(protocol.OperateRequest) testsupport.Answer {
				assert.Fail(t, "the server must not be called with invalid arguments")
				return testsupport.OK(protocol.OperateResponse{})
			}
			acts := &environment.Activities{Store: store, URL: env.URL}
			val, err := testsupport.NewActivityEnv(acts).ExecuteActivity(acts.OperateEnvironment, rollout.OperateEnvironmentInput{
				RolloutID: "r1", RequestID: "r1/t3/c0", ExpectedRevision: 9, Style: style, Head: head, Call: call,
			})
			require.NoError(t, err)
			var res rollout.OperateEnvironmentResult
			require.NoError(t, val.Get(&res))

			require.Empty(t, env.operateRequests())
			require.Equal(t, int64(9), res.Revision)
			require.Contains(t, res.Refusal, envs.CodeBadArguments+": ")
			require.Contains(t, res.Refusal, `{"n": 3`)
			items := testsupport.MustLoad(t, store, res.Head)
			require.Len(t, items, 3)
			last := items[2]
			require.Equal(t, "error: "+res.Refusal, last.Content)
			if style == envs.StyleGym {
				require.Equal(t, transcript.Item{Role: "user", Content: last.Content}, last)
			} else {
				require.Equal(t, transcript.Item{Role: "tool", ToolCallID: "call_9", Content: last.Content}, last)
			}
		})
	}
}

func TestOperateEnvironmentErrors(t *testing.T) {
	tests := []struct {
		name  string
		reply testsupport.Answer
		want  testsupport.ErrorWant
	}{
		{
			name:  "stale attempt",
			reply: envRefusal(http.StatusConflict, protocol.CodeStaleAttempt, "attempt 1 < installed 2"),
			want:  testsupport.ErrorWant{Type: rollout.ErrStaleAttempt, NonRetryable: true, Contains: "attempt 1 < installed 2"},
		},
		{
			name:  "parked",
			reply: envRefusal(http.StatusServiceUnavailable, protocol.CodeParked, "admission closed"),
			want:  testsupport.ErrorWant{Type: rollout.ErrParked, NonRetryable: true},
		},
		{
			name:  "revision mismatch",
			reply: envRefusal(http.StatusConflict, protocol.CodeRevisionMismatch, "expected 5, session at 7"),
			want:  testsupport.ErrorWant{Type: rollout.ErrEnvironment, NonRetryable: true, Contains: "expected 5, session at 7"},
		},
		{
			name:  "request id conflict",
			reply: envRefusal(http.StatusConflict, protocol.CodeRequestConflict, "same id, other body"),
			want:  testsupport.ErrorWant{Type: rollout.ErrEnvironment, NonRetryable: true, Contains: "same id, other body"},
		},
		{
			// A server restarted empty at its address: retried until a
			// recovery moves the rollout (or the call's budget runs out).
			name:  "unknown session is retried as a lost session",
			reply: envRefusal(http.StatusNotFound, protocol.CodeUnknownSession, "no session r1"),
			want:  testsupport.ErrorWant{Type: rollout.ErrSessionLost, NonRetryable: false, Contains: "no session r1"},
		},
		{
			// The same loss seen by a later attempt (a recovered or
			// restored rollout): the empty server has no attempt of it
			// installed.
			name:  "attempt not installed is retried as a lost session",
			reply: envRefusal(http.StatusConflict, protocol.CodeAttemptNotInstalled, "attempt 1 is above attempt 0 installed"),
			want:  testsupport.ErrorWant{Type: rollout.ErrSessionLost, NonRetryable: false, Contains: "attempt 1 is above attempt 0"},
		},
		{
			name:  "server error is retried",
			reply: testsupport.Answer{Status: http.StatusInternalServerError, Body: "boom"},
			want:  testsupport.ErrorWant{NonRetryable: false, Contains: "boom"},
		},
		{
			name:  "unavailable without parked code is retried",
			reply: testsupport.Answer{Status: http.StatusServiceUnavailable, Body: "restarting"},
			want:  testsupport.ErrorWant{NonRetryable: false},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := testsupport.NewStore(t)
			head := testsupport.MustAppend(t, store, transcript.Item{Role: "user", Content: "go"})
			env := newFakeEnv(t)
			env.operate = func(protocol.OperateRequest) testsupport.Answer { return tt.reply }
			acts := &environment.Activities{Store: store, URL: env.URL}
			_, err := testsupport.NewActivityEnv(acts).ExecuteActivity(acts.OperateEnvironment, rollout.OperateEnvironmentInput{
				RolloutID: "r1", Attempt: 1, RequestID: "r1/t0/c0", ExpectedRevision: 5,
				Style: envs.StyleTools, Head: head, Call: transcript.ToolCall{ID: "c", Name: "add", Arguments: `{}`},
			})
			testsupport.CheckError(t, err, tt.want)
			require.Len(t, env.operateRequests(), 1)
		})
	}
}

func TestOperateEnvironmentNetworkErrorIsRetryable(t *testing.T) {
	store := testsupport.NewStore(t)
	head := testsupport.MustAppend(t, store, transcript.Item{Role: "user", Content: "go"})
	env := newFakeEnv(t)
	env.Close() // nothing listens any more
	acts := &environment.Activities{Store: store, URL: env.URL}
	_, err := testsupport.NewActivityEnv(acts).ExecuteActivity(acts.OperateEnvironment, rollout.OperateEnvironmentInput{
		RolloutID: "r1", RequestID: "r1/t0/c0", Style: envs.StyleTools, Head: head,
		Call: transcript.ToolCall{ID: "c", Name: "add", Arguments: `{}`},
	})
	testsupport.CheckError(t, err, testsupport.ErrorWant{NonRetryable: false, Contains: "r1/t0/c0"})
}

func TestOperateEnvironmentBadInput(t *testing.T) {
	store := testsupport.NewStore(t)
	head := testsupport.MustAppend(t, store, transcript.Item{Role: "user", Content: "go"})
	valid := rollout.OperateEnvironmentInput{
		RolloutID: "r1", RequestID: "r1/t0/c0", Style: envs.StyleTools, Head: head,
		Call: transcript.ToolCall{ID: "c", Name: "add", Arguments: `{}`},
	}
	tests := []struct {
		name     string
		mutate   func(*rollout.OperateEnvironmentInput)
		contains string
	}{
		{"empty rollout", func(in *rollout.OperateEnvironmentInput) { in.RolloutID = "" }, "empty rollout id"},
		{"negative attempt", func(in *rollout.OperateEnvironmentInput) { in.Attempt = -1 }, "negative attempt"},
		{"empty request id", func(in *rollout.OperateEnvironmentInput) { in.RequestID = "" }, "empty request id"},
		{"unknown style", func(in *rollout.OperateEnvironmentInput) { in.Style = "chess" }, `unknown style "chess"`},
		{"malformed head", func(in *rollout.OperateEnvironmentInput) { in.Head = "sha256:xyz" }, "malformed digest"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newFakeEnv(t)
			acts := &environment.Activities{Store: store, URL: env.URL}
			in := valid
			tt.mutate(&in)
			_, err := testsupport.NewActivityEnv(acts).ExecuteActivity(acts.OperateEnvironment, in)
			testsupport.CheckError(t, err, testsupport.ErrorWant{Type: rollout.ErrBadInput, NonRetryable: true, Contains: tt.contains})
			require.Empty(t, env.operateRequests())
		})
	}
}

func TestVerify(t *testing.T) {
	env := newFakeEnv(t)
	env.verify = func(req protocol.VerifyRequest) testsupport.Answer {
		if req.Attempt < 2 {
			return envRefusal(http.StatusConflict, protocol.CodeStaleAttempt, "attempt below 2")
		}
		return testsupport.OK(protocol.VerifyResponse{Revision: 9, Verdict: envs.Verdict{Reward: 1, Details: json.RawMessage(`{"reached":7}`)}})
	}
	acts := &environment.Activities{Store: testsupport.NewStore(t), URL: env.URL}
	ae := testsupport.NewActivityEnv(acts)

	val, err := ae.ExecuteActivity(acts.Verify, rollout.VerifyInput{RolloutID: "r1", Attempt: 2, ExpectedRevision: 8})
	require.NoError(t, err)
	var res rollout.VerifyResult
	require.NoError(t, val.Get(&res))
	require.Equal(t, 1.0, res.Reward)
	require.JSONEq(t, `{"reached":7}`, string(res.Details))
	verifies := env.verifyRequests()
	require.Len(t, verifies, 1)
	require.Equal(t, protocol.Identity{RolloutID: "r1", Attempt: 2, RequestID: protocol.VerifyRequestID("r1")}, verifies[0].Identity)
	require.Equal(t, int64(8), verifies[0].ExpectedRevision)

	_, err = ae.ExecuteActivity(acts.Verify, rollout.VerifyInput{RolloutID: "r1", Attempt: 1, ExpectedRevision: 8})
	testsupport.CheckError(t, err, testsupport.ErrorWant{Type: rollout.ErrStaleAttempt, NonRetryable: true, Contains: "attempt below 2"})
}

// TestVerifyStoresDetails: asked to, Verify puts the verdict's details in
// the transcript store as they came and returns only their digest; a
// verdict without details stores null. The same answer names the same blob.
func TestVerifyStoresDetails(t *testing.T) {
	for _, tt := range []struct {
		details json.RawMessage
		want    string
	}{{json.RawMessage(`{"reached":7}`), `{"reached":7}`}, {nil, `null`}} {
		env := newFakeEnv(t)
		env.verify = func(protocol.VerifyRequest) testsupport.Answer {
			return testsupport.OK(protocol.VerifyResponse{Revision: 9, Verdict: envs.Verdict{Reward: 1, Details: tt.details}})
		}
		store := testsupport.NewStore(t)
		acts := &environment.Activities{Store: store, URL: env.URL}
		ae := testsupport.NewActivityEnv(acts)
		in := rollout.VerifyInput{RolloutID: "r1", Attempt: 0, ExpectedRevision: 8, StoreDetails: true}
		val, err := ae.ExecuteActivity(acts.Verify, in)
		require.NoError(t, err)
		var res rollout.VerifyResult
		require.NoError(t, val.Get(&res))
		require.Nil(t, res.Details, "the details stay out of history")
		got, err := store.Get(t.Context(), res.DetailsRef)
		require.NoError(t, err)
		require.JSONEq(t, tt.want, string(got))

		val, err = ae.ExecuteActivity(acts.Verify, in)
		require.NoError(t, err)
		var again rollout.VerifyResult
		require.NoError(t, val.Get(&again))
		require.Equal(t, res, again)
	}
}

// TestStartEnvironmentGroupRetry: a group retry seeds a fresh session under
// its new attempt (a server that has not installed it is asked through
// AuthoriseAttempt, like any start-over); a grant that is not this
// attempt's is refused before anything is sent.
func TestStartEnvironmentGroupRetry(t *testing.T) {
	env := newFakeEnv(t)
	env.start = func(protocol.StartRequest) testsupport.Answer {
		return testsupport.OK(protocol.StartResponse{Spec: envs.Spec{Name: "counter", Style: envs.StyleTools}, Start: envs.Start{Observation: "Reach 7."}})
	}
	acts := &environment.Activities{Store: testsupport.NewStore(t), URL: env.URL}
	ae := testsupport.NewActivityEnv(acts)
	in := rollout.StartEnvironmentInput{RolloutID: "s-g-r0", Attempt: 1, Env: rollout.EnvRef{Name: "counter"}, Task: json.RawMessage(`{}`),
		Retry: &rollout.GroupGrant{RolloutID: "s-g-r0", Attempt: 1, Retry: 1, Budget: 2}}
	_, err := ae.ExecuteActivity(acts.StartEnvironment, in)
	require.NoError(t, err)
	starts := env.startRequests()
	require.Len(t, starts, 1)
	require.Equal(t, 1, starts[0].Attempt)

	in.Retry.Attempt = 2
	_, err = ae.ExecuteActivity(acts.StartEnvironment, in)
	testsupport.CheckError(t, err, testsupport.ErrorWant{Type: rollout.ErrBadInput, NonRetryable: true, Contains: "the group grant is for s-g-r0 attempt 2"})
	require.Len(t, env.startRequests(), 1, "nothing sent for a foreign grant")
}

// fenceAnswer is a set fence checker that answers every check the same.
type fenceAnswer struct {
	window *rollout.FenceWindow
	err    error
	checks []rollout.SetFenceCheck
}

func (f *fenceAnswer) FencedRun(_ context.Context, set string, startedAt time.Time) (rollout.FenceWindow, bool, error) {
	f.checks = append(f.checks, rollout.SetFenceCheck{Set: set, StartedAt: startedAt})
	if f.window == nil {
		return rollout.FenceWindow{}, false, f.err
	}
	return *f.window, true, f.err
}

// A seed that names its set's fence is checked before anything is sent: a
// run chain a restore fenced fails FencedByRestore and the environment
// server never hears of it; a record that cannot be read fails the seed
// (retried), never lets it through; a worker with no checker refuses such a
// seed; a seed that names no fence (no set) is not checked.
func TestStartEnvironmentChecksTheSetFence(t *testing.T) {
	started := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	fenced := rollout.StartEnvironmentInput{RolloutID: "r1", Env: rollout.EnvRef{Name: "counter"},
		Fence: &rollout.SetFenceCheck{Set: "s1", StartedAt: started}}
	window := &rollout.FenceWindow{RestoreID: "r2", CheckpointID: "k1", Before: started.Add(time.Second)}
	tests := []struct {
		name   string
		fences environment.SetFenceChecker
		in     rollout.StartEnvironmentInput
		want   testsupport.ErrorWant
		calls  int
	}{
		{name: "fenced", fences: &fenceAnswer{window: window}, in: fenced,
			want: testsupport.ErrorWant{Type: rollout.ErrFencedByRestore, NonRetryable: true, Contains: "restore r2 of checkpoint k1 fenced set s1"}},
		{name: "record unreadable", fences: &fenceAnswer{err: errors.New("describe fence/s1: unavailable")}, in: fenced,
			want: testsupport.ErrorWant{Contains: "unavailable"}},
		{name: "no checker", in: fenced,
			want: testsupport.ErrorWant{Type: rollout.ErrBadInput, NonRetryable: true, Contains: "no set fence checker"}},
		{name: "not fenced", fences: &fenceAnswer{}, in: fenced, calls: 1},
		{name: "no set", in: rollout.StartEnvironmentInput{RolloutID: "r1", Env: rollout.EnvRef{Name: "counter"}}, calls: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newFakeEnv(t)
			env.start = func(protocol.StartRequest) testsupport.Answer {
				return testsupport.OK(protocol.StartResponse{Spec: envs.Spec{Name: "counter"}, Start: envs.Start{Observation: "count to 3"}})
			}
			acts := &environment.Activities{Store: testsupport.NewStore(t), URL: env.URL, Fences: tt.fences}
			_, err := testsupport.NewActivityEnv(acts).ExecuteActivity(acts.StartEnvironment, tt.in)
			if tt.calls == 0 {
				testsupport.CheckError(t, err, tt.want)
			} else {
				require.NoError(t, err)
			}
			require.Len(t, env.startRequests(), tt.calls, "requests the environment server got")
		})
	}
}
