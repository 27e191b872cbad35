package model

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

func TestHermesParser(t *testing.T) {
	p := parserOf(rollout.ToolParserHermes)
	require.True(t, p.skipSpecialTokens())
	got, err := p.parse("<think>\nadd one\n</think>\n\nAdding.\n<tool_call>\n{\"name\": \"increment\", \"arguments\": {\"amount\": 1}}\n</tool_call>\n<tool_call>\n{\"name\": \"read\", \"arguments\": \"{}\"}\n</tool_call><|im_end|>")
	require.NoError(t, err)
	require.Equal(t, parsedAnswer{content: "Adding.", reasoning: "add one", calls: []transcript.ToolCall{
		{Name: "increment", Arguments: `{"amount": 1}`}, {Name: "read", Arguments: `{}`},
	}}, got)

	got, err = p.parse("Just text.<|im_end|>")
	require.NoError(t, err)
	require.Equal(t, parsedAnswer{content: "Just text."}, got)

	for _, bad := range []string{"<think>never closed", "<tool_call>{\"name\": \"x\"", "<tool_call>not json</tool_call>"} {
		_, err := p.parse(bad)
		require.Error(t, err, bad)
	}
}

func TestTurnstileParser(t *testing.T) {
	p := parserOf(rollout.ToolParserTurnstile)
	require.False(t, p.skipSpecialTokens(), "its markers are special tokens")
	got, err := p.parse(`thinking<|call|>call_0 increment {"amount":1}<|end|>`)
	require.NoError(t, err)
	require.Equal(t, parsedAnswer{content: "thinking", calls: []transcript.ToolCall{{ID: "call_0", Name: "increment", Arguments: `{"amount":1}`}}}, got)
	_, err = p.parse("no end marker")
	require.ErrorContains(t, err, "does not end with")
	require.Nil(t, parserOf(""))
}

// A chat piece reads each token's raw text from its log-prob bytes, and
// never pairs log-probs with the wrong tokens.
func TestChatPiece(t *testing.T) {
	lp := &chatLogprobs{}
	lp.Content = append(lp.Content, struct {
		Token   string  `json:"token"`
		Logprob float64 `json:"logprob"`
		Bytes   []int   `json:"bytes"`
	}{Token: "é", Logprob: -1, Bytes: []int{0xc3}}, struct {
		Token   string  `json:"token"`
		Logprob float64 `json:"logprob"`
		Bytes   []int   `json:"bytes"`
	}{Token: "", Logprob: -2, Bytes: []int{0xa9}})
	p := chatPiece([]int64{5, 6}, lp)
	require.Equal(t, "é", p.text, "bytes split over two tokens join")
	require.Equal(t, []float64{-1, -2}, p.lps)
	require.True(t, p.textKnown)
	p = chatPiece([]int64{5}, lp)
	require.Nil(t, p.lps, "two log-probs for one token are dropped")
	require.False(t, p.textKnown)
}
