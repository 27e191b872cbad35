package policy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/internal/sleep"
)

// scripted is a policy's answer in the toy dialect's terms: the message and
// the tokens that render it. Every route (chat, streamed or not, and the
// token-in routes) generates from it, so a continuation goes on exactly as
// the first request would have.
type scripted struct {
	content string
	calls   []envs.ToolCall // ids resolved
	finish  string
	// template is the rendered chat; prompt its ids, output the answer's.
	template       string
	prompt, output []int64
}

// key names the generation in the request records: the rendered chat's
// digest.
func (a scripted) key() string {
	sum := sha256.Sum256([]byte(a.template))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// answerOf asks pol for the next message of preq's chat, rendered as
// template, pads it (when tools are offered: a gym answer is its action and
// is never padded) and renders its tokens.
func (s *server) answerOf(pol envs.Policy, preq envs.PolicyRequest, template string) (scripted, envs.PolicyResponse, error) {
	resp, err := pol.Respond(preq)
	if err != nil {
		return scripted{}, envs.PolicyResponse{}, err
	}
	if len(preq.Tools) > 0 {
		resp.Content = padding(s.cfg.PadTokens, template) + resp.Content
	}
	a := scripted{content: resp.Content, finish: FinishStop, template: template, prompt: Tokenize(template)}
	for i, tc := range resp.ToolCalls {
		if tc.ID == "" {
			tc.ID = envs.CallID(preq.Messages, i)
		}
		a.calls = append(a.calls, tc)
		a.finish = FinishToolCalls
	}
	a.output = Tokenize(RenderAssistant(a.content, a.calls))
	return a, resp, nil
}

// tokenDelta is what one output token adds to a streamed chat message.
type tokenDelta struct {
	content string
	// call is the index of a tool call this token opens (-1: none).
	call int
	// args is the arguments text it adds to call argsOf.
	args   string
	argsOf int
}

// chatDeltas splits the answer's message over its output tokens as a chat
// stream sends it: content text, a tool call's id and name with its marker,
// then its arguments. Text is held back until its bytes are whole UTF-8, as
// vLLM's detokenizer does. The result has one delta per output token.
func (a scripted) chatDeltas() ([]tokenDelta, error) {
	var out []tokenDelta
	var pending []byte
	text := func(id int64) string {
		pending = append(pending, TokenText(id)...)
		if !utf8.Valid(pending) {
			return ""
		}
		s := string(pending)
		pending = pending[:0]
		return s
	}
	for _, id := range Tokenize(a.content) {
		out = append(out, tokenDelta{content: text(id), call: -1, argsOf: -1})
	}
	for i, tc := range a.calls {
		out = append(out, tokenDelta{call: i, argsOf: -1})
		for range Tokenize(tc.ID + " " + tc.Name + " ") {
			out = append(out, tokenDelta{call: -1, argsOf: -1})
		}
		for _, id := range Tokenize(tc.Arguments) {
			out = append(out, tokenDelta{args: text(id), call: -1, argsOf: i})
		}
	}
	out = append(out, tokenDelta{call: -1, argsOf: -1}) // the end marker
	if len(out) != len(a.output) {
		return nil, fmt.Errorf("policy: %d stream deltas for %d output tokens", len(out), len(a.output))
	}
	return out, nil
}

// pacer spaces tokens at TokensPerSecond, from the first token on.
type pacer struct {
	every time.Duration
	start time.Time
}

func (s *server) newPacer() pacer {
	p := pacer{start: time.Now()}
	if s.cfg.TokensPerSecond > 0 {
		p.every = time.Duration(float64(time.Second) / s.cfg.TokensPerSecond)
	}
	return p
}

// wait returns when token i (from 0) is due, or ctx's error.
func (p pacer) wait(ctx context.Context, i int) error {
	if p.every > 0 {
		if err := sleep.For(ctx, time.Until(p.start.Add(time.Duration(i+1)*p.every))); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// waitAll returns when n tokens are due (a whole answer sent at once).
func (p pacer) waitAll(ctx context.Context, n int) error {
	if n == 0 {
		return ctx.Err()
	}
	return p.wait(ctx, n-1)
}
