package rollout_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// Sampling parameters and the policy version reach every model call as
// input (so history shows them), and each call's generation summary lands
// in the result's lineage, a prefix break included.
func TestRolloutCarriesSamplingAndTokenLineage(t *testing.T) {
	w := newWorld(2)
	w.generation = func(turn int) *rollout.GenerationRef {
		g := &rollout.GenerationRef{
			Record: transcript.DigestOf([]byte(fmt.Sprint("gen", turn))), Tokens: transcript.TokensPresent,
			PromptTokens: 10 * turn, GenerationTokens: 3, PolicyVersion: "v5",
		}
		if turn == 3 {
			g.PrefixBreak, g.PrefixBreakReason = true, "prompt token 4 is 1"
		}
		return g
	}
	env := newEnv(t, w)
	in := input(16)
	in.Policy.Version = "v5"
	in.Sampling = &rollout.Sampling{
		Temperature: ptr(1.0), MaxTokens: ptr(int64(64)), CaptureTokens: true,
		ExtraBody: map[string]json.RawMessage{"top_k": json.RawMessage(`-1`)},
	}
	env.ExecuteWorkflow(rollout.Rollout, in)
	res := result(t, env)

	require.Len(t, w.calls, 3)
	for _, c := range w.calls {
		require.Equal(t, in.Sampling, c.Sampling)
		require.Equal(t, "v5", c.Policy.Version)
	}
	require.Len(t, res.Lineage, 3)
	require.Equal(t, rollout.LineageEntry{
		CallID: "r1/a0/t1", Generation: transcript.DigestOf([]byte("gen1")), Tokens: transcript.TokensPresent, PolicyVersion: "v5",
	}, res.Lineage[0])
	require.False(t, res.Lineage[1].PrefixBreak)
	require.True(t, res.Lineage[2].PrefixBreak)
	require.Equal(t, "prompt token 4 is 1", res.Lineage[2].PrefixBreakReason)
}

// A restored attempt's first call names the saved last call as its parent,
// so its prefix is checked against the saved call's record.
func TestRolloutRestoredFirstCallLinksToSavedParent(t *testing.T) {
	w := newWorld(2)
	w.value, w.revision = 1, 1
	env := newEnv(t, w)
	in := input(16)
	in.Attempt = 1
	in.Sampling = &rollout.Sampling{CaptureTokens: true}
	in.Resume = &rollout.Boundary{
		RolloutID: "r1", Attempt: 0, Turn: 1, Seeded: true, Revision: 1,
		Head: w.head("obs", 1), Tools: w.head("tools", 0), Style: w.style,
		LastCall: "r1/a0/t1", Lineage: []rollout.LineageEntry{{CallID: "r1/a0/t1", Tokens: transcript.TokensPresent}},
	}
	env.ExecuteWorkflow(rollout.Rollout, in)
	res := result(t, env)
	require.Equal(t, "r1/a0/t1", w.calls[0].Parent)
	require.Equal(t, in.Sampling, w.calls[0].Sampling, "a restored attempt samples as the original did")
	require.Len(t, res.Lineage, 3)
	require.Equal(t, "r1/a0/t1", res.Lineage[1].Parent)
	require.Equal(t, "r1/a1/t2", res.Lineage[2].Parent)
}
