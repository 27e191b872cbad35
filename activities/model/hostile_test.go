package model_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/activities/model"
	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/internal/testsupport"
	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// hostileCall calls a model endpoint that answers reply, with acts' limits,
// and returns how much was stored and the error.
func hostileCall(t *testing.T, acts *model.Activities, reply func() testsupport.Answer) (int64, error) {
	t.Helper()
	srv := newFakeModel(t, func(*http.Request, map[string]any) testsupport.Answer { return reply() })
	return hostileCallTo(t, acts, srv.URL+"/v1")
}

// hostileCallTo is hostileCall of the endpoint at baseURL.
func hostileCallTo(t *testing.T, acts *model.Activities, baseURL string) (int64, error) {
	t.Helper()
	store := testsupport.NewStore(t)
	head := testsupport.MustAppend(t, store, transcript.Item{Role: "user", Content: "hi"})
	tools, err := store.PutJSON(t.Context(), counterTools)
	require.NoError(t, err)
	acts.Store, acts.BaseURL = store, baseURL
	writes := store.Stats().Writes
	_, err = testsupport.NewActivityEnv(acts).ExecuteActivity(acts.CallModel, rollout.CallModelInput{
		RolloutID: "r1", Head: head, Tools: tools, Style: envs.StyleTools, Policy: rollout.PolicyRef{Model: "m"},
	})
	require.Equal(t, []transcript.Item{{Role: "user", Content: "hi"}}, testsupport.MustLoad(t, store, head))
	return store.Stats().Writes - writes, err
}

// A model server cannot park a rollout for a year, nor overflow the delay:
// Retry-After is clamped to the model call's timeout, whatever it says.
func TestRetryAfterIsBounded(t *testing.T) {
	far := time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC).Format(http.TimeFormat)
	for _, h := range []http.Header{
		{"Retry-After": {"31536000"}},
		{"Retry-After": {"1e11"}},
		{"Retry-After": {"1e300"}},
		{"Retry-After": {far}},
		{"Retry-After-Ms": {"1e300"}},
		{"Retry-After-Ms": {"9223372036854775807"}},
	} {
		t.Run(fmt.Sprint(h), func(t *testing.T) {
			stored, err := hostileCall(t, &model.Activities{}, func() testsupport.Answer {
				return testsupport.Answer{Status: 503, Header: h, Body: "overloaded"}
			})
			ae := testsupport.AppError(t, err)
			require.False(t, ae.NonRetryable())
			require.Positive(t, ae.NextRetryDelay(), "the delay overflowed: %v", ae.NextRetryDelay())
			require.LessOrEqual(t, ae.NextRetryDelay(), rollout.DefaultModelCallTimeout)
			require.Zero(t, stored)
		})
	}
	for _, h := range []http.Header{{"Retry-After": {"-5"}}, {"Retry-After-Ms": {"-1e300"}}, {"Retry-After": {"NaN"}}} {
		t.Run(fmt.Sprint(h), func(t *testing.T) {
			_, err := hostileCall(t, &model.Activities{}, func() testsupport.Answer {
				return testsupport.Answer{Status: 429, Header: h, Body: "slow down"}
			})
			testsupport.CheckError(t, err, testsupport.ErrorWant{Type: model.ErrModelUnavailable})
		})
	}
}

// 5,000 tool calls in one answer fail the call, non-retryably, naming the
// limit; nothing is stored, so the workflow schedules no tool call.
func TestTooManyToolCallsFailTheCall(t *testing.T) {
	calls := make([]wireCall, 5000)
	for i := range calls {
		calls[i] = fnCall(fmt.Sprintf("call_%d", i), "add", `{"n":1}`)
	}
	stored, err := hostileCall(t, &model.Activities{}, func() testsupport.Answer { return completion("", "tool_calls", calls...) })
	testsupport.CheckError(t, err, testsupport.ErrorWant{Type: rollout.ErrModelAnswerOverLimit, NonRetryable: true, Contains: "5000 tool calls"})
	require.ErrorContains(t, err, model.EnvMaxToolCalls)
	require.Zero(t, stored)
}

// A 48 MiB answer is refused before it is read, non-retryably, naming the
// limit; nothing is stored.
func TestHugeAnswerFailsTheCall(t *testing.T) {
	// A valid completion whose content is 48 MiB of "x", streamed from a
	// small buffer with its Content-Length announced.
	const size = 48 << 20
	head := `{"id":"c","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"`
	tail := `"}}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", fmt.Sprint(len(head)+size+len(tail)))
		_, _ = io.WriteString(w, head)
		chunk := bytes.Repeat([]byte("x"), 64<<10)
		for range size / len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
		_, _ = io.WriteString(w, tail)
	}))
	t.Cleanup(srv.Close)
	stored, err := hostileCallTo(t, &model.Activities{}, srv.URL+"/v1")
	testsupport.CheckError(t, err, testsupport.ErrorWant{Type: rollout.ErrModelAnswerOverLimit, NonRetryable: true, Contains: "bytes"})
	require.ErrorContains(t, err, model.EnvMaxAnswerBytes)
	require.Zero(t, stored)
}

// The worker's limits are settings: a smaller answer limit refuses an
// answer streamed without a Content-Length, at the limit.
func TestAnswerLimitsAreSettings(t *testing.T) {
	calls := make([]wireCall, 3)
	for i := range calls {
		calls[i] = fnCall(fmt.Sprintf("call_%d", i), "add", `{"n":1}`)
	}
	stored, err := hostileCall(t, &model.Activities{MaxToolCalls: 2}, func() testsupport.Answer { return completion("", "tool_calls", calls...) })
	testsupport.CheckError(t, err, testsupport.ErrorWant{Type: rollout.ErrModelAnswerOverLimit, NonRetryable: true, Contains: "3 tool calls in one answer, more than the 2"})
	require.Zero(t, stored)

	stored, err = hostileCall(t, &model.Activities{MaxToolCalls: 3}, func() testsupport.Answer { return completion("", "tool_calls", calls...) })
	require.NoError(t, err)
	require.Positive(t, stored)

	stored, err = hostileCall(t, &model.Activities{MaxAnswerBytes: 64 << 10}, func() testsupport.Answer {
		return testsupport.Answer{Status: http.StatusOK, Header: http.Header{"Transfer-Encoding": {"chunked"}}, Body: strings.Repeat("y", 1<<20)}
	})
	testsupport.CheckError(t, err, testsupport.ErrorWant{Type: rollout.ErrModelAnswerOverLimit, NonRetryable: true, Contains: "more than the 65536 bytes"})
	require.Zero(t, stored)

	_, err = hostileCall(t, &model.Activities{MaxRetryAfter: 3 * time.Second}, func() testsupport.Answer {
		return testsupport.Answer{Status: 429, Header: http.Header{"Retry-After": {"60"}}, Body: "slow down"}
	})
	testsupport.CheckError(t, err, testsupport.ErrorWant{Type: model.ErrModelUnavailable, Delay: 3 * time.Second})
}
