package model

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/openai/openai-go/v3"

	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// PolicyVersionHeader is the response header an endpoint may report the
// policy version in; a top-level body field "policy_version" works too.
const PolicyVersionHeader = "X-Policy-Version"

// Sources of a recorded policy version.
const (
	VersionFromEndpoint = "endpoint"
	VersionFromInput    = "input"
)

// tokenIDPrefix marks a logprob token in vLLM's id mode
// (return_tokens_as_token_ids): "token_id:1234".
const tokenIDPrefix = "token_id:"

// modelAnswer is the endpoint's answer: the parsed completion (its raw JSON
// still holds the fields openai-go does not know) and the response headers.
type modelAnswer struct {
	completion *openai.ChatCompletion
	header     http.Header
}

// vllmFields are the token fields of a vLLM chat completion with
// return_token_ids and logprobs: prompt_token_ids at the top level,
// token_ids and logprobs.content[] on the choice. SGLang puts
// prompt_token_ids on the choice; it is read as a fallback.
type vllmFields struct {
	PromptTokenIDs []int64 `json:"prompt_token_ids"`
	PolicyVersion  string  `json:"policy_version"`
	Choices        []struct {
		PromptTokenIDs []int64 `json:"prompt_token_ids"`
		TokenIDs       []int64 `json:"token_ids"`
		Logprobs       *struct {
			Content []struct {
				Token   string  `json:"token"`
				Logprob float64 `json:"logprob"`
			} `json:"content"`
		} `json:"logprobs"`
		Message struct {
			ReasoningContent string `json:"reasoning_content"`
			Reasoning        string `json:"reasoning"`
		} `json:"message"`
	} `json:"choices"`
}

// tokens are what an answer reports of its tokens.
type tokens struct {
	present          bool
	prompt, output   []int64
	logprobs         []float64
	reasoning, model string
	version          string
}

// parseTokens reads the token fields of the first choice. Ids come from
// choices[0].token_ids, else from logprobs tokens in "token_id:N" form; a
// response without prompt ids or output ids reports no tokens. Log-probs
// that do not pair one-to-one with the ids are dropped rather than
// misaligned.
func parseTokens(ans modelAnswer) tokens {
	var f vllmFields
	out := tokens{model: ans.completion.Model}
	if err := json.Unmarshal([]byte(ans.completion.RawJSON()), &f); err != nil || len(f.Choices) == 0 {
		return out
	}
	c := f.Choices[0]
	out.reasoning = c.Message.ReasoningContent
	if out.reasoning == "" {
		out.reasoning = c.Message.Reasoning
	}
	out.version = strings.TrimSpace(ans.header.Get(PolicyVersionHeader))
	if out.version == "" {
		out.version = f.PolicyVersion
	}
	var lps []float64
	var idsFromLogprobs []int64
	if c.Logprobs != nil {
		for _, lp := range c.Logprobs.Content {
			lps = append(lps, lp.Logprob)
			if id, ok := strings.CutPrefix(lp.Token, tokenIDPrefix); ok {
				if n, err := strconv.ParseInt(id, 10, 64); err == nil {
					idsFromLogprobs = append(idsFromLogprobs, n)
				}
			}
		}
	}
	out.prompt = f.PromptTokenIDs
	if out.prompt == nil {
		out.prompt = c.PromptTokenIDs
	}
	out.output = c.TokenIDs
	if out.output == nil && c.Logprobs != nil && len(idsFromLogprobs) == len(c.Logprobs.Content) {
		out.output = idsFromLogprobs
	}
	out.present = out.prompt != nil && out.output != nil
	if out.present && len(lps) == len(out.output) {
		out.logprobs = lps
	}
	return out
}

// recordGeneration stores the call's generation record when there is one
// to keep (token capture asked for, or a policy version known) and returns
// its summary; nil means no record, and the answer item stays as before.
// The prefix check runs against the parent's record, found on the last
// assistant item of the conversation: that item is the parent call's answer
// in this attempt or, after a restore, in the saved one. How a cut call was
// recovered goes into the summary (and so the lineage), never the record:
// a recovered call writes the record an uninterrupted one does.
func recordGeneration(ctx context.Context, store *transcriptstore.Store, in rollout.CallModelInput, items []transcript.Item, ans generated) (*rollout.GenerationRef, error) {
	tok := ans.tok
	capture := in.Sampling != nil && in.Sampling.CaptureTokens
	g := transcript.Generation{Tokens: transcript.TokensNotRequested, Model: tok.model, FinishReason: ans.finish, ReasoningContent: tok.reasoning}
	g.PolicyVersion, g.PolicyVersionSource = tok.version, VersionFromEndpoint
	if g.PolicyVersion == "" && in.Policy.Version != "" {
		g.PolicyVersion, g.PolicyVersionSource = in.Policy.Version, VersionFromInput
	}
	if g.PolicyVersion == "" {
		g.PolicyVersionSource = ""
		if !capture {
			return nil, nil
		}
	}
	g.Sampling = effectiveSampling(in)
	if capture {
		g.Tokens = transcript.TokensAbsent
	}
	if capture && tok.present {
		g.Tokens = transcript.TokensPresent
		g.PromptTokenIDs, g.GenerationTokenIDs, g.GenerationLogProbs = tok.prompt, tok.output, tok.logprobs
		g.PromptDigest, g.SequenceDigest = transcript.TokenDigest(tok.prompt), transcript.TokenDigest(tok.prompt, tok.output)
		g.PolicyVersionSpans = ans.spans
		if in.Parent != "" {
			parent, err := parentGeneration(ctx, store, items)
			if err != nil {
				return nil, err
			}
			ok, why := transcript.CheckPrefix(parent, tok.prompt)
			g.PrefixBreak, g.PrefixBreakReason = !ok, why
		}
	}
	d, err := store.PutGeneration(ctx, g)
	if err != nil {
		return nil, err
	}
	return &rollout.GenerationRef{
		Record: d, Tokens: g.Tokens, PromptTokens: len(g.PromptTokenIDs), GenerationTokens: len(g.GenerationTokenIDs),
		PrefixBreak: g.PrefixBreak, PrefixBreakReason: g.PrefixBreakReason, PolicyVersion: g.PolicyVersion,
		GenerationRecovery: ans.recovery,
	}, nil
}

// parentGeneration is the generation record of the last assistant item, or
// nil when that item has none.
func parentGeneration(ctx context.Context, store *transcriptstore.Store, items []transcript.Item) (*transcript.Generation, error) {
	for i := len(items) - 1; i >= 0; i-- {
		if items[i].Role != "assistant" {
			continue
		}
		if items[i].Generation == "" {
			return nil, nil
		}
		g, err := store.Generation(ctx, items[i].Generation)
		if err != nil {
			return nil, err
		}
		return &g, nil
	}
	return nil, nil
}

// effectiveSampling is the sampling the request carried, the seed resolved
// (Sampling.Seed, else the rollout's seed), as JSON.
func effectiveSampling(in rollout.CallModelInput) json.RawMessage {
	var s rollout.Sampling
	if in.Sampling != nil {
		s = *in.Sampling
	}
	if s.Seed == nil {
		seed := in.Seed
		s.Seed = &seed
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil // extra_body was validated as JSON; cannot happen
	}
	return b
}
