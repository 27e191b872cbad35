package trainer

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

func TestBuildInputsCarryBudgets(t *testing.T) {
	req := validRequest()
	req.ModelCallTimeout, req.EnvCallTimeout = 2*time.Minute, 30*time.Second
	req.ModelCallRetries, req.Deadline = 3, 10*time.Minute
	inputs, err := BuildInputs(req)
	require.NoError(t, err)
	want := rollout.Limits{
		MaxTurns: 16, ModelCallTimeout: rollout.Duration(2 * time.Minute), EnvCallTimeout: rollout.Duration(30 * time.Second),
		ModelCallRetries: 3, Deadline: rollout.Duration(10 * time.Minute),
	}
	for i, in := range inputs {
		assert.True(t, in.Limits == want, "input %d limits %+v, want %+v", i, in.Limits, want)
	}
}

// TestBuildInputsWithoutBudgets: a request that sets no budget submits the
// inputs it did before budgets existed, byte for byte.
func TestBuildInputsWithoutBudgets(t *testing.T) {
	inputs, err := BuildInputs(validRequest())
	require.NoError(t, err)
	data, err := json.Marshal(inputs[0].Limits)
	require.NoError(t, err)
	assert.Equal(t, `{"max_turns":16}`, string(data), "limits %s, want only max_turns", data)
}

func TestSubmitRequestBudgetErrorsNameFlags(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*SubmitRequest)
		want   string
	}{
		{"model timeout too short", func(r *SubmitRequest) { r.ModelCallTimeout = time.Millisecond }, "--model-timeout 1ms: limits.model_call_timeout"},
		{"env timeout too long", func(r *SubmitRequest) { r.EnvCallTimeout = 48 * time.Hour }, "--env-timeout 48h0m0s"},
		{"negative retries", func(r *SubmitRequest) { r.ModelCallRetries = -1 }, "--model-retries -1"},
		{"negative deadline", func(r *SubmitRequest) { r.Deadline = -time.Minute }, "--deadline -1m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := validRequest()
			tt.mutate(&req)
			err := req.Validate()
			assert.ErrorContains(t, err, tt.want, "error %v does not mention %q", err, tt.want)
		})
	}
}
