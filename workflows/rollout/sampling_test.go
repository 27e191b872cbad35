package rollout_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

func ptr[T any](v T) *T { return &v }

func TestSamplingValidate(t *testing.T) {
	require.NoError(t, (*rollout.Sampling)(nil).Validate())
	require.NoError(t, (&rollout.Sampling{}).Validate())
	tests := map[string]struct {
		s    rollout.Sampling
		want string
	}{
		"negative temperature": {rollout.Sampling{Temperature: ptr(-0.1)}, "sampling.temperature"},
		"zero top_p":           {rollout.Sampling{TopP: ptr(0.0)}, "sampling.top_p"},
		"top_p above one":      {rollout.Sampling{TopP: ptr(1.5)}, "sampling.top_p"},
		"zero max_tokens":      {rollout.Sampling{MaxTokens: ptr(int64(0))}, "sampling.max_tokens"},
		"empty stop":           {rollout.Sampling{Stop: []string{"x", ""}}, "sampling.stop[1]"},
		"reserved extra key": {rollout.Sampling{ExtraBody: map[string]json.RawMessage{"messages": json.RawMessage(`[]`)}},
			"sampling.extra_body.messages is set by turnstile"},
		"bad extra JSON": {rollout.Sampling{ExtraBody: map[string]json.RawMessage{"top_k": json.RawMessage(`{`)}},
			"sampling.extra_body.top_k is not valid JSON"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.s.Validate()
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

// The parameters reach the endpoint as top-level fields, extra_body merged
// in beside them, exactly as vLLM's OpenAI server reads them.
func TestCallModelSendsSampling(t *testing.T) {
	store := newStore(t)
	head := mustAppend(t, store, conversation[:2]...)
	model := newFakeModel(t, func(*http.Request, map[string]any) answer { return completion("done", "stop") })
	acts := &rollout.Activities{Store: store, ModelBaseURL: model.URL + "/v1"}
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
	_, err := newActivityEnv(acts).ExecuteActivity(acts.CallModel, in)
	require.NoError(t, err)
	req := model.lastRequest(t)
	delete(req, "messages")
	require.JSONEq(t, `{
		"model":"m","seed":9,"temperature":0.7,"top_p":0.95,"max_tokens":256,"stop":["</answer>"],
		"top_k":20,"chat_template_kwargs":{"enable_thinking":false},
		"logprobs":true,"top_logprobs":0,"return_token_ids":true
	}`, asJSON(t, req))
}

// Without sampling parameters the request is what it always was.
func TestCallModelWithoutSamplingSendsOnlyModelMessagesSeed(t *testing.T) {
	store := newStore(t)
	head := mustAppend(t, store, conversation[:2]...)
	model := newFakeModel(t, func(*http.Request, map[string]any) answer { return completion("done", "stop") })
	acts := &rollout.Activities{Store: store, ModelBaseURL: model.URL + "/v1"}
	_, err := newActivityEnv(acts).ExecuteActivity(acts.CallModel, rollout.CallModelInput{
		RolloutID: "r1", Turn: 1, Head: head, Style: envs.StyleGym, Policy: rollout.PolicyRef{Model: "m"}, Seed: 42,
	})
	require.NoError(t, err)
	req := model.lastRequest(t)
	delete(req, "messages")
	require.JSONEq(t, `{"model":"m","seed":42}`, asJSON(t, req))
}

func TestCallModelRefusesInvalidSampling(t *testing.T) {
	store := newStore(t)
	head := mustAppend(t, store, conversation[:2]...)
	acts := &rollout.Activities{Store: store, ModelBaseURL: "http://unused.invalid/v1"}
	_, err := newActivityEnv(acts).ExecuteActivity(acts.CallModel, rollout.CallModelInput{
		RolloutID: "r1", Turn: 1, Head: head, Style: envs.StyleGym, Policy: rollout.PolicyRef{Model: "m"},
		Sampling: &rollout.Sampling{TopP: ptr(2.0)},
	})
	checkError(t, err, errorWant{typ: rollout.ErrBadInput, nonRetryable: true, contains: "sampling.top_p"})
}
