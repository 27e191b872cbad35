package trainer

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

func TestBuildInputsCarryBudgets(t *testing.T) {
	req := validRequest()
	req.ModelCallTimeout, req.EnvCallTimeout = 2*time.Minute, 30*time.Second
	req.ModelCallRetries, req.Deadline = 3, 10*time.Minute
	inputs, err := BuildInputs(req)
	if err != nil {
		t.Fatal(err)
	}
	want := rollout.Limits{
		MaxTurns: 16, ModelCallTimeout: rollout.Duration(2 * time.Minute), EnvCallTimeout: rollout.Duration(30 * time.Second),
		ModelCallRetries: 3, Deadline: rollout.Duration(10 * time.Minute),
	}
	for i, in := range inputs {
		if in.Limits != want {
			t.Errorf("input %d limits %+v, want %+v", i, in.Limits, want)
		}
	}
}

// TestBuildInputsWithoutBudgets: a request that sets no budget submits the
// inputs it did before budgets existed, byte for byte.
func TestBuildInputsWithoutBudgets(t *testing.T) {
	inputs, err := BuildInputs(validRequest())
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(inputs[0].Limits)
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != `{"max_turns":16}` {
		t.Errorf("limits %s, want only max_turns", data)
	}
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
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v does not mention %q", err, tt.want)
			}
		})
	}
}
