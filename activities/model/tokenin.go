package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
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
// vLLM's default for a completions request is 16 tokens).
func continuationBody(in rollout.CallModelInput, p transcript.Prefix, skipSpecial bool) ([]byte, int64, error) {
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
	var maxTokens any
	left := int64(-1)
	if s.MaxTokens != nil {
		left = max(*s.MaxTokens-int64(len(p.TokenIDs)), 0)
		maxTokens = left
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
	return b, left, err
}

// continueFrom continues the generation p through the completions route
// and reads the whole generation back into an answer.
func (a *Activities) continueFrom(ctx context.Context, w *prefixWriter, in rollout.CallModelInput, callID string, endpoint destination.Target, p transcript.Prefix) (generated, error) {
	parser := parserOf(in.Policy.ToolParser)
	body, left, err := continuationBody(in, p, parser.skipSpecialTokens())
	if err != nil {
		return generated{}, fmt.Errorf("%s: encode continuation: %w", callID, err)
	}
	acc := completionAccumulator{finish: "length"}
	version := in.Policy.Version
	if left != 0 {
		if version, err = a.streamContinuation(ctx, w, &acc, callID, endpoint, in.Policy.Model, body); err != nil {
			return generated{}, err
		}
		if version == "" {
			version = in.Policy.Version
		}
	}
	a.setRoute(endpoint.URL, in.Policy.Model, routeWorks)
	parsed, err := parser.parse(p.Text + acc.text.String())
	if err != nil {
		return generated{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("%s: the continued generation cannot be read with tool parser %q: %v", callID, in.Policy.ToolParser, err), rollout.ErrModelRequest, nil)
	}
	g := generated{content: parsed.content, reasoning: parsed.reasoning, calls: parsed.calls, finish: acc.finish}
	if len(g.calls) > 0 && g.finish == "stop" {
		g.finish = "tool_calls" // as the chat route reports it
	}
	output := append(append([]int64{}, p.TokenIDs...), acc.ids...)
	lps := append(append([]float64{}, p.LogProbs...), acc.lps...)
	segments := append(append([]transcript.PrefixSegment{}, p.Segments...),
		transcript.PrefixSegment{Start: len(p.TokenIDs), Segment: w.segment, PolicyVersion: version})
	spans := transcript.VersionSpans(segments)
	g.tok = tokens{present: true, prompt: p.PromptTokenIDs, output: output, reasoning: g.reasoning, model: p.Model, version: spans[0].PolicyVersion}
	if len(lps) == len(output) {
		g.tok.logprobs = lps
	}
	if len(spans) > 1 {
		g.spans = spans
	}
	g.usage = usageOf(nil, len(p.PromptTokenIDs), len(output))
	resumed := transcript.Prefix{Segments: segments}
	g.recovery = rollout.GenerationRecovery{ResumedAt: resumed.ResumedAt(), TokensRecovered: len(p.TokenIDs)}
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
