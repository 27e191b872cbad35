package model_test

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/activities/model"
	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/internal/policy"
	"github.com/turnstile-rl/turnstile/internal/testsupport"
	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// scriptedCounter starts the scripted policy server and seeds a counter
// conversation (0 → target) in a fresh store.
func scriptedCounter(t *testing.T, target int) (*model.Activities, transcript.Digest, transcript.Digest) {
	t.Helper()
	srv := httptest.NewServer(policy.NewServer(policy.ServerConfig{
		Policies: policy.Registry{"scripted-counter": counter.Policy{}}, PolicyVersion: "step-1",
	}))
	t.Cleanup(srv.Close)
	store := testsupport.NewStore(t)
	env := counter.New()
	_, start, err := env.Start(0, json.RawMessage(fmt.Sprintf(`{"start":0,"target":%d}`, target)))
	require.NoError(t, err)
	head := testsupport.MustAppend(t, store, transcript.Item{Role: "system", Content: start.Instructions}, transcript.Item{Role: "user", Content: start.Observation})
	tools, err := store.PutJSON(t.Context(), env.Spec().Tools)
	require.NoError(t, err)
	return &model.Activities{Store: store, BaseURL: srv.URL + "/v1"}, head, tools
}

func counterCall(head, tools transcript.Digest, turn int, parent string) rollout.CallModelInput {
	return rollout.CallModelInput{
		RolloutID: "r1", Turn: turn, Head: head, Tools: tools, Style: envs.StyleTools,
		Policy: rollout.PolicyRef{Model: "scripted-counter"}, Seed: 1, Parent: parent,
		Sampling: &rollout.Sampling{CaptureTokens: true},
	}
}

// Against the scripted server, a whole episode captures tokens exactly (the
// toy tokenizer's ids of the toy template, the deterministic log-probs) and
// every call continues its parent's tokens.
func TestCallModelTokensFromScriptedServer(t *testing.T) {
	acts, head, tools := scriptedCounter(t, 3)
	parent := ""
	for turn := 1; ; turn++ {
		res := callModel(t, acts, counterCall(head, tools, turn, parent))
		require.Equal(t, transcript.TokensPresent, res.Generation.Tokens)
		require.False(t, res.Generation.PrefixBreak, "turn %d: %s", turn, res.Generation.PrefixBreakReason)
		require.Equal(t, "step-1", res.Generation.PolicyVersion)
		items := testsupport.MustLoad(t, acts.Store, res.Head)
		answer := items[len(items)-1]
		g, err := acts.Store.Generation(t.Context(), answer.Generation)
		require.NoError(t, err)
		var calls []envs.ToolCall
		for _, tc := range answer.ToolCalls {
			calls = append(calls, envs.ToolCall{ID: tc.ID, Name: tc.Name, Arguments: tc.Arguments})
		}
		require.Equal(t, policy.Tokenize(policy.RenderAssistant(answer.Content, calls)), g.GenerationTokenIDs)
		for i, id := range g.GenerationTokenIDs {
			require.Equal(t, policy.TokenLogprob(len(g.PromptTokenIDs)+i, id), g.GenerationLogProbs[i])
		}
		if len(res.ToolCalls) == 0 {
			require.Equal(t, 4, turn)
			return
		}
		head = mustAppend2(t, acts.Store, res.Head, transcript.Item{Role: "tool", ToolCallID: res.ToolCalls[0].ID, Content: fmt.Sprintf("counter=%d", turn)})
		parent = res.CallID
	}
}

// When the history the next call sends is not the one the parent saw grow
// (here the instructions are rewritten), the prompt no longer
// continues the parent's tokens, and the call is flagged.
func TestCallModelFlagsRewrittenHistory(t *testing.T) {
	acts, head, tools := scriptedCounter(t, 3)
	res1 := callModel(t, acts, counterCall(head, tools, 1, ""))
	items := testsupport.MustLoad(t, acts.Store, res1.Head)
	items[0].Content += " (rephrased)"
	rewritten := testsupport.MustAppend(t, acts.Store, items...)
	rewritten = mustAppend2(t, acts.Store, rewritten, transcript.Item{Role: "tool", ToolCallID: res1.ToolCalls[0].ID, Content: "counter=1"})

	res2 := callModel(t, acts, counterCall(rewritten, tools, 2, res1.CallID))
	require.True(t, res2.Generation.PrefixBreak)
	require.Contains(t, res2.Generation.PrefixBreakReason, "the parent's prompt+generation has")
}
