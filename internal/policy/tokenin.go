package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"unicode/utf8"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/internal/sleep"
)

// The token-in routes, in vLLM's shapes: the completions endpoint with a
// token-id prompt (vllm/entrypoints/openai/completion/protocol.py) and the
// tokens-in/tokens-out generate route (vllm/entrypoints/serve/disagg/
// protocol.py, GenerateRequest). A client continues a cut generation through
// them: it sends the prompt's ids followed by the tokens already generated,
// and the server goes on from there exactly as the first request would have.
const (
	CompletionsPath = BasePath + "/completions"
	GeneratePath    = "/inference/v1/generate"

	// defaultCompletionMaxTokens is vLLM's max_tokens of a completions
	// request that leaves it out (null means "up to the context length").
	defaultCompletionMaxTokens = 16
)

// completionRequest is a completions request; only a token-id prompt is
// served (this server's vocabulary is its toy tokenizer's).
type completionRequest struct {
	Model  string          `json:"model"`
	Prompt json.RawMessage `json:"prompt"`
	// MaxTokens stays raw: vLLM tells an absent field (16) from null (no
	// limit but the context).
	MaxTokens              json.RawMessage `json:"max_tokens"`
	Seed                   *int64          `json:"seed"`
	N                      *int            `json:"n"`
	Echo                   bool            `json:"echo"`
	Stream                 bool            `json:"stream"`
	StreamOptions          *streamOptions  `json:"stream_options"`
	Logprobs               *int            `json:"logprobs"`
	ReturnTokenIDs         bool            `json:"return_token_ids"`
	ReturnTokensAsTokenIDs bool            `json:"return_tokens_as_token_ids"`
	SkipSpecialTokens      *bool           `json:"skip_special_tokens"`
}

// completionChoice is a choice of a completions answer or chunk: vLLM puts
// prompt_token_ids on the choice here (in the first chunk when streaming).
type completionChoice struct {
	Index          int             `json:"index"`
	Text           string          `json:"text"`
	Logprobs       *legacyLogprobs `json:"logprobs"`
	FinishReason   *string         `json:"finish_reason"`
	StopReason     any             `json:"stop_reason"`
	TokenIDs       []int64         `json:"token_ids,omitempty"`
	PromptTokenIDs []int64         `json:"prompt_token_ids,omitempty"`
}

// legacyLogprobs are the completions API's parallel arrays.
type legacyLogprobs struct {
	TextOffset    []int                `json:"text_offset"`
	TokenLogprobs []float64            `json:"token_logprobs"`
	Tokens        []string             `json:"tokens"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
}

type completionBody struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   *chatUsage         `json:"usage,omitempty"`
}

// generateRequest is the generate route's GenerateRequest.
type generateRequest struct {
	Model          string         `json:"model"`
	TokenIDs       []int64        `json:"token_ids"`
	SamplingParams samplingParams `json:"sampling_params"`
	Stream         bool           `json:"stream"`
	StreamOptions  *streamOptions `json:"stream_options"`
}

// samplingParams are the fields of vLLM's SamplingParams this server reads.
type samplingParams struct {
	MaxTokens         *int   `json:"max_tokens"`
	Seed              *int64 `json:"seed"`
	N                 *int   `json:"n"`
	Logprobs          *int   `json:"logprobs"`
	SkipSpecialTokens *bool  `json:"skip_special_tokens"`
}

type generateChoice struct {
	Index        int             `json:"index"`
	Logprobs     *choiceLogprobs `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
	TokenIDs     []int64         `json:"token_ids"`
}

type generateBody struct {
	RequestID string           `json:"request_id"`
	Choices   []generateChoice `json:"choices"`
	Usage     *chatUsage       `json:"usage,omitempty"`
}

// continuation is a token-in request's answer: the scripted answer of the
// chat in its prompt, and what is left of it after the prompt's prefix.
type continuation struct {
	a      scripted
	prompt []int64 // the whole token-id prompt, prefix included
	prefix int     // generated tokens the prompt already holds
	rest   []int64 // the tokens to send
	finish string
}

// continueTokens answers a token-id prompt: the scripted answer of the chat
// it renders, checked to begin with the generated prefix that follows the
// chat, cut to maxTokens (< 0: no limit).
func (s *server) continueTokens(model string, ids []int64, seed *int64, maxTokens int) (continuation, int, string, error) {
	if len(ids) == 0 {
		return continuation{}, http.StatusBadRequest, "invalid_prompt", errors.New("prompt must be a non-empty list of token ids")
	}
	pol, err := s.cfg.Policies.Lookup(model)
	if err != nil {
		return continuation{}, http.StatusNotFound, "model_not_found", err
	}
	tp, err := parseTokenPrompt(ids)
	if err != nil {
		return continuation{}, http.StatusBadRequest, "invalid_prompt", err
	}
	preq := tokenPolicyRequest(tp, seed, s.cfg.Imperfection)
	a, _, err := s.answerOf(pol, preq, tp.template)
	if err != nil {
		return continuation{}, http.StatusBadRequest, "policy_error", fmt.Errorf("model %q: %w", model, err)
	}
	if i := divergence(a.output, tp.prefix); i >= 0 {
		return continuation{}, http.StatusBadRequest, "invalid_prompt", fmt.Errorf(
			"the prompt's %d generated tokens do not continue the scripted answer (%d tokens): they differ at generated token %d", len(tp.prefix), len(a.output), i)
	}
	c := continuation{a: a, prompt: ids, prefix: len(tp.prefix), rest: a.output[len(tp.prefix):], finish: a.finish}
	if maxTokens >= 0 && len(c.rest) > maxTokens {
		c.rest, c.finish = c.rest[:maxTokens], "length"
	}
	return c, 0, "", nil
}

func tokenPolicyRequest(tp tokenPrompt, seed *int64, imperfection float64) (preq envs.PolicyRequest) {
	preq.Messages, preq.Tools, preq.Imperfection = tp.messages, tp.tools, imperfection
	if seed != nil {
		preq.Seed = *seed
	}
	return preq
}

// divergence is the first index where prefix is not output's beginning, or
// -1 when it is.
func divergence(output, prefix []int64) int {
	for i, id := range prefix {
		if i >= len(output) || output[i] != id {
			return i
		}
	}
	return -1
}

// textPieces are the texts of tokens as a stream sends them: special
// tokens dropped when skip, bytes held back until they are whole UTF-8.
func textPieces(ids []int64, skip bool) []string {
	out := make([]string, len(ids))
	var pending []byte
	for i, id := range ids {
		if skip && id >= firstSpecialID {
			continue
		}
		pending = append(pending, TokenText(id)...)
		if utf8.Valid(pending) {
			out[i] = string(pending)
			pending = pending[:0]
		}
	}
	if len(pending) > 0 && len(out) > 0 {
		out[len(out)-1] += string(pending)
	}
	return out
}

// completions serves POST /v1/completions with a token-id prompt.
func (s *server) completions(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	if err := decodeJSON(http.MaxBytesReader(w, r.Body, maxRequestBytes), &req); err != nil {
		s.fail(w, http.StatusBadRequest, "invalid_request_error", "invalid_json", err.Error())
		return
	}
	ids, maxTokens, err := req.check()
	if err != nil {
		s.fail(w, http.StatusBadRequest, "invalid_request_error", "unsupported_value", err.Error())
		return
	}
	c, status, code, err := s.continueTokens(req.Model, ids, req.Seed, maxTokens)
	if err != nil {
		s.fail(w, status, "invalid_request_error", code, err.Error())
		return
	}
	s.serveTokens(w, r, "completions", req.Model, c, tokenOptions{
		stream: req.Stream, usage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage,
		ids: req.ReturnTokenIDs, logprobs: req.Logprobs != nil, asIDs: req.ReturnTokensAsTokenIDs,
		skip: req.SkipSpecialTokens == nil || *req.SkipSpecialTokens,
	}, completionsWire{})
}

// check reads the prompt's ids and the token limit (-1: none), refusing
// what the server does not serve.
func (req completionRequest) check() ([]int64, int, error) {
	var ids []int64
	if err := json.Unmarshal(req.Prompt, &ids); err != nil {
		return nil, 0, errors.New("prompt must be a list of token ids: this server has no text tokenizer route (use the chat route for text)")
	}
	switch {
	case req.N != nil && *req.N != 1:
		return nil, 0, fmt.Errorf("n=%d is not supported: a scripted policy gives exactly one choice", *req.N)
	case req.Echo:
		return nil, 0, errors.New("echo is not supported")
	}
	maxTokens := defaultCompletionMaxTokens
	if len(req.MaxTokens) > 0 {
		if string(req.MaxTokens) == "null" {
			maxTokens = -1
		} else if err := json.Unmarshal(req.MaxTokens, &maxTokens); err != nil || maxTokens < 0 {
			return nil, 0, fmt.Errorf("max_tokens %s: want a non-negative integer or null", req.MaxTokens)
		}
	}
	return ids, maxTokens, nil
}

// generate serves POST /inference/v1/generate.
func (s *server) generate(w http.ResponseWriter, r *http.Request) {
	var req generateRequest
	if err := decodeJSON(http.MaxBytesReader(w, r.Body, maxRequestBytes), &req); err != nil {
		s.fail(w, http.StatusBadRequest, "invalid_request_error", "invalid_json", err.Error())
		return
	}
	sp := req.SamplingParams
	if sp.N != nil && *sp.N != 1 {
		s.fail(w, http.StatusBadRequest, "invalid_request_error", "unsupported_value", fmt.Sprintf("sampling_params.n=%d is not supported", *sp.N))
		return
	}
	maxTokens := -1
	if sp.MaxTokens != nil {
		maxTokens = *sp.MaxTokens
	}
	c, status, code, err := s.continueTokens(req.Model, req.TokenIDs, sp.Seed, maxTokens)
	if err != nil {
		s.fail(w, status, "invalid_request_error", code, err.Error())
		return
	}
	s.serveTokens(w, r, "generate", req.Model, c, tokenOptions{
		stream: req.Stream, usage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage,
		ids: true, logprobs: sp.Logprobs != nil, skip: sp.SkipSpecialTokens == nil || *sp.SkipSpecialTokens,
	}, generateWire{})
}

// tokenOptions are what a token-in request asked for.
type tokenOptions struct {
	stream, usage, ids, logprobs, asIDs, skip bool
}

// tokenWire shapes a token-in route's answer: one body (whole, or a chunk
// of tokens from..from+len(ids)), and the usage chunk.
type tokenWire interface {
	body(c continuation, o tokenOptions, model string, from int, ids []int64, texts []string, finish *string, first bool) any
	usage(c continuation, model string, u chatUsage) any
}

// serveTokens sends c: whole after its tokens are due, or streamed one
// token per chunk.
func (s *server) serveTokens(w http.ResponseWriter, r *http.Request, route, model string, c continuation, o tokenOptions, wire tokenWire) {
	delay, f := s.draw()
	if f == faultRateLimited {
		s.writeRetryable(w, http.StatusTooManyRequests, "requests", "rate_limit_exceeded", "rate limit reached (injected)")
		return
	}
	if err := sleep.For(r.Context(), delay); err != nil {
		return
	}
	if f == faultUnavailable {
		s.writeRetryable(w, http.StatusServiceUnavailable, "server_error", "service_unavailable", "policy server overloaded (injected)")
		return
	}
	if s.cfg.PolicyVersion != "" {
		w.Header().Set(PolicyVersionHeader, s.cfg.PolicyVersion)
	}
	rec := s.counts.begin(route, model, c.a.key(), c.prefix)
	u := chatUsage{PromptTokens: len(c.prompt), CompletionTokens: len(c.rest), TotalTokens: len(c.prompt) + len(c.rest)}
	texts := textPieces(c.rest, o.skip)
	s.log.Infow("token-in generation", "route", route, "model", model, "prefix", c.prefix, "tokens", len(c.rest), "stream", o.stream)
	if !o.stream {
		if err := s.newPacer().waitAll(r.Context(), len(c.rest)); err != nil {
			return
		}
		s.counts.sent(rec, len(c.rest))
		s.counts.finish(rec)
		body := wire.body(c, o, model, 0, c.rest, texts, &c.finish, true)
		if b, ok := body.(completionBody); ok {
			b.Usage = &u
			body = b
		} else if b, ok := body.(generateBody); ok {
			b.Usage = &u
			body = b
		}
		writeJSON(w, http.StatusOK, body)
		return
	}
	if err := s.streamTokens(r.Context(), newSSE(w), model, c, o, wire, texts, rec, u); err != nil {
		s.log.Infow("token-in stream ended early", "route", route, "model", model, "sent", rec.Generated, "error", err)
	}
}

func (s *server) streamTokens(ctx context.Context, e *sse, model string, c continuation, o tokenOptions, wire tokenWire, texts []string, rec *RequestRecord, u chatUsage) error {
	p := s.newPacer()
	for i := range c.rest {
		if err := p.wait(ctx, i); err != nil {
			return err
		}
		var finish *string
		if i == len(c.rest)-1 {
			finish = &c.finish
		}
		s.counts.sent(rec, 1) // before the send, as in streamChat
		if err := e.send(wire.body(c, o, model, i, c.rest[i:i+1], texts[i:i+1], finish, i == 0)); err != nil {
			return err
		}
	}
	if len(c.rest) == 0 {
		// Nothing left to generate: one chunk says the answer is finished.
		if err := e.send(wire.body(c, o, model, 0, nil, nil, &c.finish, true)); err != nil {
			return err
		}
	}
	s.counts.finish(rec)
	if o.usage {
		if err := e.send(wire.usage(c, model, u)); err != nil {
			return err
		}
	}
	return e.done()
}

// completionsWire shapes the completions route's answers.
type completionsWire struct{}

func (completionsWire) body(c continuation, o tokenOptions, model string, from int, ids []int64, texts []string, finish *string, first bool) any {
	ch := completionChoice{FinishReason: finish}
	offset := 0
	for i, id := range ids {
		ch.Text += texts[i]
		if o.logprobs {
			if ch.Logprobs == nil {
				ch.Logprobs = &legacyLogprobs{TextOffset: []int{}, TokenLogprobs: []float64{}, Tokens: []string{}, TopLogprobs: []map[string]float64{}}
			}
			ch.Logprobs.Tokens = append(ch.Logprobs.Tokens, idToken(id, o.asIDs))
			ch.Logprobs.TokenLogprobs = append(ch.Logprobs.TokenLogprobs, TokenLogprob(len(c.prompt)+from+i, id))
			ch.Logprobs.TextOffset = append(ch.Logprobs.TextOffset, offset)
			ch.Logprobs.TopLogprobs = append(ch.Logprobs.TopLogprobs, nil)
			offset += len(texts[i])
		}
	}
	if o.ids {
		ch.TokenIDs = append([]int64{}, ids...)
		if first {
			ch.PromptTokenIDs = c.prompt
		}
	}
	return completionBody{ID: c.id("cmpl-"), Object: "text_completion", Model: model, Choices: []completionChoice{ch}}
}

func (completionsWire) usage(c continuation, model string, u chatUsage) any {
	return completionBody{ID: c.id("cmpl-"), Object: "text_completion", Model: model, Choices: []completionChoice{}, Usage: &u}
}

// generateWire shapes the generate route's answers.
type generateWire struct{}

func (generateWire) body(c continuation, o tokenOptions, _ string, from int, ids []int64, _ []string, finish *string, _ bool) any {
	ch := generateChoice{FinishReason: finish, TokenIDs: append([]int64{}, ids...)}
	if o.logprobs {
		ch.Logprobs = &choiceLogprobs{Content: []tokenLogprob{}}
		for i, id := range ids {
			one := logprobsOf([]int64{id}, len(c.prompt)+from+i, false)
			ch.Logprobs.Content = append(ch.Logprobs.Content, one.Content...)
		}
	}
	return generateBody{RequestID: c.id("generate-tokens-"), Choices: []generateChoice{ch}}
}

func (generateWire) usage(c continuation, _ string, u chatUsage) any {
	return generateBody{RequestID: c.id("generate-tokens-"), Choices: []generateChoice{}, Usage: &u}
}

// id is a deterministic id of the answer with prefix.
func (c continuation) id(prefix string) string { return prefix + c.a.key()[len("sha256:"):][:24] }
