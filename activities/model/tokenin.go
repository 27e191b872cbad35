package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/openai/openai-go/v3"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/internal/destination"
	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// Continuing a generation from its durable prefix through vLLM's token-in
// route: the completions endpoint takes a token-id prompt
// (vllm/entrypoints/openai/completion/protocol.py: prompt list[int]), so
// the prompt's ids followed by the prefix's go in as they are, and no
// retokenisation can change them. return_token_ids gives the continuation's
// ids, logprobs=0 each sampled token's log-prob.

// errNoTokenRoute: the endpoint cannot continue a token prefix (no
// completions route, it refuses token-id prompts, or it reports no token
// ids): the call starts over.
var errNoTokenRoute = errors.New("the endpoint cannot continue a token prefix")

// Token-in capability of an endpoint and model, found out by the first
// continuation and remembered by the worker process.
const (
	routeUnknown = iota
	routeWorks
	routeMissing
)

func routeKey(baseURL, model string) string { return baseURL + "\x00" + model }

// route is what the worker knows of the token-in route of (baseURL, model).
func (a *Activities) route(baseURL, model string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.routes[routeKey(baseURL, model)]
}

func (a *Activities) setRoute(baseURL, model string, state int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.routes == nil {
		a.routes = map[string]int{}
	}
	a.routes[routeKey(baseURL, model)] = state
}

// cannotContinue says why the call cannot continue a prefix, or "".
func (a *Activities) cannotContinue(in rollout.CallModelInput, baseURL string) string {
	switch {
	case in.Policy.Continue == rollout.ContinueNever:
		return "policy.continue is never"
	case parserOf(in.Policy.ToolParser) == nil:
		return "policy.tool_parser is not set: a continued generation's text could not be read back into a message"
	case a.route(baseURL, in.Policy.Model) == routeMissing:
		return errNoTokenRoute.Error() + " (found out by an earlier continuation)"
	}
	return ""
}

// continuationBody is the completions request that continues p: the
// prompt's ids and the prefix's, the rollout's sampling (seed included),
// and what is left of its token budget (null: up to the context, since
// vLLM's default for a completions request is 16 tokens), cut to limit
// when limit >= 0 (a bounded call's chunk). It returns the body, what is
// left of the budget (-1: no budget) and the request's max_tokens (-1:
// none).
func continuationBody(in rollout.CallModelInput, p transcript.Prefix, skipSpecial bool, limit int64) ([]byte, int64, int64, error) {
	body := map[string]any{}
	s := rollout.Sampling{}
	if in.Sampling != nil {
		s = *in.Sampling
	}
	for k, v := range s.ExtraBody {
		body[k] = v
	}
	seed := in.Seed
	if s.Seed != nil {
		seed = *s.Seed
	}
	left := int64(-1)
	if s.MaxTokens != nil {
		left = max(*s.MaxTokens-int64(len(p.TokenIDs)), 0)
	}
	asked := left
	if limit >= 0 && (asked < 0 || limit < asked) {
		asked = limit
	}
	var maxTokens any
	if asked >= 0 {
		maxTokens = asked
	}
	prompt := make([]int64, 0, len(p.PromptTokenIDs)+len(p.TokenIDs))
	prompt = append(append(prompt, p.PromptTokenIDs...), p.TokenIDs...)
	for k, v := range map[string]any{
		"model": in.Policy.Model, "prompt": prompt, "max_tokens": maxTokens, "seed": seed,
		"stream": true, "stream_options": map[string]any{"include_usage": true},
		"logprobs": 0, "return_token_ids": true, "skip_special_tokens": skipSpecial,
	} {
		body[k] = v
	}
	if s.Temperature != nil {
		body["temperature"] = *s.Temperature
	}
	if s.TopP != nil {
		body["top_p"] = *s.TopP
	}
	if len(s.Stop) > 0 {
		body["stop"] = s.Stop
	}
	b, err := json.Marshal(body)
	return b, left, asked, err
}

// continueFrom continues the generation p through the completions route
// and reads the whole generation back into an answer. recovered is how
// many of p's tokens a crash or a checkpoint cut left (the call's own
// earlier chunks are not recovered). A bounded call (Activities.bounded)
// asks for at most a chunk per request and makes each chunk durable
// before it asks for the next; otherwise one request asks for the rest.
func (a *Activities) continueFrom(ctx context.Context, w *prefixWriter, in rollout.CallModelInput, callID string, endpoint destination.Target, p transcript.Prefix, recovered int) (generated, error) {
	parser := parserOf(in.Policy.ToolParser)
	bounded := a.bounded(in, endpoint.URL)
	cur := transcript.Prefix{
		Head: p.Head, PromptTokenIDs: p.PromptTokenIDs, Model: p.Model, Discarded: p.Discarded,
		TokenIDs: slices.Clone(p.TokenIDs), LogProbs: slices.Clone(p.LogProbs), Text: p.Text, Segments: slices.Clone(p.Segments),
	}
	finish := finishLength
	for requests := 0; ; requests++ {
		limit := int64(-1)
		if bounded {
			limit = a.chunkLimit(w)
		}
		body, left, asked, err := continuationBody(in, cur, parser.skipSpecialTokens(), limit)
		if err != nil {
			return generated{}, fmt.Errorf("%s: encode continuation: %w", callID, err)
		}
		if left == 0 {
			if requests == 0 {
				cur.Segments = addSegment(cur.Segments, len(cur.TokenIDs), w.segment, in.Policy.Version)
			}
			break // the call's own max_tokens is reached
		}
		var acc completionAccumulator
		acc.finish = finishLength
		version, err := a.streamContinuation(ctx, w, &acc, callID, endpoint, in.Policy.Model, body)
		if err != nil {
			return generated{}, err
		}
		if version == "" {
			version = in.Policy.Version
		}
		cur.Segments = addSegment(cur.Segments, len(cur.TokenIDs), w.segment, version)
		cur.TokenIDs = append(cur.TokenIDs, acc.ids...)
		cur.LogProbs = append(cur.LogProbs, acc.lps...)
		cur.Text += acc.text.String()
		finish = acc.finish
		if !bounded || asked == left || !cutAtLimit(acc.finish, len(acc.ids), asked) {
			break // one request, the call's own limit, or the model stopped
		}
		if err := w.flush(ctx, true); err != nil {
			return generated{}, err
		}
	}
	a.setRoute(endpoint.URL, in.Policy.Model, routeWorks)
	return a.continuedAnswer(callID, in, parser, cur, finish, recovered)
}

// addSegment records that a request of segment started sampling at start
// with version, unless it goes on the last segment of the same version
// (transcript.AssemblePrefix's rule, so that an answer's segments are the
// same whether read from the store or kept here).
func addSegment(segments []transcript.PrefixSegment, start, segment int, version string) []transcript.PrefixSegment {
	if n := len(segments); n > 0 && segments[n-1].Segment == segment && segments[n-1].PolicyVersion == version {
		return segments
	}
	return append(segments, transcript.PrefixSegment{Start: start, Segment: segment, PolicyVersion: version})
}

// continuedAnswer reads a continued generation back into an answer.
func (a *Activities) continuedAnswer(callID string, in rollout.CallModelInput, parser answerParser, p transcript.Prefix, finish string, recovered int) (generated, error) {
	parsed, err := parser.parse(p.Text)
	if err != nil && finish == finishLength {
		parsed, err = parser.parseCut(p.Text), nil
	}
	if err != nil {
		return generated{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("%s: the continued generation cannot be read with tool parser %q: %v", callID, in.Policy.ToolParser, err), rollout.ErrModelRequest, nil)
	}
	g := generated{content: parsed.content, reasoning: parsed.reasoning, calls: parsed.calls, finish: finish}
	if len(g.calls) > 0 && g.finish == "stop" {
		g.finish = "tool_calls" // as the chat route reports it
	}
	spans := transcript.VersionSpans(p.Segments)
	g.tok = tokens{present: true, prompt: p.PromptTokenIDs, output: p.TokenIDs, reasoning: g.reasoning, model: p.Model, version: spans[0].PolicyVersion}
	if len(p.LogProbs) == len(p.TokenIDs) {
		g.tok.logprobs = p.LogProbs
	}
	if len(spans) > 1 {
		g.spans = spans
	}
	g.usage = usageOf(nil, len(p.PromptTokenIDs), len(p.TokenIDs))
	g.recovery = rollout.GenerationRecovery{ResumedAt: p.ResumedAt(), TokensRecovered: recovered}
	return g, nil
}

// streamContinuation sends the continuation request and reads its stream
// into acc, making the prefix durable as it grows. It returns the policy
// version the endpoint reported.
func (a *Activities) streamContinuation(ctx context.Context, w *prefixWriter, acc *completionAccumulator, callID string, endpoint destination.Target, model string, body []byte) (string, error) {
	baseURL := endpoint.URL
	var resp *http.Response
	if err := a.modelClient(endpoint).Post(ctx, "completions", body, &resp); err != nil {
		var apiErr *openai.Error
		if errors.As(err, &apiErr) && ctx.Err() == nil {
			switch apiErr.StatusCode {
			case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented:
				a.setRoute(baseURL, model, routeMissing)
				fallthrough
			case http.StatusBadRequest, http.StatusUnprocessableEntity:
				return "", fmt.Errorf("%w: %s answered %d: %s", errNoTokenRoute, baseURL+"/completions", apiErr.StatusCode, apiErrorText(apiErr))
			}
		}
		return "", modelError(ctx, callID, model, baseURL, err, a.retryLimit(ctx))
	}
	defer resp.Body.Close()
	version := strings.TrimSpace(resp.Header.Get(PolicyVersionHeader))
	err := streamEvents(resp, func(data []byte) error {
		var ch completionChunkWire
		if err := decodeEvent(data, &ch, func() *errorEvent { return ch.Error }); err != nil {
			return err
		}
		if version == "" {
			version = ch.PolicyVersion
		}
		piece, err := acc.add(ch)
		if err != nil {
			a.setRoute(baseURL, model, routeMissing)
			return err
		}
		return w.add(ctx, piece, version)
	})
	if errors.Is(err, errStreamCut) && acc.finished {
		err = nil
	}
	if errors.Is(err, errNoTokenRoute) {
		return "", err
	}
	if err != nil {
		return "", streamError(ctx, callID, model, baseURL, err)
	}
	return version, nil
}

// completionAccumulator joins a completions stream.
type completionAccumulator struct {
	ids      []int64
	lps      []float64
	text     strings.Builder
	finish   string
	finished bool
}

// add takes one chunk; a chunk with text but no token ids means the
// endpoint does not report them, and no continuation can be trusted.
func (c *completionAccumulator) add(ch completionChunkWire) (tokenPiece, error) {
	var piece tokenPiece
	for i, choice := range ch.Choices {
		if i > 0 {
			break
		}
		ids := choice.TokenIDs
		if ids == nil && choice.Logprobs != nil {
			ids = idsOfTokens(choice.Logprobs.Tokens)
		}
		if ids == nil && choice.Text != "" {
			return tokenPiece{}, fmt.Errorf("%w: its completions route reports no token ids (vLLM needs return_token_ids, 0.10.2 or later)", errNoTokenRoute)
		}
		piece = tokenPiece{ids: ids, text: choice.Text, textKnown: true}
		if choice.Logprobs != nil && len(choice.Logprobs.TokenLogprobs) == len(ids) {
			for _, lp := range choice.Logprobs.TokenLogprobs {
				v := 0.0
				if lp != nil {
					v = *lp
				}
				piece.lps = append(piece.lps, v)
			}
		}
		c.ids = append(c.ids, ids...)
		c.lps = append(c.lps, piece.lps...)
		c.text.WriteString(choice.Text)
		if choice.FinishReason != nil && *choice.FinishReason != "" {
			c.finish, c.finished = *choice.FinishReason, true
		}
	}
	return piece, nil
}

// idsOfTokens reads "token_id:N" tokens; nil unless every one is such.
func idsOfTokens(toks []string) []int64 {
	out := make([]int64, 0, len(toks))
	for _, t := range toks {
		id, ok := strings.CutPrefix(t, tokenIDPrefix)
		if !ok {
			return nil
		}
		n, err := strconv.ParseInt(id, 10, 64)
		if err != nil {
			return nil
		}
		out = append(out, n)
	}
	return out
}
