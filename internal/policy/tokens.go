package policy

import (
	"encoding/binary"
	"encoding/json"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/turnstile-rl/turnstile/envs"
)

// The scripted server's token dialect: a toy tokenizer over a toy chat
// template, deterministic, and prefix-stable in the way real multi-turn
// training needs: the prompt of call n+1 starts with the prompt + output of
// call n whenever the conversation only grew. Tests can then check token
// exactness and the lineage check without a GPU.
//
// Tokenizer: every byte is its own token (id = byte value), except the
// template's markers below, which are single special tokens from 256 on.
// No marker starts inside another or with '|', so tokenizing a concatenation
// at a marker boundary equals concatenating the tokenizations.
var specialTokens = []string{
	"<|system|>", "<|developer|>", "<|user|>", "<|assistant|>", "<|tool|>", "<|tools|>", "<|call|>", "<|end|>",
}

// firstSpecialID is the id of specialTokens[0].
const firstSpecialID = 256

// EndMarker ends every rendered message, an assistant's answer included.
const EndMarker = tokEnd

// CallMarker opens a tool call in the toy template.
const CallMarker = tokCall

const (
	tokEnd       = "<|end|>"
	tokAssistant = "<|assistant|>"
	tokCall      = "<|call|>"
	tokTools     = "<|tools|>"
)

// Tokenize returns the ids of text.
func Tokenize(text string) []int64 {
	ids := []int64{}
	for i := 0; i < len(text); {
		if id, n := specialAt(text[i:]); n > 0 {
			ids = append(ids, id)
			i += n
			continue
		}
		ids = append(ids, int64(text[i]))
		i++
	}
	return ids
}

func specialAt(s string) (int64, int) {
	if !strings.HasPrefix(s, "<|") {
		return 0, 0
	}
	for i, sp := range specialTokens {
		if strings.HasPrefix(s, sp) {
			return int64(firstSpecialID + i), len(sp)
		}
	}
	return 0, 0
}

// TokenText is the text of one token id: its byte, or its marker.
func TokenText(id int64) string {
	if id >= firstSpecialID && id < firstSpecialID+int64(len(specialTokens)) {
		return specialTokens[id-firstSpecialID]
	}
	return string([]byte{byte(id)})
}

// TokenLogprob is the deterministic log-probability of token id sampled at
// position pos of the sequence: a multiple of 1/512 in (-8, 0], so it is
// exact in binary and survives any JSON round trip.
func TokenLogprob(pos int, id int64) float64 {
	h := fnv.New64a()
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(pos))
	binary.BigEndian.PutUint64(b[8:], uint64(id))
	_, _ = h.Write(b[:])
	return -float64(h.Sum64()%4096) / 512
}

// TemplateTool is an offered function tool as the template shows it.
type TemplateTool struct {
	Name        string
	Description string
	Parameters  json.RawMessage
}

func templateTools(in []wireTool) []TemplateTool {
	out := make([]TemplateTool, 0, len(in))
	for _, t := range in {
		out = append(out, TemplateTool{Name: t.Function.Name, Description: t.Function.Description, Parameters: t.Function.Parameters})
	}
	return out
}

// RenderPrompt renders the offered tools and the messages with the toy
// chat template, ending with the generation prompt of an assistant turn.
func RenderPrompt(tools []TemplateTool, msgs []envs.Message) string {
	var b strings.Builder
	if len(tools) > 0 {
		b.WriteString(tokTools)
		for _, t := range tools {
			b.WriteString(t.Name)
			b.WriteByte(' ')
			b.WriteString(t.Description)
			b.WriteByte(' ')
			b.WriteString(compactJSON(t.Parameters))
			b.WriteByte('\n')
		}
		b.WriteString(tokEnd)
	}
	for _, m := range msgs {
		if m.Role == RoleAssistant {
			b.WriteString(tokAssistant)
			b.WriteString(RenderAssistant(m.Content, m.ToolCalls))
			continue
		}
		b.WriteString("<|" + m.Role + "|>")
		if m.ToolCallID != "" {
			b.WriteString(m.ToolCallID + "\n")
		}
		b.WriteString(m.Content)
		b.WriteString(tokEnd)
	}
	b.WriteString(tokAssistant)
	return b.String()
}

// RenderAssistant renders an assistant turn after its role marker: what the
// model generates, and what the template shows of it in a later prompt.
func RenderAssistant(content string, calls []envs.ToolCall) string {
	var b strings.Builder
	b.WriteString(content)
	for _, tc := range calls {
		b.WriteString(tokCall + tc.ID + " " + tc.Name + " " + tc.Arguments)
	}
	b.WriteString(tokEnd)
	return b.String()
}

func compactJSON(raw json.RawMessage) string {
	var v any
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	b, _ := json.Marshal(v) // sorted keys: the same schema renders the same
	return string(b)
}

// tokenLogprob is one entry of choices[i].logprobs.content in vLLM's shape.
type tokenLogprob struct {
	Token       string  `json:"token"`
	Logprob     float64 `json:"logprob"`
	Bytes       []int   `json:"bytes"`
	TopLogprobs []any   `json:"top_logprobs"`
}

type choiceLogprobs struct {
	Content []tokenLogprob `json:"content"`
}

// logprobsOf returns the log-probs of the output tokens, which sit after
// promptLen prompt tokens; asIDs spells each token as "token_id:N", as vLLM
// does with return_tokens_as_token_ids.
func logprobsOf(output []int64, promptLen int, asIDs bool) *choiceLogprobs {
	lp := &choiceLogprobs{Content: make([]tokenLogprob, 0, len(output))}
	for i, id := range output {
		text := TokenText(id)
		tok := text
		if asIDs {
			tok = "token_id:" + strconv.FormatInt(id, 10)
		}
		bs := make([]int, len(text))
		for j := range len(text) {
			bs[j] = int(text[j])
		}
		lp.Content = append(lp.Content, tokenLogprob{Token: tok, Logprob: TokenLogprob(promptLen+i, id), Bytes: bs, TopLogprobs: []any{}})
	}
	return lp
}

// PolicyVersionHeader is the response header the server reports its
// PolicyVersion in (the one turnstile's model activity reads).
const PolicyVersionHeader = "X-Policy-Version"

// addTokens adds what a vLLM server adds when asked: prompt_token_ids and
// choices[0].token_ids for return_token_ids, choices[0].logprobs for
// logprobs (unless top_logprobs is an explicit null, which vLLM answers
// with none). The usage then counts the real tokens, as vLLM's does.
func addTokens(out *chatResponse, req chatRequest, preq envs.PolicyRequest) {
	wantLogprobs := req.Logprobs && string(req.TopLogprobs) != "null"
	if !req.ReturnTokenIDs && !wantLogprobs {
		return
	}
	c := &out.Choices[0]
	var calls []envs.ToolCall
	for _, tc := range c.Message.ToolCalls {
		calls = append(calls, envs.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
	content := ""
	if c.Message.Content != nil {
		content = *c.Message.Content
	}
	prompt := Tokenize(RenderPrompt(templateTools(req.Tools), preq.Messages))
	output := Tokenize(RenderAssistant(content, calls))
	if req.ReturnTokenIDs {
		out.PromptTokenIDs, c.TokenIDs = prompt, output
	}
	if wantLogprobs {
		c.Logprobs = logprobsOf(output, len(prompt), req.ReturnTokensAsTokenIDs)
	}
	out.Usage = chatUsage{PromptTokens: len(prompt), CompletionTokens: len(output), TotalTokens: len(prompt) + len(output)}
}
