package model

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/internal/destination"
	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// generated is a model call's answer however it was obtained: whole,
// streamed, or continued from a durable prefix.
type generated struct {
	content, reasoning string
	// calls carry the ids the endpoint gave (possibly none: answerOf
	// gives those).
	calls  []transcript.ToolCall
	finish string
	tok    tokens
	// spans are the policy versions that sampled the generation, when
	// more than one did.
	spans    []transcript.VersionSpan
	usage    rollout.Usage
	recovery rollout.GenerationRecovery
}

// finalFlushTimeout bounds the flush a cut call makes before it returns.
const finalFlushTimeout = 10 * time.Second

// callStreamed is a model call with token capture: the answer is streamed
// and its prefix made durable as it grows (prefixWriter); a call that a
// crash or a checkpoint cut continues from its durable prefix through the
// endpoint's token-in route, or starts over when it cannot (and says so).
func (a *Activities) callStreamed(ctx context.Context, store *transcriptstore.Store, in rollout.CallModelInput, callID string, endpoint destination.Target, params openai.ChatCompletionNewParams) (generated, error) {
	w := a.newPrefixWriter(ctx, store, in, callID)
	g, err := a.callStreamedWith(ctx, w, in, callID, endpoint, params)
	if err == nil || temporal.IsCanceledError(err) {
		w.dropIndex(ctx)
	}
	return g, err
}

// callStreamedWith is callStreamed with its prefix writer: it continues
// the newest durable prefix of the call (newestPrefix), or starts.
func (a *Activities) callStreamedWith(ctx context.Context, w *prefixWriter, in rollout.CallModelInput, callID string, endpoint destination.Target, params openai.ChatCompletionNewParams) (generated, error) {
	store := w.store
	start, err := a.startingPrefix(ctx, in, callID)
	if err != nil {
		return generated{}, err
	}
	start = w.newestPrefix(ctx, start)
	if start == nil {
		return a.streamed(ctx, w, func() (generated, error) { return a.start(ctx, w, in, callID, endpoint, params) })
	}
	p, err := loadPrefix(ctx, store, in, *start)
	switch {
	case errors.Is(err, errForeignPrefix):
		activity.GetLogger(ctx).Warn("prefix not of this call; starting over", "call", callID, "error", err)
		w.restart(transcript.Prefix{TokenIDs: make([]int64, start.Tokens)}, *start)
	case err != nil:
		return generated{}, err
	default:
		why := a.cannotContinue(in, endpoint.URL)
		if why == "" {
			w.resume(p, *start)
			g, err := a.streamed(ctx, w, func() (generated, error) { return a.continueFrom(ctx, w, in, callID, endpoint, p, len(p.TokenIDs)) })
			if !errors.Is(err, errNoTokenRoute) {
				return g, err
			}
			why = err.Error()
		}
		activity.GetLogger(ctx).Info("cannot continue the prefix; starting over", "call", callID, "prefix_tokens", start.Tokens, "why", why)
		w.restart(p, *start)
	}
	return a.streamed(ctx, w, func() (generated, error) { return a.start(ctx, w, in, callID, endpoint, params) })
}

// start generates the answer from its beginning: in chunks when the call
// is bounded (startBounded), else in one streamed request.
func (a *Activities) start(ctx context.Context, w *prefixWriter, in rollout.CallModelInput, callID string, endpoint destination.Target, params openai.ChatCompletionNewParams) (generated, error) {
	if a.bounded(in, endpoint.URL) {
		return a.startBounded(ctx, w, in, callID, endpoint, params)
	}
	return a.streamChat(ctx, w, callID, endpoint, params)
}

// streamed runs one streaming request under the writer's keepalive and
// turns a cut into what the workflow expects: a cancelled call flushes what
// it received and reports its prefix as the cancellation's details; a
// failed one flushes and heartbeats it, so the retry continues from there.
func (a *Activities) streamed(ctx context.Context, w *prefixWriter, request func() (generated, error)) (generated, error) {
	stop := w.keepAlive(ctx)
	g, err := request()
	stop()
	if err == nil {
		if w.discarded > 0 {
			g.recovery.Regenerated, g.recovery.TokensRegenerated = true, w.discarded
		}
		return g, nil
	}
	if errors.Is(err, errNoTokenRoute) {
		return generated{}, err
	}
	flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalFlushTimeout)
	defer cancel()
	if ctx.Err() != nil {
		// Cancelled (a checkpoint's deadline) or timed out: the heartbeat
		// cannot go out any more, the cancellation's details can.
		if ferr := w.flush(flushCtx, false); ferr != nil {
			activity.GetLogger(ctx).Warn("final prefix flush failed", "error", ferr)
		}
		if errors.Is(ctx.Err(), context.Canceled) {
			if ref := w.ref(); ref != nil {
				return generated{}, temporal.NewCanceledError(*ref)
			}
			return generated{}, temporal.NewCanceledError()
		}
		return generated{}, err
	}
	if ferr := w.flush(flushCtx, true); ferr != nil {
		activity.GetLogger(ctx).Warn("prefix flush after a failed stream failed", "error", ferr)
	}
	return generated{}, err
}

// streamChat streams a chat completion from the start.
func (a *Activities) streamChat(ctx context.Context, w *prefixWriter, callID string, endpoint destination.Target, params openai.ChatCompletionNewParams) (generated, error) {
	var resp *http.Response
	err := a.modelClient(endpoint).Post(ctx, "chat/completions", params, &resp,
		option.WithJSONSet("stream", true), option.WithJSONSet("stream_options", map[string]any{"include_usage": true}))
	if err != nil {
		return generated{}, modelError(ctx, callID, params.Model, endpoint.URL, err, a.retryLimit(ctx))
	}
	defer resp.Body.Close()
	header := strings.TrimSpace(resp.Header.Get(PolicyVersionHeader))
	acc := chatAccumulator{calls: map[int]*transcript.ToolCall{}}
	begun := false
	err = streamEvents(resp, func(data []byte) error {
		var ch chatChunkWire
		if err := decodeEvent(data, &ch, func() *errorEvent { return ch.Error }); err != nil {
			return err
		}
		piece := acc.add(ch)
		if !begun && (acc.prompt != nil || len(piece.ids) > 0) {
			begun = true // the prompt ids come first, or never
			w.started(acc.prompt, acc.model)
		}
		return w.add(ctx, piece, acc.versionOr(header, w.in.Policy.Version))
	})
	if errors.Is(err, errStreamCut) && acc.finish != "" {
		err = nil // ended without [DONE], but with its finish
	}
	if err != nil {
		return generated{}, streamError(ctx, callID, params.Model, endpoint.URL, err)
	}
	return acc.generated(header), nil
}

// streamError maps an error of a stream that had begun: it is retried
// (the retry continues from the durable prefix), unless the call was
// cancelled.
func streamError(ctx context.Context, callID, model, baseURL string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s: model call cancelled: %w", callID, ctx.Err())
	}
	return temporal.NewApplicationErrorWithOptions(fmt.Sprintf("%s: stream of model %s at %s broke: %v", callID, model, baseURL, err),
		ErrModelUnavailable, temporal.ApplicationErrorOptions{Cause: err})
}

// chatAccumulator joins a chat stream's chunks.
type chatAccumulator struct {
	model, bodyVersion string
	prompt, output     []int64
	logprobs           []float64
	lpsOK              bool
	content, reasoning strings.Builder
	calls              map[int]*transcript.ToolCall
	finish             string
	usage              *usageWire
	chunks             int
}

// add takes one chunk (or a whole answer) and returns its tokens.
func (c *chatAccumulator) add(ch chatChunkWire) tokenPiece {
	if c.chunks == 0 {
		c.lpsOK = true
	}
	c.chunks++
	if ch.Model != "" {
		c.model = ch.Model
	}
	if ch.PolicyVersion != "" {
		c.bodyVersion = ch.PolicyVersion
	}
	if ch.PromptTokenIDs != nil && c.prompt == nil {
		c.prompt = ch.PromptTokenIDs
	}
	if ch.Usage != nil {
		c.usage = ch.Usage
	}
	var piece tokenPiece
	for i, choice := range ch.Choices {
		if i > 0 {
			break // n = 1: one choice
		}
		if choice.PromptTokenIDs != nil && c.prompt == nil {
			c.prompt = choice.PromptTokenIDs
		}
		msg := choice.Delta
		if msg == nil {
			msg = choice.Message
		}
		c.addMessage(msg)
		piece = chatPiece(choice.TokenIDs, choice.Logprobs)
		c.output = append(c.output, piece.ids...)
		if len(piece.lps) != len(piece.ids) {
			c.lpsOK = false
		}
		c.logprobs = append(c.logprobs, piece.lps...)
		if choice.FinishReason != nil && *choice.FinishReason != "" {
			c.finish = *choice.FinishReason
		}
	}
	return piece
}

func (c *chatAccumulator) addMessage(m *messageWire) {
	if m == nil {
		return
	}
	if m.Content != nil {
		c.content.WriteString(*m.Content)
	}
	switch {
	case m.ReasoningContent != nil:
		c.reasoning.WriteString(*m.ReasoningContent)
	case m.Reasoning != nil:
		c.reasoning.WriteString(*m.Reasoning)
	}
	for i, tc := range m.ToolCalls {
		idx := i + len(c.calls) // a whole message lists its calls in order
		if tc.Index != nil {
			idx = *tc.Index
		}
		call, ok := c.calls[idx]
		if !ok {
			call = &transcript.ToolCall{}
			c.calls[idx] = call
		}
		if tc.ID != "" {
			call.ID = tc.ID
		}
		if tc.Function.Name != "" {
			call.Name = tc.Function.Name
		}
		call.Arguments += tc.Function.Arguments
	}
}

// versionOr is the version the answer reports (header, else body field),
// else the rollout's.
func (c *chatAccumulator) versionOr(header, input string) string {
	switch {
	case header != "":
		return header
	case c.bodyVersion != "":
		return c.bodyVersion
	}
	return input
}

// generated is the joined answer.
func (c *chatAccumulator) generated(header string) generated {
	g := generated{content: c.content.String(), reasoning: c.reasoning.String(), finish: c.finish}
	idx := make([]int, 0, len(c.calls))
	for i := range c.calls {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	for _, i := range idx {
		g.calls = append(g.calls, *c.calls[i])
	}
	g.tok = tokens{present: c.prompt != nil && c.output != nil, prompt: c.prompt, output: c.output, reasoning: g.reasoning, model: c.model}
	if g.tok.present && c.lpsOK && len(c.logprobs) == len(c.output) {
		g.tok.logprobs = c.logprobs
	}
	g.tok.version = header
	if g.tok.version == "" {
		g.tok.version = c.bodyVersion
	}
	g.usage = usageOf(c.usage, len(c.prompt), len(c.output))
	return g
}

// usageOf is the endpoint's usage, or the counted tokens when it sent none.
func usageOf(u *usageWire, prompt, output int) rollout.Usage {
	if u != nil {
		return rollout.Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens, Calls: 1}
	}
	return rollout.Usage{PromptTokens: int64(prompt), CompletionTokens: int64(output), TotalTokens: int64(prompt + output), Calls: 1}
}
