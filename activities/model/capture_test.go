package model_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/activities/model"
	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/internal/testsupport"
	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// vllmCompletion is a chat completion in the shape vLLM's OpenAI server
// answers with return_token_ids, logprobs and top_logprobs: 0 (see
// shared/reference/training-data.md §1.2): prompt_token_ids at the top level,
// token_ids and logprobs.content[] on the choice, reasoning_content on the
// message when a reasoning parser is on.
func vllmCompletion(content string, prompt, output []int64, logprobs []float64) map[string]any {
	lps := []any{}
	for i, id := range output {
		lps = append(lps, map[string]any{"token": fmt.Sprintf("token_id:%d", id), "logprob": logprobs[i], "bytes": nil, "top_logprobs": []any{}})
	}
	return map[string]any{
		"id": "chatcmpl-v", "object": "chat.completion", "created": 0, "model": "Qwen/Qwen3-8B",
		"prompt_token_ids": prompt, "prompt_logprobs": nil,
		"choices": []any{map[string]any{
			"index": 0, "finish_reason": "stop", "stop_reason": nil, "token_ids": output,
			"message":  map[string]any{"role": "assistant", "content": content, "reasoning_content": "think first", "tool_calls": []any{}},
			"logprobs": map[string]any{"content": lps},
		}},
		"usage": map[string]any{"prompt_tokens": len(prompt), "completion_tokens": len(output), "total_tokens": len(prompt) + len(output)},
	}
}

func captureInput(head transcript.Digest, turn int, parent string) rollout.CallModelInput {
	return rollout.CallModelInput{
		RolloutID: "r1", Attempt: 0, Turn: turn, Head: head, Style: envs.StyleGym,
		Policy: rollout.PolicyRef{Model: "m", Version: "step-7"}, Seed: 3, Parent: parent,
		Sampling: &rollout.Sampling{CaptureTokens: true},
	}
}

func callModel(t *testing.T, acts *model.Activities, in rollout.CallModelInput) rollout.CallModelResult {
	t.Helper()
	val, err := testsupport.NewActivityEnv(acts).ExecuteActivity(acts.CallModel, in)
	require.NoError(t, err)
	var res rollout.CallModelResult
	require.NoError(t, val.Get(&res))
	return res
}

// lastGeneration is the generation record of the conversation's last item.
func lastGeneration(t *testing.T, s *transcriptstore.Store, head transcript.Digest) transcript.Generation {
	t.Helper()
	items := testsupport.MustLoad(t, s, head)
	d := items[len(items)-1].Generation
	require.NotEmpty(t, d, "the answer names its generation record")
	g, err := s.Generation(context.Background(), d)
	require.NoError(t, err)
	return g
}

func TestCallModelCapturesVLLMTokens(t *testing.T) {
	store := testsupport.NewStore(t)
	head := testsupport.MustAppend(t, store, transcript.Item{Role: "user", Content: "go"})
	srv := newFakeModel(t, func(*http.Request, map[string]any) testsupport.Answer {
		a := testsupport.OK(vllmCompletion("left", []int64{10, 11, 12}, []int64{20, 21}, []float64{-0.25, -1.5}))
		a.Header = http.Header{"X-Policy-Version": {"step-9"}}
		return a
	})
	acts := &model.Activities{Store: store, BaseURL: srv.URL + "/v1"}
	res := callModel(t, acts, captureInput(head, 1, ""))

	g := lastGeneration(t, store, res.Head)
	require.Equal(t, transcript.TokensPresent, g.Tokens)
	require.Equal(t, []int64{10, 11, 12}, g.PromptTokenIDs)
	require.Equal(t, []int64{20, 21}, g.GenerationTokenIDs)
	require.Equal(t, []float64{-0.25, -1.5}, g.GenerationLogProbs)
	require.Equal(t, "stop", g.FinishReason)
	require.Equal(t, "think first", g.ReasoningContent)
	require.Equal(t, "Qwen/Qwen3-8B", g.Model)
	require.Equal(t, "step-9", g.PolicyVersion, "the endpoint's version wins over the input's")
	require.Equal(t, model.VersionFromEndpoint, g.PolicyVersionSource)
	require.JSONEq(t, `{"seed":3,"capture_tokens":true}`, string(g.Sampling))
	require.False(t, g.PrefixBreak, "a first call has no parent to continue")

	require.Equal(t, &rollout.GenerationRef{
		Record: testsupport.MustLoad(t, store, res.Head)[1].Generation, Tokens: transcript.TokensPresent,
		PromptTokens: 3, GenerationTokens: 2,
		PolicyVersion: "step-9",
	}, res.Generation)
	require.NotContains(t, asJSON(t, res), "-1.5", "log-probs never travel in the activity result")
}

// Without token_ids, the ids come from the logprobs tokens in token_id:N
// form (vLLM's return_tokens_as_token_ids).
func TestCallModelReadsIDsFromLogprobTokens(t *testing.T) {
	store := testsupport.NewStore(t)
	head := testsupport.MustAppend(t, store, transcript.Item{Role: "user", Content: "go"})
	srv := newFakeModel(t, func(*http.Request, map[string]any) testsupport.Answer {
		c := vllmCompletion("left", []int64{1, 2}, []int64{5, 6}, []float64{-1, -2})
		delete(c["choices"].([]any)[0].(map[string]any), "token_ids")
		return testsupport.OK(c)
	})
	acts := &model.Activities{Store: store, BaseURL: srv.URL + "/v1"}
	res := callModel(t, acts, captureInput(head, 1, ""))
	g := lastGeneration(t, store, res.Head)
	require.Equal(t, []int64{5, 6}, g.GenerationTokenIDs)
	require.Equal(t, []float64{-1, -2}, g.GenerationLogProbs)
}

// An endpoint that reports no tokens (plain OpenAI shape) still answers the
// rollout; the record says the tokens are absent.
func TestCallModelWithoutReportedTokens(t *testing.T) {
	store := testsupport.NewStore(t)
	head := testsupport.MustAppend(t, store, transcript.Item{Role: "user", Content: "go"})
	srv := newFakeModel(t, func(*http.Request, map[string]any) testsupport.Answer { return completion("left", "stop") })
	acts := &model.Activities{Store: store, BaseURL: srv.URL + "/v1"}
	res := callModel(t, acts, captureInput(head, 2, "r1/a0/t1"))
	g := lastGeneration(t, store, res.Head)
	require.Equal(t, transcript.TokensAbsent, g.Tokens)
	require.Empty(t, g.PromptTokenIDs)
	require.Equal(t, "step-7", g.PolicyVersion)
	require.Equal(t, model.VersionFromInput, g.PolicyVersionSource)
	require.Equal(t, transcript.TokensAbsent, res.Generation.Tokens)
	require.False(t, res.Generation.PrefixBreak, "a call without tokens has nothing to check")
	require.Equal(t, "left", testsupport.MustLoad(t, store, res.Head)[1].Content)
}

// Capture off and no policy version: no record, the item is what it was.
func TestCallModelWithoutCaptureWritesNoRecord(t *testing.T) {
	store := testsupport.NewStore(t)
	head := testsupport.MustAppend(t, store, transcript.Item{Role: "user", Content: "go"})
	srv := newFakeModel(t, func(*http.Request, map[string]any) testsupport.Answer {
		return testsupport.OK(vllmCompletion("left", []int64{1}, []int64{2}, []float64{-1}))
	})
	acts := &model.Activities{Store: store, BaseURL: srv.URL + "/v1"}
	in := captureInput(head, 1, "")
	in.Sampling, in.Policy.Version = nil, ""
	res := callModel(t, acts, in)
	require.Nil(t, res.Generation)
	require.Equal(t, transcript.Item{Role: "assistant", Content: "left"}, testsupport.MustLoad(t, store, res.Head)[1])
}

// Each call's prompt must start with its parent's prompt + generation: a
// grown conversation passes, a re-tokenized one is flagged with a reason.
func TestCallModelFlagsTokenPrefixBreak(t *testing.T) {
	store := testsupport.NewStore(t)
	head := testsupport.MustAppend(t, store, transcript.Item{Role: "user", Content: "go"})
	prompts := map[int][]int64{1: {1, 2}, 2: {1, 2, 3, 4, 5}, 3: {1, 2, 3, 9, 5, 6, 7}}
	outputs := map[int][]int64{1: {3, 4}, 2: {6}, 3: {8}}
	srv := newFakeModel(t, func(_ *http.Request, body map[string]any) testsupport.Answer {
		turn := len(body["messages"].([]any))/2 + 1 // user, (assistant, user)…
		return testsupport.OK(vllmCompletion("left", prompts[turn], outputs[turn], make([]float64, len(outputs[turn]))))
	})
	acts := &model.Activities{Store: store, BaseURL: srv.URL + "/v1"}
	parent := ""
	var got []rollout.CallModelResult
	for turn := 1; turn <= 3; turn++ {
		res := callModel(t, acts, captureInput(head, turn, parent))
		got = append(got, res)
		head = mustAppend2(t, store, res.Head, transcript.Item{Role: "user", Content: "again"})
		parent = res.CallID
	}
	require.False(t, got[1].Generation.PrefixBreak, got[1].Generation.PrefixBreakReason)
	require.True(t, got[2].Generation.PrefixBreak)
	require.Contains(t, got[2].Generation.PrefixBreakReason, "prompt token 3 is 9")
	items := testsupport.MustLoad(t, store, got[2].Head)
	g, err := store.Generation(t.Context(), items[len(items)-1].Generation)
	require.NoError(t, err)
	require.True(t, g.PrefixBreak, "the flag is stored with the call")
	require.True(t, strings.HasPrefix(g.PrefixBreakReason, "prompt token 3"))
}

func mustAppend2(t *testing.T, s *transcriptstore.Store, head transcript.Digest, items ...transcript.Item) transcript.Digest {
	t.Helper()
	h, err := s.AppendAll(t.Context(), head, items...)
	require.NoError(t, err)
	return h
}
