package model_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/activities/model"
	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/internal/destination"
	"github.com/turnstile-rl/turnstile/internal/testsupport"
	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// TestModelDestinations: the API key goes only to a configured endpoint;
// a policy naming another base URL (or an unknown endpoint name) is
// refused non-retryably before anything is sent, naming the setting. A
// named endpoint gets its own key.
func TestModelDestinations(t *testing.T) {
	var keys []string
	srv := newFakeModel(t, func(r *http.Request, _ map[string]any) testsupport.Answer {
		keys = append(keys, r.Header.Get("Authorization"))
		return completion("done", "stop")
	})
	store := testsupport.NewStore(t)
	head := testsupport.MustAppend(t, store, transcript.Item{Role: "user", Content: "go"})
	lookup := map[string]string{destination.EnvModelEndpoints: "vllm=" + srv.URL + "/v1", "TURNSTILE_MODEL_API_KEY_VLLM": "key-vllm"}
	dest, err := destination.FromLookup(func(k string) (string, bool) { v, ok := lookup[k]; return v, ok },
		destination.Defaults{ModelURL: "http://127.0.0.1:1/v1", APIKey: "key-global"})
	require.NoError(t, err)
	acts := &model.Activities{Store: store, BaseURL: "http://127.0.0.1:1/v1", APIKey: "key-global", Destinations: &dest}
	call := func(p rollout.PolicyRef) error {
		_, err := testsupport.NewActivityEnv(acts).ExecuteActivity(acts.CallModel, rollout.CallModelInput{
			RolloutID: "r1", Attempt: 0, Turn: 0, Head: head, Style: envs.StyleGym, Policy: p})
		return err
	}
	for _, bad := range []struct {
		policy  rollout.PolicyRef
		setting string
	}{
		{rollout.PolicyRef{Model: "m", BaseURL: srv.URL + "/v2"}, destination.EnvAllowedModelURLs},
		{rollout.PolicyRef{Model: "m", BaseURL: "http://attacker.example/v1"}, destination.EnvAllowedModelURLs},
		{rollout.PolicyRef{Model: "m", Endpoint: "nope"}, destination.EnvModelEndpoints},
		{rollout.PolicyRef{Model: "m", Endpoint: "vllm", BaseURL: srv.URL + "/v1"}, "not both"},
	} {
		testsupport.CheckError(t, call(bad.policy), testsupport.ErrorWant{Type: rollout.ErrDestinationRefused, NonRetryable: true, Contains: bad.setting})
	}
	require.Zero(t, srv.count(), "nothing was sent")

	require.NoError(t, call(rollout.PolicyRef{Model: "m", Endpoint: "vllm"}))
	require.NoError(t, call(rollout.PolicyRef{Model: "m", BaseURL: srv.URL + "/v1/"}), "the configured endpoint by its URL")
	require.Equal(t, []string{"Bearer key-vllm", "Bearer key-vllm"}, keys, "the named endpoint's own key")
}
