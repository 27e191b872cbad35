package rollout_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/turnstile-rl/turnstile/workflows/rollout"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/internal/failpoint"
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

func fnCall(id, name, args string) wireCall {
	c := wireCall{ID: id, Type: "function"}
	c.Function.Name, c.Function.Arguments = name, args
	return c
}

// completion is a Chat Completions answer with one choice.
func completion(content, finish string, calls ...wireCall) answer {
	msg := map[string]any{"role": "assistant", "content": content}
	if content == "" {
		msg["content"] = nil
	}
	if len(calls) > 0 {
		msg["tool_calls"] = calls
	}
	return ok(map[string]any{
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
	store := newStore(t)
	head := mustAppend(t, store, conversation...)
	toolsDigest, err := store.PutJSON(t.Context(), counterTools)
	require.NoError(t, err)

	model := newFakeModel(t, func(r *http.Request, _ map[string]any) answer {
		if r.Header.Get("Authorization") != "Bearer k-123" {
			return answer{status: http.StatusUnauthorized, body: map[string]any{"error": map[string]any{"message": "bad key"}}}
		}
		return completion("Two more calls.", "tool_calls", fnCall("call_3", "add", `{"n":4}`), fnCall("", "read", ``))
	})
	fp, err := failpoint.Parse(failpoint.WorkerModelAnsweredBeforeReport + "=kill@1")
	require.NoError(t, err)
	var kills int
	fp.SetKill(func() { kills++ })
	acts := &rollout.Activities{Store: store, ModelBaseURL: "http://unused.invalid/v1", ModelAPIKey: "k-123", Failpoints: fp}

	in := rollout.CallModelInput{
		RolloutID: "r1", Attempt: 1, Turn: 2, Head: head, Tools: toolsDigest, Style: envs.StyleTools,
		Policy: rollout.PolicyRef{Model: "scripted-counter", BaseURL: model.URL + "/v1"},
		Seed:   42, Parent: "r1/a1/t1",
	}
	val, err := newActivityEnv(acts).ExecuteActivity(acts.CallModel, in)
	require.NoError(t, err)
	var res rollout.CallModelResult
	require.NoError(t, val.Get(&res))

	req := model.lastRequest(t)
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
	require.Equal(t, want, mustLoad(t, store, res.Head))
	require.Equal(t, 1, kills, "the failpoint stands between the stored answer and the report")
}

func TestCallModelGymStyle(t *testing.T) {
	store := newStore(t)
	before := []transcript.Item{
		{Role: "system", Content: "Answer left or right."},
		{Role: "user", Content: "position 0"},
		{Role: "assistant", Content: "left"},
		{Role: "user", Content: "position -1"},
	}
	head := mustAppend(t, store, before...)
	model := newFakeModel(t, func(*http.Request, map[string]any) answer {
		return completion(`right "again"`, "stop")
	})
	acts := &rollout.Activities{Store: store, ModelBaseURL: model.URL + "/v1"}

	val, err := newActivityEnv(acts).ExecuteActivity(acts.CallModel, rollout.CallModelInput{
		RolloutID: "g1", Turn: 1, Head: head, Style: envs.StyleGym,
		Policy: rollout.PolicyRef{Model: "scripted-walk"}, Seed: 7,
	})
	require.NoError(t, err)
	var res rollout.CallModelResult
	require.NoError(t, val.Get(&res))

	req := model.lastRequest(t)
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
	require.Equal(t, append(before, transcript.Item{Role: "assistant", Content: `right "again"`}), mustLoad(t, store, res.Head))
}

func TestCallModelErrors(t *testing.T) {
	in1Hour := time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)
	tests := []struct {
		name     string
		reply    answer
		want     errorWant
		minDelay time.Duration // for an HTTP-date Retry-After, checked as a range
	}{
		{
			name:  "429 with Retry-After seconds",
			reply: answer{status: 429, header: http.Header{"Retry-After": {"7"}}, body: map[string]any{"error": map[string]any{"message": "slow down"}}},
			want:  errorWant{typ: rollout.ErrModelUnavailable, delay: 7 * time.Second, contains: "slow down"},
		},
		{
			name:  "429 without Retry-After",
			reply: answer{status: 429, body: map[string]any{"error": map[string]any{"message": "slow down"}}},
			want:  errorWant{typ: rollout.ErrModelUnavailable},
		},
		{
			name:     "503 with Retry-After date",
			reply:    answer{status: 503, header: http.Header{"Retry-After": {in1Hour}}, body: "overloaded"},
			want:     errorWant{typ: rollout.ErrModelUnavailable},
			minDelay: 50 * time.Minute,
		},
		{
			name:  "500 is retried",
			reply: answer{status: 500, body: map[string]any{"error": map[string]any{"message": "internal"}}},
			want:  errorWant{typ: rollout.ErrModelUnavailable, contains: "500"},
		},
		{
			name:  "400 is not retried",
			reply: answer{status: 400, body: map[string]any{"error": map[string]any{"message": "model scripted-x does not exist", "type": "invalid_request_error"}}},
			want:  errorWant{typ: rollout.ErrModelRequest, nonRetryable: true, contains: "model scripted-x does not exist"},
		},
		{
			name:  "404 with a plain body",
			reply: answer{status: 404, body: "no such route"},
			want:  errorWant{typ: rollout.ErrModelRequest, nonRetryable: true, contains: "404 Not Found: no such route"},
		},
		{
			name:  "no choice",
			reply: ok(map[string]any{"id": "x", "object": "chat.completion", "model": "m", "choices": []any{}}),
			want:  errorWant{typ: rollout.ErrModelEmpty, nonRetryable: true, contains: "without any choice"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newStore(t)
			head := mustAppend(t, store, transcript.Item{Role: "user", Content: "hi"})
			model := newFakeModel(t, func(*http.Request, map[string]any) answer { return tt.reply })
			acts := &rollout.Activities{Store: store, ModelBaseURL: model.URL + "/v1"}
			_, err := newActivityEnv(acts).ExecuteActivity(acts.CallModel, rollout.CallModelInput{
				RolloutID: "r1", Head: head, Style: envs.StyleGym, Policy: rollout.PolicyRef{Model: "m"},
			})
			if tt.minDelay > 0 {
				ae := appError(t, err)
				require.False(t, ae.NonRetryable())
				require.Greater(t, ae.NextRetryDelay(), tt.minDelay)
				require.LessOrEqual(t, ae.NextRetryDelay(), time.Hour)
			} else {
				checkError(t, err, tt.want)
			}
			require.Equal(t, 1, model.count(), "the SDK must not retry on its own")
			require.Equal(t, []transcript.Item{{Role: "user", Content: "hi"}}, mustLoad(t, store, head))
		})
	}
}

func TestCallModelNetworkErrorIsRetryable(t *testing.T) {
	store := newStore(t)
	head := mustAppend(t, store, transcript.Item{Role: "user", Content: "hi"})
	model := newFakeModel(t, nil)
	model.Close()
	acts := &rollout.Activities{Store: store, ModelBaseURL: model.URL + "/v1"}
	_, err := newActivityEnv(acts).ExecuteActivity(acts.CallModel, rollout.CallModelInput{
		RolloutID: "r1", Head: head, Style: envs.StyleGym, Policy: rollout.PolicyRef{Model: "m"},
	})
	checkError(t, err, errorWant{nonRetryable: false, contains: "r1/a0/t0"})
}

func TestCallModelBadInput(t *testing.T) {
	store := newStore(t)
	head := mustAppend(t, store, transcript.Item{Role: "user", Content: "hi"})
	missing := transcript.DigestOf([]byte("never stored"))
	valid := rollout.CallModelInput{RolloutID: "r1", Head: head, Style: envs.StyleGym, Policy: rollout.PolicyRef{Model: "m"}}
	tests := []struct {
		name   string
		mutate func(*rollout.CallModelInput)
		want   errorWant
	}{
		{"empty model", func(in *rollout.CallModelInput) { in.Policy.Model = "" }, errorWant{typ: rollout.ErrBadInput, nonRetryable: true, contains: "empty policy model"}},
		{"negative turn", func(in *rollout.CallModelInput) { in.Turn = -1 }, errorWant{typ: rollout.ErrBadInput, nonRetryable: true, contains: "negative turn"}},
		{"empty head", func(in *rollout.CallModelInput) { in.Head = "" }, errorWant{typ: rollout.ErrBadInput, nonRetryable: true, contains: "malformed digest"}},
		{"tools style without tools", func(in *rollout.CallModelInput) { in.Style = envs.StyleTools }, errorWant{typ: rollout.ErrBadInput, nonRetryable: true, contains: "tools"}},
		{"head not stored", func(in *rollout.CallModelInput) { in.Head = missing }, errorWant{typ: rollout.ErrTranscript, nonRetryable: true, contains: "not found"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			model := newFakeModel(t, func(*http.Request, map[string]any) answer { return completion("x", "stop") })
			acts := &rollout.Activities{Store: store, ModelBaseURL: model.URL + "/v1"}
			in := valid
			tt.mutate(&in)
			_, err := newActivityEnv(acts).ExecuteActivity(acts.CallModel, in)
			checkError(t, err, tt.want)
			require.Zero(t, model.count())
		})
	}
}

// A slow model call heartbeats while it waits: the fake model answers only
// after the activity has heartbeated.
func TestCallModelHeartbeatsWhileWaiting(t *testing.T) {
	store := newStore(t)
	head := mustAppend(t, store, transcript.Item{Role: "user", Content: "hi"})
	beat := make(chan string, 1)
	model := newFakeModel(t, func(r *http.Request, _ map[string]any) answer {
		select {
		case <-beat:
			return completion("done", "stop")
		case <-r.Context().Done():
			return answer{status: 500, body: "cancelled"}
		}
	})
	acts := &rollout.Activities{Store: store, ModelBaseURL: model.URL + "/v1", HeartbeatEvery: time.Millisecond}
	env := newActivityEnv(acts)
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
