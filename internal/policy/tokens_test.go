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

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/internal/policy"
)

func TestTokenizeBytesAndMarkers(t *testing.T) {
	got := policy.Tokenize("<|user|>hi<|end|><|x")
	want := []int64{258, 'h', 'i', 263, '<', '|', 'x'}
	if !slices.Equal(got, want) {
		t.Fatalf("Tokenize = %v, want %v", got, want)
	}
	text := ""
	for _, id := range got {
		text += policy.TokenText(id)
	}
	if text != "<|user|>hi<|end|><|x" {
		t.Fatalf("detokenized %q", text)
	}
}

func TestTokenLogprobIsDeterministicAndExact(t *testing.T) {
	for pos := range 50 {
		lp := policy.TokenLogprob(pos, int64(pos*7))
		if lp != policy.TokenLogprob(pos, int64(pos*7)) || lp > 0 || lp <= -8 {
			t.Fatalf("logprob(%d) = %v", pos, lp)
		}
		if lp*512 != float64(int64(lp*512)) {
			t.Fatalf("logprob %v is not a multiple of 1/512", lp)
		}
	}
	if policy.TokenLogprob(1, 5) == policy.TokenLogprob(2, 5) && policy.TokenLogprob(1, 6) == policy.TokenLogprob(2, 6) {
		t.Fatal("log-probs do not depend on the position")
	}
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
	if !slices.Equal(next[:len(seq)], seq) {
		t.Fatalf("next prompt does not continue prompt+output:\n%v\n%v", next, seq)
	}
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
	if err := json.Unmarshal([]byte(c.RawJSON()), &v); err != nil {
		t.Fatal(err)
	}
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
		if err != nil {
			t.Fatal(err)
		}
		if v := resp.Header.Get(policy.PolicyVersionHeader); v != "step-3" {
			t.Fatalf("policy version header %q", v)
		}
		f := tokenFields(t, c)
		ch := f.Choices[0]
		if prev != nil && !slices.Equal(f.PromptTokenIDs[:len(prev)], prev) {
			t.Fatalf("call %d: prompt does not continue the previous prompt+output", call)
		}
		if len(ch.TokenIDs) == 0 || ch.Logprobs == nil || len(ch.Logprobs.Content) != len(ch.TokenIDs) {
			t.Fatalf("call %d: %d ids, logprobs %+v", call, len(ch.TokenIDs), ch.Logprobs)
		}
		for i, lp := range ch.Logprobs.Content {
			id := ch.TokenIDs[i]
			if lp.Token != policy.TokenText(id) || lp.Logprob != policy.TokenLogprob(len(f.PromptTokenIDs)+i, id) {
				t.Fatalf("call %d token %d: %+v for id %d", call, i, lp, id)
			}
		}
		if c.Usage.PromptTokens != int64(len(f.PromptTokenIDs)) || c.Usage.CompletionTokens != int64(len(ch.TokenIDs)) {
			t.Fatalf("usage %+v does not count the tokens", c.Usage)
		}
		prev = append(slices.Clone(f.PromptTokenIDs), ch.TokenIDs...)
		if len(c.Choices[0].Message.ToolCalls) == 0 {
			return
		}
		params.Messages = append(params.Messages, c.Choices[0].Message.ToParam(),
			openai.ToolMessage(fmt.Sprintf("counter=%d", call), c.Choices[0].Message.ToolCalls[0].ID))
		if call > 10 {
			t.Fatal("episode did not end")
		}
	}
}

func TestServerTokenFieldsOnlyWhenAsked(t *testing.T) {
	_, client := startPolicyServer(t, policy.ServerConfig{})
	ctx := context.Background()
	c, err := client.Chat.Completions.New(ctx, counterParams(0, 2, 1))
	if err != nil {
		t.Fatal(err)
	}
	if f := tokenFields(t, c); f.PromptTokenIDs != nil || f.Choices[0].TokenIDs != nil || f.Choices[0].Logprobs != nil {
		t.Fatalf("token fields without being asked: %s", c.RawJSON())
	}
	// vLLM answers an explicit top_logprobs: null with no log-probs; id mode
	// spells tokens as token_id:N.
	c, err = client.Chat.Completions.New(ctx, counterParams(0, 2, 1), option.WithJSONSet("logprobs", true), option.WithJSONSet("top_logprobs", nil))
	if err != nil {
		t.Fatal(err)
	}
	if f := tokenFields(t, c); f.Choices[0].Logprobs != nil {
		t.Fatalf("log-probs despite top_logprobs null: %s", c.RawJSON())
	}
	c, err = client.Chat.Completions.New(ctx, counterParams(0, 2, 1), option.WithJSONSet("logprobs", true), option.WithJSONSet("return_tokens_as_token_ids", true))
	if err != nil {
		t.Fatal(err)
	}
	f := tokenFields(t, c)
	if got := f.Choices[0].Logprobs.Content[0].Token; len(got) < 10 || got[:9] != "token_id:" {
		t.Fatalf("token %q is not in id form", got)
	}
}
