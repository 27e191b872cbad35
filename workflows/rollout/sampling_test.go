package rollout_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

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
