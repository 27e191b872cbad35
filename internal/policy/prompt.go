package policy

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/turnstile-rl/turnstile/envs"
)

// The inverse of the toy chat template: a token-in request (the completions
// route with a token-id prompt, or the generate route) carries the prompt's
// ids and nothing else, so the server reads the offered tools and the
// messages back out of them, answers them as the chat route would, and
// continues whatever generated prefix follows the last assistant marker.

// Detokenize is the text of ids: each token's byte or marker.
func Detokenize(ids []int64) string {
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(TokenText(id))
	}
	return b.String()
}

// tokenPrompt is a token-id prompt read back: the chat it renders, and the
// generated prefix after the final assistant marker.
type tokenPrompt struct {
	tools    []string
	template string // the rendered chat, generation prompt included
	messages []envs.Message
	// templateLen is how many of the prompt's ids render the chat; the rest
	// are the generated prefix.
	templateLen int
	prefix      []int64
}

// assistantID is the id of the assistant marker.
var assistantID = Tokenize(tokAssistant)[0]

// parseTokenPrompt splits ids at the last assistant marker and reads the
// chat before it.
func parseTokenPrompt(ids []int64) (tokenPrompt, error) {
	last := -1
	for i, id := range ids {
		if id < 0 || id >= firstSpecialID+int64(len(specialTokens)) {
			return tokenPrompt{}, fmt.Errorf("prompt token %d is %d, not a token of this server's vocabulary (0..%d)", i, id, firstSpecialID+len(specialTokens)-1)
		}
		if id == assistantID {
			last = i
		}
	}
	if last < 0 {
		return tokenPrompt{}, fmt.Errorf("prompt of %d tokens has no %s marker: it does not end a chat with a generation prompt", len(ids), tokAssistant)
	}
	p := tokenPrompt{templateLen: last + 1, prefix: ids[last+1:], template: Detokenize(ids[:last+1])}
	var err error
	p.tools, p.messages, err = parseTemplate(strings.TrimSuffix(p.template, tokAssistant))
	if err != nil {
		return tokenPrompt{}, err
	}
	return p, nil
}

// parseTemplate reads the tools and messages RenderPrompt wrote (without
// the final generation prompt).
func parseTemplate(text string) ([]string, []envs.Message, error) {
	var tools []string
	if rest, ok := strings.CutPrefix(text, tokTools); ok {
		section, after, found := strings.Cut(rest, tokEnd)
		if !found {
			return nil, nil, errors.New("prompt: the tools section has no end marker")
		}
		for line := range strings.Lines(section) {
			if name, _, _ := strings.Cut(strings.TrimSpace(line), " "); name != "" {
				tools = append(tools, name)
			}
		}
		text = after
	}
	var msgs []envs.Message
	for text != "" {
		m, rest, err := parseMessage(text)
		if err != nil {
			return nil, nil, fmt.Errorf("prompt message %d: %w", len(msgs), err)
		}
		msgs = append(msgs, m)
		text = rest
	}
	if len(msgs) == 0 {
		return nil, nil, errors.New("prompt: no messages before the generation prompt")
	}
	return tools, msgs, nil
}

// parseMessage reads one rendered message off the front of text.
func parseMessage(text string) (envs.Message, string, error) {
	for _, role := range []string{RoleSystem, RoleDeveloper, RoleUser, RoleTool, RoleAssistant} {
		rest, ok := strings.CutPrefix(text, "<|"+role+"|>")
		if !ok {
			continue
		}
		body, after, found := strings.Cut(rest, tokEnd)
		if !found {
			return envs.Message{}, "", fmt.Errorf("a %s message has no end marker", role)
		}
		m := envs.Message{Role: role, Content: body}
		switch role {
		case RoleTool:
			m.ToolCallID, m.Content, found = strings.Cut(body, "\n")
			if !found {
				return envs.Message{}, "", errors.New("a tool message has no tool call id line")
			}
		case RoleAssistant:
			var err error
			if m.Content, m.ToolCalls, err = ParseAssistant(body); err != nil {
				return envs.Message{}, "", err
			}
		}
		return m, after, nil
	}
	return envs.Message{}, "", fmt.Errorf("text %q does not start with a role marker", truncate(text, 40))
}

// ParseAssistant reads an assistant turn as RenderAssistant writes it,
// without the end marker: the content, then each call as its marker, id,
// name and arguments separated by single spaces.
func ParseAssistant(body string) (string, []envs.ToolCall, error) {
	parts := strings.Split(body, tokCall)
	var calls []envs.ToolCall
	for i, p := range parts[1:] {
		id, rest, ok1 := strings.Cut(p, " ")
		name, args, ok2 := strings.Cut(rest, " ")
		if !ok1 || !ok2 || id == "" || name == "" {
			return "", nil, fmt.Errorf("tool call %d %q is not \"id name arguments\"", i, truncate(p, 40))
		}
		calls = append(calls, envs.ToolCall{ID: id, Name: name, Arguments: args})
	}
	return parts[0], calls, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// padAlphabet is what padding is written with: letters and spaces, one
// token each, never a marker.
const padAlphabet = "abcdefghijklmnopqrstuvwxyz    "

// padding is n tokens of deterministic filler for the chat rendered as
// template: the "thinking" a long answer spends before its content. It
// depends on the prompt alone, so a continuation from a token prefix
// computes the same answer the first request began.
func padding(n int, template string) string {
	if n <= 0 {
		return ""
	}
	sum := sha256.Sum256([]byte(template))
	rng := rand.New(rand.NewPCG(binary.BigEndian.Uint64(sum[:8]), binary.BigEndian.Uint64(sum[8:16])))
	b := make([]byte, n)
	for i := range b {
		b[i] = padAlphabet[rng.IntN(len(padAlphabet))]
	}
	b[n-1] = '\n'
	return string(b)
}
