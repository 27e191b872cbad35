package trainer

import (
	"fmt"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// limits are the Limits of every rollout of r, with maxTurns resolved.
func (r SubmitRequest) limits(maxTurns int) rollout.Limits {
	return rollout.Limits{
		MaxTurns:         maxTurns,
		ModelCallTimeout: rollout.Duration(r.ModelCallTimeout),
		EnvCallTimeout:   rollout.Duration(r.EnvCallTimeout),
		ModelCallRetries: r.ModelCallRetries,
		Deadline:         rollout.Duration(r.Deadline),
	}
}

// validateBudgets checks each budget alone with the workflow's own rules,
// so the bounds live in one place, and names the starter flag that set it.
func (r SubmitRequest) validateBudgets() error {
	checks := []struct {
		flag, value string
		limits      rollout.Limits
	}{
		{"--model-timeout", r.ModelCallTimeout.String(), rollout.Limits{ModelCallTimeout: rollout.Duration(r.ModelCallTimeout)}},
		{"--env-timeout", r.EnvCallTimeout.String(), rollout.Limits{EnvCallTimeout: rollout.Duration(r.EnvCallTimeout)}},
		{"--model-retries", fmt.Sprint(r.ModelCallRetries), rollout.Limits{ModelCallRetries: r.ModelCallRetries}},
		{"--deadline", r.Deadline.String(), rollout.Limits{Deadline: rollout.Duration(r.Deadline)}},
	}
	for _, c := range checks {
		if err := c.limits.Validate(); err != nil {
			return fmt.Errorf("%s %s: %w", c.flag, c.value, err)
		}
	}
	return nil
}
