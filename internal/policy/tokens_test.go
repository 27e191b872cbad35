package policy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/internal/policy"
)

func TestTokenizeBytesAndMarkers(t *testing.T) {
	got := policy.Tokenize("<|user|>hi<|end|><|x")
	want := []int64{258, 'h', 'i', 263, '<', '|', 'x'}
	require.True(t, slices.Equal(got, want), "Tokenize = %v, want %v", got, want)
	text := ""
	for _, id := range got {
		text += policy.TokenText(id)
	}
	require.Equal(t, "<|user|>hi<|end|><|x", text, "detokenized")
}

func TestTokenLogprobIsDeterministicAndExact(t *testing.T) {
	for pos := range 50 {
		lp := policy.TokenLogprob(pos, int64(pos*7))
		require.Equal(t, policy.TokenLogprob(pos, int64(pos*7)), lp, "logprob(%d) = %v", pos, lp)
		require.LessOrEqual(t, lp, float64(0), "logprob(%d) = %v", pos, lp)
		require.Greater(t, lp, float64(-8), "logprob(%d) = %v", pos, lp)
		require.Equal(t, float64(int64(lp*512)), lp*512, "logprob %v is not a multiple of 1/512", lp)
	}
	require.False(t, policy.TokenLogprob(1, 5) == policy.TokenLogprob(2, 5) && policy.TokenLogprob(1, 6) == policy.TokenLogprob(2, 6), "log-probs do not depend on the position")
}

// A grown conversation's prompt starts with the previous prompt + output.
func TestRenderPromptIsPrefixStable(t *testing.T) {
	tools := []policy.TemplateTool{{Name: "add", Description: "add n", Parameters: json.RawMessage(`{"type":"object"}`)}}
	msgs := []envs.Message{{Role: "system", Content: "s"}, {Role: "user", Content: "u"}}
	prompt := policy.Tokenize(policy.RenderPrompt(tools, msgs))
	calls := []envs.ToolCall{{ID: "c1", Name: "add", Arguments: `{"n":1}`}}
	output := policy.Tokenize(policy.RenderAssistant("ok", calls))
	msgs = append(msgs, envs.Message{Role: "assistant", Content: "ok", ToolCalls: calls}, envs.Message{Role: "tool", ToolCallID: "c1", Content: "1"})
	next := policy.Tokenize(policy.RenderPrompt(tools, msgs))
	seq := append(slices.Clone(prompt), output...)
	require.True(t, slices.Equal(next[:len(seq)], seq), "next prompt does not continue prompt+output:\n%v\n%v", next, seq)
}

// vllmAnswer holds the vLLM token fields of a chat completion.
type vllmAnswer struct {
	PromptTokenIDs []int64 `json:"prompt_token_ids"`
	Choices        []struct {
		TokenIDs []int64 `json:"token_ids"`
		Logprobs *struct {
			Content []struct {
				Token   string  `json:"token"`
				Logprob float64 `json:"logprob"`
			} `json:"content"`
		} `json:"logprobs"`
	} `json:"choices"`
}

func tokenFields(t *testing.T, c *openai.ChatCompletion) vllmAnswer {
	t.Helper()
	var v vllmAnswer
	require.NoError(t, json.Unmarshal([]byte(c.RawJSON()), &v))
	return v
}

// Through the server, a counter episode's token ids are exactly the toy
// tokenizer's over the toy template, each prompt continues the previous
// prompt + output, and the log-probs are the deterministic ones.
func TestServerSpeaksVLLMTokenDialect(t *testing.T) {
	_, client := startPolicyServer(t, policy.ServerConfig{PolicyVersion: "step-3"})
	ctx := context.Background()
	params := counterParams(0, 2, 1)
	params.Logprobs, params.TopLogprobs = openai.Bool(true), openai.Int(0)
	var prev []int64
	for call := 1; ; call++ {
		var resp *http.Response
		c, err := client.Chat.Completions.New(ctx, params, option.WithJSONSet("return_token_ids", true), option.WithResponseInto(&resp))
		require.NoError(t, err)
		require.Equal(t, "step-3", resp.Header.Get(policy.PolicyVersionHeader), "policy version header")
		f := tokenFields(t, c)
		ch := f.Choices[0]
		if prev != nil {
			require.True(t, slices.Equal(f.PromptTokenIDs[:len(prev)], prev), "call %d: prompt does not continue the previous prompt+output", call)
		}
		require.NotEmpty(t, ch.TokenIDs, "call %d: %d ids, logprobs %+v", call, len(ch.TokenIDs), ch.Logprobs)
		require.NotNil(t, ch.Logprobs, "call %d: %d ids, logprobs %+v", call, len(ch.TokenIDs), ch.Logprobs)
		require.Len(t, ch.Logprobs.Content, len(ch.TokenIDs), "call %d: %d ids, logprobs %+v", call, len(ch.TokenIDs), ch.Logprobs)
		for i, lp := range ch.Logprobs.Content {
			id := ch.TokenIDs[i]
			require.Equal(t, policy.TokenText(id), lp.Token, "call %d token %d: %+v for id %d", call, i, lp, id)
			require.Equal(t, policy.TokenLogprob(len(f.PromptTokenIDs)+i, id), lp.Logprob, "call %d token %d: %+v for id %d", call, i, lp, id)
		}
		require.Equal(t, int64(len(f.PromptTokenIDs)), c.Usage.PromptTokens, "usage %+v does not count the tokens", c.Usage)
		require.Equal(t, int64(len(ch.TokenIDs)), c.Usage.CompletionTokens, "usage %+v does not count the tokens", c.Usage)
		prev = append(slices.Clone(f.PromptTokenIDs), ch.TokenIDs...)
		if len(c.Choices[0].Message.ToolCalls) == 0 {
			return
		}
		params.Messages = append(params.Messages, c.Choices[0].Message.ToParam(),
			openai.ToolMessage(fmt.Sprintf("counter=%d", call), c.Choices[0].Message.ToolCalls[0].ID))
		require.LessOrEqual(t, call, 10, "episode did not end")
	}
}

func TestServerTokenFieldsOnlyWhenAsked(t *testing.T) {
	_, client := startPolicyServer(t, policy.ServerConfig{})
	ctx := context.Background()
	c, err := client.Chat.Completions.New(ctx, counterParams(0, 2, 1))
	require.NoError(t, err)
	unasked := tokenFields(t, c)
	require.Nil(t, unasked.PromptTokenIDs, "token fields without being asked: %s", c.RawJSON())
	require.Nil(t, unasked.Choices[0].TokenIDs, "token fields without being asked: %s", c.RawJSON())
	require.Nil(t, unasked.Choices[0].Logprobs, "token fields without being asked: %s", c.RawJSON())
	// vLLM answers an explicit top_logprobs: null with no log-probs; id mode
	// spells tokens as token_id:N.
	c, err = client.Chat.Completions.New(ctx, counterParams(0, 2, 1), option.WithJSONSet("logprobs", true), option.WithJSONSet("top_logprobs", nil))
	require.NoError(t, err)
	require.Nil(t, tokenFields(t, c).Choices[0].Logprobs, "log-probs despite top_logprobs null: %s", c.RawJSON())
	c, err = client.Chat.Completions.New(ctx, counterParams(0, 2, 1), option.WithJSONSet("logprobs", true), option.WithJSONSet("return_tokens_as_token_ids", true))
	require.NoError(t, err)
	f := tokenFields(t, c)
	got := f.Choices[0].Logprobs.Content[0].Token
	require.GreaterOrEqual(t, len(got), 10, "token %q is not in id form", got)
	require.Equal(t, "token_id:", got[:9], "token %q is not in id form", got)
}
