package rollout_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

var cutRecord = transcript.DigestOf([]byte("prefix chunk"))

// (The SDK's test environment resolves a cancelled activity at once, never
// with its cancellation's details, so the park deadline's wait for a cut
// call's prefix is proven against a real server: integration
// TestPrefixRecoveryCheckpoint.)

// A restored attempt whose boundary holds a cut call's prefix continues
// that call from it; a prefix of another turn is refused up front.
func TestRestoredAttemptContinuesThePartialCall(t *testing.T) {
	w := newWorld(2)
	env := newEnv(t, w)
	in := input(16)
	in.Attempt = 1
	partial := &rollout.ModelPrefix{CallID: "r1/a0/t1", Turn: 1, Record: cutRecord, Tokens: 7}
	in.Resume = &rollout.Boundary{RolloutID: "r1", Turn: 0, Seeded: true, Style: envs.StyleTools, Head: w.head("seed", 0), Partial: partial}
	env.ExecuteWorkflow(rollout.Rollout, in)
	res := result(t, env)
	require.Equal(t, 1.0, res.Reward)
	require.Equal(t, partial, w.calls[0].Prefix)
	require.Equal(t, "r1/a1/t1", rollout.ModelCallID("r1", w.calls[0].Attempt, w.calls[0].Turn), "the new attempt's call id, the old call's prefix")

	bad := input(16)
	bad.Attempt = 1
	wrong := *partial
	wrong.Turn = 2
	bad.Resume = &rollout.Boundary{RolloutID: "r1", Turn: 0, Seeded: true, Partial: &wrong}
	env = newEnv(t, newWorld(2))
	env.ExecuteWorkflow(rollout.Rollout, bad)
	require.ErrorContains(t, env.GetWorkflowError(), "partial generation is not a valid prefix of turn 1")
}

// A policy's prefix settings are checked before anything runs.
func TestRolloutRefusesUnknownContinueSetting(t *testing.T) {
	for _, p := range []rollout.PolicyRef{{Model: "m", Continue: "sometimes"}, {Model: "m", ToolParser: "xml"}} {
		env := newEnv(t, newWorld(1))
		in := input(4)
		in.Policy = p
		env.ExecuteWorkflow(rollout.Rollout, in)
		require.ErrorContains(t, env.GetWorkflowError(), "policy.")
	}
}
