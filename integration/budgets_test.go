package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// TestRolloutBudgetsOnServer runs the budgets against the real server, whose
// retries differ from the test environment's: it retries timed-out attempts
// and reports why retrying stopped (maximum attempts, or the deadline's
// schedule-to-close). A policy that answers in 6s exhausts both budgets; the
// failures are searchable as RolloutPhase="failed".
func TestRolloutBudgetsOnServer(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	c := newStack(t, "--latency", "6s")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	retries := counterInput("budget", 0, 3)
	retries.Limits.ModelCallTimeout = rollout.Duration(time.Second)
	retries.Limits.ModelCallRetries = 2
	deadline := counterInput("budget", 1, 3)
	deadline.Limits.Deadline = rollout.Duration(4 * time.Second)
	for _, tt := range []struct {
		in          rollout.Input
		msg, budget string
	}{
		{retries, "model-call retries (2) exhausted at turn 1: timed out (StartToClose)", rollout.BudgetModelCallRetries},
		{deadline, "rollout deadline 4s passed at turn 1", rollout.BudgetDeadline},
	} {
		began := time.Now()
		err := c.submit(ctx, tt.in).Get(ctx, nil)
		var ae *temporal.ApplicationError
		require.True(t, errors.As(err, &ae), "%v", err)
		require.Equal(t, rollout.ErrBudgetExhausted, ae.Type(), "%v", err)
		require.Contains(t, ae.Error(), tt.msg)
		var details rollout.BudgetFailure
		require.NoError(t, ae.Details(&details))
		require.Equal(t, tt.budget, details.Budget)
		require.Less(t, time.Since(began), 30*time.Second, "%s ended promptly", tt.in.RolloutID)
	}

	out, err := c.temporalCLI(ctx, "workflow", "list", "--query", `RolloutSet="budget" AND RolloutPhase="failed"`, "--output", "json")
	require.NoError(t, err, out)
	var listed []json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(out), &listed), out)
	require.Len(t, listed, 2)
}
