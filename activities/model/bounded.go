package model

import (
	"context"
	"errors"
	"fmt"

	"github.com/openai/openai-go/v3"
	"go.temporal.io/sdk/activity"

	"github.com/turnstile-rl/turnstile/internal/destination"
	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// Bounded generation (Activities.PrefixBound): a call that can continue a
// prefix generates in chunks of at most PrefixTokens tokens, each request
// starting from a durable prefix, so the endpoint never generates more
// than one chunk beyond what a retry finds. The first chunk is a chat
// request with max_tokens; a chunk that ended at its own limit is made
// durable (chunk, index, heartbeat) and the next one continues it through
// the token-in route, until the model stops or the call's own max_tokens
// is reached. The answer is the one an unchunked call gets: the chunks'
// tokens joined, read back by the call's tool parser.
const (
	// EnvModelPrefixBound is the worker setting of Activities.PrefixBound.
	EnvModelPrefixBound = "TURNSTILE_MODEL_PREFIX_BOUND"
	// PrefixBoundOff streams each answer in one request (the default).
	PrefixBoundOff = "off"
	// PrefixBoundStrict generates in chunks of at most PrefixTokens.
	PrefixBoundStrict = "strict"
)

// ParsePrefixBound reads a PrefixBound setting: "off" or "strict" (blank
// is off).
func ParsePrefixBound(v string) (string, error) {
	switch v {
	case "", PrefixBoundOff:
		return PrefixBoundOff, nil
	case PrefixBoundStrict:
		return PrefixBoundStrict, nil
	}
	return "", fmt.Errorf("%s=%q: want %q or %q", EnvModelPrefixBound, v, PrefixBoundOff, PrefixBoundStrict)
}

// finishLength is the finish reason of a request cut at its max_tokens.
const finishLength = "length"

// bounded says whether this call generates in chunks: strict mode, and a
// call that can continue a prefix (a tool parser, continue not never, a
// token-in route not known to be missing).
func (a *Activities) bounded(in rollout.CallModelInput, baseURL string) bool {
	return a.PrefixBound == PrefixBoundStrict && a.cannotContinue(in, baseURL) == ""
}

// budgetOf is the call's own max_tokens, or -1 when it sets none.
func budgetOf(in rollout.CallModelInput) int64 {
	if in.Sampling != nil && in.Sampling.MaxTokens != nil {
		return *in.Sampling.MaxTokens
	}
	return -1
}

// chunkLimit is how many tokens the next request may generate in bounded
// mode: PrefixTokens less what the writer holds that is not durable yet
// (nothing, right after a flush), at least 1.
func (a *Activities) chunkLimit(w *prefixWriter) int64 {
	return int64(max(a.prefixTokens()-w.undurable(), 1))
}

// startBounded is a fresh bounded call: a first chat chunk of at most
// chunkLimit tokens; when it ended at that limit, its prefix is made
// durable and the generation goes on from it (continueFrom). An endpoint
// that turns out unable to continue makes the call start over in one
// request, the chunk counted as regenerated.
func (a *Activities) startBounded(ctx context.Context, w *prefixWriter, in rollout.CallModelInput, callID string, endpoint destination.Target, params openai.ChatCompletionNewParams) (generated, error) {
	limit := a.chunkLimit(w)
	if b := budgetOf(in); b >= 0 && b <= limit {
		// The call's own limit is within one chunk.
		return a.streamChat(ctx, w, callID, endpoint, params)
	}
	first := params
	first.MaxTokens = openai.Int(limit)
	g, err := a.streamChat(ctx, w, callID, endpoint, first)
	if err != nil || g.finish != finishLength || (g.tok.present && !cutAtLimit(g.finish, len(g.tok.output), limit)) {
		return g, err // the model stopped, or the endpoint's own limit did
	}
	if err := w.flush(ctx, true); err != nil {
		return generated{}, err
	}
	ref := w.ref()
	if ref == nil || ref.Tokens != len(g.tok.output) {
		// The endpoint's stream keeps no prefix (no prompt ids, no token
		// text): a chunk cannot be continued.
		return a.restartUnbounded(ctx, w, callID, endpoint, params, transcript.Prefix{TokenIDs: g.tok.output}, ref, "the first chunk left no durable prefix")
	}
	p, err := loadPrefix(ctx, w.store, w.in, *ref)
	if err != nil {
		return generated{}, err
	}
	g, err = a.continueFrom(ctx, w, in, callID, endpoint, p, 0)
	if errors.Is(err, errNoTokenRoute) {
		return a.restartUnbounded(ctx, w, callID, endpoint, params, p, ref, err.Error())
	}
	return g, err
}

// restartUnbounded starts the call over in one request after its first
// chunk could not be continued; the chunk's tokens count as regenerated.
func (a *Activities) restartUnbounded(ctx context.Context, w *prefixWriter, callID string, endpoint destination.Target, params openai.ChatCompletionNewParams, p transcript.Prefix, ref *rollout.ModelPrefix, why string) (generated, error) {
	activity.GetLogger(ctx).Info("bounded generation cannot continue its first chunk; starting over", "call", callID, "why", why)
	old := rollout.ModelPrefix{}
	if ref != nil {
		old = *ref
	}
	w.restart(p, old)
	return a.streamChat(ctx, w, callID, endpoint, params)
}

// cutAtLimit says a request generated all it was allowed to and stopped
// there: the model has not finished, go on. A "length" finish with fewer
// tokens is the endpoint's own limit (the context): the answer ends.
func cutAtLimit(finish string, generated int, limit int64) bool {
	return finish == finishLength && int64(generated) >= limit
}
