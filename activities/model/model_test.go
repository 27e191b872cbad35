package model_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/turnstile-rl/turnstile/activities/model"
	"github.com/turnstile-rl/turnstile/workflows/rollout"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/internal/testsupport"
	"github.com/turnstile-rl/turnstile/internal/transcript"
)

type wireCall struct {
	ID       string `json:"id,omitempty"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// counterTools are the counter environment's tools, as a tool schema blob.
var counterTools = []envs.Tool{
	{Name: "add", Description: "add n to the counter", Parameters: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)},
	{Name: "read", Description: "read the counter", Parameters: json.RawMessage(`{"type":"object","properties":{}}`)},
}

func fnCall(id, name, args string) wireCall {
	c := wireCall{ID: id, Type: "function"}
	c.Function.Name, c.Function.Arguments = name, args
	return c
}

// completion is a Chat Completions answer with one choice.
func completion(content, finish string, calls ...wireCall) testsupport.Answer {
	msg := map[string]any{"role": "assistant", "content": content}
	if content == "" {
		msg["content"] = nil
	}
	if len(calls) > 0 {
		msg["tool_calls"] = calls
	}
	return testsupport.OK(map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "scripted",
		"choices": []any{map[string]any{"index": 0, "finish_reason": finish, "message": msg, "logprobs": nil}},
		"usage":   map[string]any{"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
	})
}

// conversation is a tools-style conversation touching every role.
var conversation = []transcript.Item{
	{Role: "system", Content: "You drive a counter."},
	{Role: "user", Content: "Reach 7."},
	{Role: "assistant", Content: "Adding 3.", ToolCalls: []transcript.ToolCall{{ID: "call_1", Name: "add", Arguments: `{"n":3}`}}},
	{Role: "tool", ToolCallID: "call_1", Content: "counter is 3"},
	{Role: "assistant", ToolCalls: []transcript.ToolCall{{ID: "call_2", Name: "read", Arguments: `{}`}}},
	{Role: "tool", ToolCallID: "call_2", Content: "3"},
}

const conversationWire = `[
	{"role":"system","content":"You drive a counter."},
	{"role":"user","content":"Reach 7."},
	{"role":"assistant","content":"Adding 3.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"add","arguments":"{\"n\":3}"}}]},
	{"role":"tool","tool_call_id":"call_1","content":"counter is 3"},
	{"role":"assistant","tool_calls":[{"id":"call_2","type":"function","function":{"name":"read","arguments":"{}"}}]},
	{"role":"tool","tool_call_id":"call_2","content":"3"}
]`

func asJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

func TestCallModelToolsStyle(t *testing.T) {
	store := testsupport.NewStore(t)
	head := testsupport.MustAppend(t, store, conversation...)
	toolsDigest, err := store.PutJSON(t.Context(), counterTools)
	require.NoError(t, err)

	srv := newFakeModel(t, func(r *http.Request, _ map[string]any) testsupport.Answer {
		if r.Header.Get("Authorization") != "Bearer k-123" {
			return testsupport.Answer{Status: http.StatusUnauthorized, Body: map[string]any{"error": map[string]any{"message": "bad key"}}}
		}
		return completion("Two more calls.", "tool_calls", fnCall("call_3", "add", `{"n":4}`), fnCall("", "read", ``))
	})
	fp, err := failpoint.Parse(failpoint.WorkerModelAnsweredBeforeReport + "=kill@1")
	require.NoError(t, err)
	var kills int
	fp.SetKill(func() { kills++ })
	acts := &model.Activities{Store: store, BaseURL: "http://unused.invalid/v1", APIKey: "k-123", Failpoints: fp,
		Destinations: testsupport.LoopbackDestinations(t, "", "http://unused.invalid/v1")}

	in := rollout.CallModelInput{
		RolloutID: "r1", Attempt: 1, Turn: 2, Head: head, Tools: toolsDigest, Style: envs.StyleTools,
		Policy: rollout.PolicyRef{Model: "scripted-counter", BaseURL: srv.URL + "/v1"},
		Seed:   42, Parent: "r1/a1/t1",
	}
	val, err := testsupport.NewActivityEnv(acts).ExecuteActivity(acts.CallModel, in)
	require.NoError(t, err)
	var res rollout.CallModelResult
	require.NoError(t, val.Get(&res))

	req := srv.lastRequest(t)
	require.Equal(t, "scripted-counter", req["model"])
	require.Equal(t, 42.0, req["seed"])
	require.JSONEq(t, conversationWire, asJSON(t, req["messages"]))
	require.JSONEq(t, `[
		{"type":"function","function":{"name":"add","description":"add n to the counter","parameters":{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}}},
		{"type":"function","function":{"name":"read","description":"read the counter","parameters":{"type":"object","properties":{}}}}
	]`, asJSON(t, req["tools"]))

	wantCalls := []transcript.ToolCall{
		{ID: "call_3", Name: "add", Arguments: `{"n":4}`},
		{ID: "call_t2_1", Name: "read", Arguments: ``}, // the server sent no id: a stable one is made up
	}
	require.Equal(t, rollout.CallModelResult{PendingCall: rollout.PendingCall{
		CallID:       rollout.ModelCallID("r1", 1, 2),
		Parent:       "r1/a1/t1",
		Head:         res.Head,
		ToolCalls:    wantCalls,
		FinishReason: "tool_calls",
		Usage:        rollout.Usage{PromptTokens: 11, CompletionTokens: 7, TotalTokens: 18, Calls: 1},
	}}, res)
	require.Equal(t, "r1/a1/t2", res.CallID)
	want := append(append([]transcript.Item(nil), conversation...),
		transcript.Item{Role: "assistant", Content: "Two more calls.", ToolCalls: wantCalls})
	require.Equal(t, want, testsupport.MustLoad(t, store, res.Head))
	require.Equal(t, 1, kills, "the failpoint stands between the stored answer and the report")
}

func TestCallModelGymStyle(t *testing.T) {
	store := testsupport.NewStore(t)
	before := []transcript.Item{
		{Role: "system", Content: "Answer left or right."},
		{Role: "user", Content: "position 0"},
		{Role: "assistant", Content: "left"},
		{Role: "user", Content: "position -1"},
	}
	head := testsupport.MustAppend(t, store, before...)
	srv := newFakeModel(t, func(*http.Request, map[string]any) testsupport.Answer {
		return completion(`right "again"`, "stop")
	})
	acts := &model.Activities{Store: store, BaseURL: srv.URL + "/v1"}

	val, err := testsupport.NewActivityEnv(acts).ExecuteActivity(acts.CallModel, rollout.CallModelInput{
		RolloutID: "g1", Turn: 1, Head: head, Style: envs.StyleGym,
		Policy: rollout.PolicyRef{Model: "scripted-walk"}, Seed: 7,
	})
	require.NoError(t, err)
	var res rollout.CallModelResult
	require.NoError(t, val.Get(&res))

	req := srv.lastRequest(t)
	require.NotContains(t, req, "tools", "gym style offers no tools")
	require.Equal(t, 7.0, req["seed"])
	require.JSONEq(t, `[
		{"role":"system","content":"Answer left or right."},
		{"role":"user","content":"position 0"},
		{"role":"assistant","content":"left"},
		{"role":"user","content":"position -1"}
	]`, asJSON(t, req["messages"]))

	require.Equal(t, []transcript.ToolCall{{ID: "step-1", Name: envs.StepTool, Arguments: `{"action":"right \"again\""}`}}, res.ToolCalls)
	var args struct{ Action string }
	require.NoError(t, json.Unmarshal([]byte(res.ToolCalls[0].Arguments), &args))
	require.Equal(t, `right "again"`, args.Action)
	require.Equal(t, "g1/a0/t1", res.CallID)
	require.Equal(t, "stop", res.FinishReason)
	require.Equal(t, append(before, transcript.Item{Role: "assistant", Content: `right "again"`}), testsupport.MustLoad(t, store, res.Head))
}

func TestCallModelErrors(t *testing.T) {
	in1Hour := time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)
	in2Minutes := time.Now().Add(2 * time.Minute).UTC().Format(http.TimeFormat)
	tests := []struct {
		name     string
		reply    testsupport.Answer
		want     testsupport.ErrorWant
		minDelay time.Duration // for an HTTP-date Retry-After, checked as a range
	}{
		{
			name:  "429 with Retry-After seconds",
			reply: testsupport.Answer{Status: 429, Header: http.Header{"Retry-After": {"7"}}, Body: map[string]any{"error": map[string]any{"message": "slow down"}}},
			want:  testsupport.ErrorWant{Type: model.ErrModelUnavailable, Delay: 7 * time.Second, Contains: "slow down"},
		},
		{
			name:  "429 without Retry-After",
			reply: testsupport.Answer{Status: 429, Body: map[string]any{"error": map[string]any{"message": "slow down"}}},
			want:  testsupport.ErrorWant{Type: model.ErrModelUnavailable},
		},
		{
			name:     "503 with Retry-After date",
			reply:    testsupport.Answer{Status: 503, Header: http.Header{"Retry-After": {in2Minutes}}, Body: "overloaded"},
			want:     testsupport.ErrorWant{Type: model.ErrModelUnavailable},
			minDelay: time.Minute,
		},
		{
			name:  "503 with a Retry-After date past the limit",
			reply: testsupport.Answer{Status: 503, Header: http.Header{"Retry-After": {in1Hour}}, Body: "overloaded"},
			want:  testsupport.ErrorWant{Type: model.ErrModelUnavailable, Delay: model.DefaultMaxRetryAfter},
		},
		{
			name:  "500 is retried",
			reply: testsupport.Answer{Status: 500, Body: map[string]any{"error": map[string]any{"message": "internal"}}},
			want:  testsupport.ErrorWant{Type: model.ErrModelUnavailable, Contains: "500"},
		},
		{
			name:  "400 is not retried",
			reply: testsupport.Answer{Status: 400, Body: map[string]any{"error": map[string]any{"message": "model scripted-x does not exist", "type": "invalid_request_error"}}},
			want:  testsupport.ErrorWant{Type: rollout.ErrModelRequest, NonRetryable: true, Contains: "model scripted-x does not exist"},
		},
		{
			name:  "404 with a plain body",
			reply: testsupport.Answer{Status: 404, Body: "no such route"},
			want:  testsupport.ErrorWant{Type: rollout.ErrModelRequest, NonRetryable: true, Contains: "404 Not Found: no such route"},
		},
		{
			name:  "no choice",
			reply: testsupport.OK(map[string]any{"id": "x", "object": "chat.completion", "model": "m", "choices": []any{}}),
			want:  testsupport.ErrorWant{Type: rollout.ErrModelEmpty, NonRetryable: true, Contains: "without any choice"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := testsupport.NewStore(t)
			head := testsupport.MustAppend(t, store, transcript.Item{Role: "user", Content: "hi"})
			srv := newFakeModel(t, func(*http.Request, map[string]any) testsupport.Answer { return tt.reply })
			acts := &model.Activities{Store: store, BaseURL: srv.URL + "/v1"}
			_, err := testsupport.NewActivityEnv(acts).ExecuteActivity(acts.CallModel, rollout.CallModelInput{
				RolloutID: "r1", Head: head, Style: envs.StyleGym, Policy: rollout.PolicyRef{Model: "m"},
			})
			if tt.minDelay > 0 {
				ae := testsupport.AppError(t, err)
				require.False(t, ae.NonRetryable())
				require.GreaterOrEqual(t, ae.NextRetryDelay(), tt.minDelay)
				require.LessOrEqual(t, ae.NextRetryDelay(), time.Hour)
			} else {
				testsupport.CheckError(t, err, tt.want)
			}
			require.Equal(t, 1, srv.count(), "the SDK must not retry on its own")
			require.Equal(t, []transcript.Item{{Role: "user", Content: "hi"}}, testsupport.MustLoad(t, store, head))
		})
	}
}

func TestCallModelNetworkErrorIsRetryable(t *testing.T) {
	store := testsupport.NewStore(t)
	head := testsupport.MustAppend(t, store, transcript.Item{Role: "user", Content: "hi"})
	srv := newFakeModel(t, nil)
	srv.Close()
	acts := &model.Activities{Store: store, BaseURL: srv.URL + "/v1"}
	_, err := testsupport.NewActivityEnv(acts).ExecuteActivity(acts.CallModel, rollout.CallModelInput{
		RolloutID: "r1", Head: head, Style: envs.StyleGym, Policy: rollout.PolicyRef{Model: "m"},
	})
	testsupport.CheckError(t, err, testsupport.ErrorWant{NonRetryable: false, Contains: "r1/a0/t0"})
}

func TestCallModelBadInput(t *testing.T) {
	store := testsupport.NewStore(t)
	head := testsupport.MustAppend(t, store, transcript.Item{Role: "user", Content: "hi"})
	missing := transcript.DigestOf([]byte("never stored"))
	valid := rollout.CallModelInput{RolloutID: "r1", Head: head, Style: envs.StyleGym, Policy: rollout.PolicyRef{Model: "m"}}
	tests := []struct {
		name   string
		mutate func(*rollout.CallModelInput)
		want   testsupport.ErrorWant
	}{
		{"empty model", func(in *rollout.CallModelInput) { in.Policy.Model = "" }, testsupport.ErrorWant{Type: rollout.ErrBadInput, NonRetryable: true, Contains: "empty policy model"}},
		{"negative turn", func(in *rollout.CallModelInput) { in.Turn = -1 }, testsupport.ErrorWant{Type: rollout.ErrBadInput, NonRetryable: true, Contains: "negative turn"}},
		{"empty head", func(in *rollout.CallModelInput) { in.Head = "" }, testsupport.ErrorWant{Type: rollout.ErrBadInput, NonRetryable: true, Contains: "malformed digest"}},
		{"tools style without tools", func(in *rollout.CallModelInput) { in.Style = envs.StyleTools }, testsupport.ErrorWant{Type: rollout.ErrBadInput, NonRetryable: true, Contains: "tools"}},
		{"head not stored", func(in *rollout.CallModelInput) { in.Head = missing }, testsupport.ErrorWant{Type: rollout.ErrTranscript, NonRetryable: true, Contains: "not found"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newFakeModel(t, func(*http.Request, map[string]any) testsupport.Answer { return completion("x", "stop") })
			acts := &model.Activities{Store: store, BaseURL: srv.URL + "/v1"}
			in := valid
			tt.mutate(&in)
			_, err := testsupport.NewActivityEnv(acts).ExecuteActivity(acts.CallModel, in)
			testsupport.CheckError(t, err, tt.want)
			require.Zero(t, srv.count())
		})
	}
}

// A slow model call heartbeats while it waits: the fake model answers only
// after the activity has heartbeated.
func TestCallModelHeartbeatsWhileWaiting(t *testing.T) {
	store := testsupport.NewStore(t)
	head := testsupport.MustAppend(t, store, transcript.Item{Role: "user", Content: "hi"})
	beat := make(chan string, 1)
	srv := newFakeModel(t, func(r *http.Request, _ map[string]any) testsupport.Answer {
		select {
		case <-beat:
			return completion("done", "stop")
		case <-r.Context().Done():
			return testsupport.Answer{Status: 500, Body: "cancelled"}
		}
	})
	acts := &model.Activities{Store: store, BaseURL: srv.URL + "/v1", HeartbeatEvery: time.Millisecond}
	env := testsupport.NewActivityEnv(acts)
	env.SetOnActivityHeartbeatListener(func(_ *activity.Info, details converter.EncodedValues) {
		var callID string
		_ = details.Get(&callID)
		select {
		case beat <- callID:
		default:
		}
	})
	val, err := env.ExecuteActivity(acts.CallModel, rollout.CallModelInput{
		RolloutID: "r1", Turn: 4, Head: head, Style: envs.StyleGym, Policy: rollout.PolicyRef{Model: "m"},
	})
	require.NoError(t, err)
	var res rollout.CallModelResult
	require.NoError(t, val.Get(&res))
	require.True(t, strings.HasSuffix(res.CallID, "/t4"))
}
