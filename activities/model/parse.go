package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/turnstile-rl/turnstile/internal/policy"
	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// A continued generation comes back from a token-in route as text and
// tokens, not as a chat message: the worker reads the whole generation's raw
// text (the prefix's and the continuation's, special tokens included) back
// into content, reasoning and tool calls with the parser the policy names,
// as vLLM's chat route does with its --tool-call-parser.

// parsedAnswer is a generation's text read as a message.
type parsedAnswer struct {
	content, reasoning string
	calls              []transcript.ToolCall
}

// answerParser reads a generation's raw text.
type answerParser interface {
	parse(raw string) (parsedAnswer, error)
	// skipSpecialTokens is what the continuation asks of the token-in
	// route's text: the turnstile template's markers are special tokens
	// the parser needs; Hermes models end with a special token it does not.
	skipSpecialTokens() bool
	// parseCut reads a generation the call's max_tokens (or the
	// endpoint's context) cut: the text up to the cut, its complete tool
	// calls, and no error for the end it never reached; a call the cut
	// fell in is left out.
	parseCut(raw string) parsedAnswer
}

// parserOf is the policy's parser; nil when it names none.
func parserOf(name string) answerParser {
	switch name {
	case rollout.ToolParserHermes:
		return hermesParser{}
	case rollout.ToolParserTurnstile:
		return turnstileParser{}
	}
	return nil
}

// turnstileParser reads the scripted policy server's toy template: the
// content, each call as <|call|>id name arguments, then <|end|>.
type turnstileParser struct{}

func (turnstileParser) skipSpecialTokens() bool { return false }

func (turnstileParser) parse(raw string) (parsedAnswer, error) {
	body, ok := strings.CutSuffix(raw, policy.EndMarker)
	if !ok {
		return parsedAnswer{}, fmt.Errorf("the answer does not end with %s", policy.EndMarker)
	}
	content, calls, err := policy.ParseAssistant(body)
	if err != nil {
		return parsedAnswer{}, err
	}
	out := parsedAnswer{content: content}
	for _, c := range calls {
		out.calls = append(out.calls, transcript.ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
	}
	return out, nil
}

func (p turnstileParser) parseCut(raw string) parsedAnswer {
	if out, err := p.parse(raw); err == nil {
		return out
	}
	content, calls, _ := strings.Cut(raw, policy.CallMarker)
	out := parsedAnswer{content: content}
	if calls == "" {
		return out
	}
	parts := strings.Split(policy.CallMarker+calls, policy.CallMarker)[1:]
	for n := len(parts); n > 0; n-- {
		// The longest run of calls that reads; the last one may be cut.
		if _, read, err := policy.ParseAssistant(policy.CallMarker + strings.Join(parts[:n], policy.CallMarker)); err == nil {
			for _, c := range read {
				out.calls = append(out.calls, transcript.ToolCall{ID: c.ID, Name: c.Name, Arguments: c.Arguments})
			}
			break
		}
	}
	return out
}

// hermesParser reads Hermes-style answers, as vLLM's hermes tool parser and
// qwen3 reasoning parser do: an optional <think>…</think> block, the
// content, then <tool_call>{"name": …, "arguments": {…}}</tool_call>
// blocks. The text carries no call ids; answerOf gives them.
type hermesParser struct{}

func (hermesParser) skipSpecialTokens() bool { return true }

// hermesEnds are end-of-turn tokens a prefix's raw text may end with.
var hermesEnds = []string{"<|im_end|>", "<|endoftext|>", "</s>"}

func (p hermesParser) parseCut(raw string) parsedAnswer {
	if out, err := p.parse(raw); err == nil {
		return out
	}
	if rest, ok := strings.CutPrefix(strings.TrimLeft(raw, " \n"), "<think>"); ok && !strings.Contains(rest, "</think>") {
		return parsedAnswer{reasoning: strings.TrimSpace(rest)} // cut while thinking
	}
	// Cut inside a tool call: the calls before it.
	cut := strings.LastIndex(raw, "<tool_call>")
	if cut < 0 {
		return parsedAnswer{content: raw}
	}
	out, err := p.parse(raw[:cut])
	if err != nil {
		return parsedAnswer{content: raw}
	}
	return out
}

func (hermesParser) parse(raw string) (parsedAnswer, error) {
	for _, end := range hermesEnds {
		raw = strings.TrimSuffix(raw, end)
	}
	var out parsedAnswer
	if rest, ok := strings.CutPrefix(strings.TrimLeft(raw, " \n"), "<think>"); ok {
		reasoning, after, found := strings.Cut(rest, "</think>")
		if !found {
			return parsedAnswer{}, errors.New("a <think> block has no </think>")
		}
		out.reasoning, raw = strings.TrimSpace(reasoning), strings.TrimLeft(after, "\n")
	}
	content, calls, _ := strings.Cut(raw, "<tool_call>")
	out.content = strings.TrimRight(content, " \n")
	if calls == "" {
		return out, nil
	}
	for i, block := range strings.Split("<tool_call>"+calls, "<tool_call>")[1:] {
		body, _, found := strings.Cut(block, "</tool_call>")
		if !found {
			return parsedAnswer{}, fmt.Errorf("tool call %d has no </tool_call>", i)
		}
		var call struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}
		if err := json.Unmarshal([]byte(strings.TrimSpace(body)), &call); err != nil || call.Name == "" {
			return parsedAnswer{}, fmt.Errorf("tool call %d %q is not {\"name\": …, \"arguments\": …}", i, truncate(body, 80))
		}
		args := string(call.Arguments)
		var s string
		if json.Unmarshal(call.Arguments, &s) == nil {
			args = s // arguments given as a JSON string already
		}
		out.calls = append(out.calls, transcript.ToolCall{Name: call.Name, Arguments: args})
	}
	return out, nil
}
