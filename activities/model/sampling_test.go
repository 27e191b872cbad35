package model_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/activities/model"
	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/internal/testsupport"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// The parameters reach the endpoint as top-level fields, extra_body merged
// in beside them, exactly as vLLM's OpenAI server reads them; with token
// capture the answer is streamed, its usage in a last chunk.
func TestCallModelSendsSampling(t *testing.T) {
	store := testsupport.NewStore(t)
	head := testsupport.MustAppend(t, store, conversation[:2]...)
	srv := newFakeModel(t, func(*http.Request, map[string]any) testsupport.Answer { return completion("done", "stop") })
	acts := &model.Activities{Store: store, BaseURL: srv.URL + "/v1"}
	in := rollout.CallModelInput{
		RolloutID: "r1", Turn: 1, Head: head, Style: envs.StyleGym,
		Policy: rollout.PolicyRef{Model: "m"}, Seed: 42,
		Sampling: &rollout.Sampling{
			Temperature: ptr(0.7), TopP: ptr(0.95), MaxTokens: ptr(int64(256)), Stop: []string{"</answer>"},
			Seed:          ptr(int64(9)),
			ExtraBody:     map[string]json.RawMessage{"top_k": json.RawMessage(`20`), "chat_template_kwargs": json.RawMessage(`{"enable_thinking":false}`)},
			CaptureTokens: true,
		},
	}
	_, err := testsupport.NewActivityEnv(acts).ExecuteActivity(acts.CallModel, in)
	require.NoError(t, err)
	req := srv.lastRequest(t)
	delete(req, "messages")
	require.JSONEq(t, `{
		"model":"m","seed":9,"temperature":0.7,"top_p":0.95,"max_tokens":256,"stop":["</answer>"],
		"top_k":20,"chat_template_kwargs":{"enable_thinking":false},
		"logprobs":true,"top_logprobs":0,"return_token_ids":true,
		"stream":true,"stream_options":{"include_usage":true}
	}`, asJSON(t, req))
}

// Without sampling parameters the request is what it always was.
func TestCallModelWithoutSamplingSendsOnlyModelMessagesSeed(t *testing.T) {
	store := testsupport.NewStore(t)
	head := testsupport.MustAppend(t, store, conversation[:2]...)
	srv := newFakeModel(t, func(*http.Request, map[string]any) testsupport.Answer { return completion("done", "stop") })
	acts := &model.Activities{Store: store, BaseURL: srv.URL + "/v1"}
	_, err := testsupport.NewActivityEnv(acts).ExecuteActivity(acts.CallModel, rollout.CallModelInput{
		RolloutID: "r1", Turn: 1, Head: head, Style: envs.StyleGym, Policy: rollout.PolicyRef{Model: "m"}, Seed: 42,
	})
	require.NoError(t, err)
	req := srv.lastRequest(t)
	delete(req, "messages")
	require.JSONEq(t, `{"model":"m","seed":42}`, asJSON(t, req))
}

func TestCallModelRefusesInvalidSampling(t *testing.T) {
	store := testsupport.NewStore(t)
	head := testsupport.MustAppend(t, store, conversation[:2]...)
	acts := &model.Activities{Store: store, BaseURL: "http://unused.invalid/v1"}
	_, err := testsupport.NewActivityEnv(acts).ExecuteActivity(acts.CallModel, rollout.CallModelInput{
		RolloutID: "r1", Turn: 1, Head: head, Style: envs.StyleGym, Policy: rollout.PolicyRef{Model: "m"},
		Sampling: &rollout.Sampling{TopP: ptr(2.0)},
	})
	testsupport.CheckError(t, err, testsupport.ErrorWant{Type: rollout.ErrBadInput, NonRetryable: true, Contains: "sampling.top_p"})
}
func ptr[T any](v T) *T { return &v }
