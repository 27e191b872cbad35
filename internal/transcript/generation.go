package transcript

import (
	"encoding/json"
	"fmt"
)

// Token capture states of a Generation.
const (
	// TokensPresent: the endpoint reported prompt and generated token ids.
	TokensPresent = "present"
	// TokensAbsent: token capture was asked for and the endpoint reported
	// none (not a vLLM-compatible server, or an old one); the call cannot be
	// trained on token-exactly.
	TokensAbsent = "absent"
	// TokensNotRequested: capture was off; the record exists for the policy
	// version alone.
	TokensNotRequested = "not_requested"
)

// Generation is what one model call produced beside its message, in the
// field names NeMo Gym uses per assistant message (prompt_token_ids,
// generation_token_ids, generation_log_probs). It holds nothing that depends
// on the attempt (no call id, no time), so a call redone after a crash or a
// restore writes the same record and the conversation keeps its head.
type Generation struct {
	Tokens             string    `json:"tokens"` // TokensPresent, TokensAbsent or TokensNotRequested
	PromptTokenIDs     []int64   `json:"prompt_token_ids,omitempty"`
	GenerationTokenIDs []int64   `json:"generation_token_ids,omitempty"`
	GenerationLogProbs []float64 `json:"generation_log_probs,omitempty"`
	// PromptDigest is TokenDigest(prompt ids); SequenceDigest that of
	// prompt + generation, the prefix the next call must continue.
	PromptDigest   Digest `json:"prompt_digest,omitempty"`
	SequenceDigest Digest `json:"sequence_digest,omitempty"`
	// PrefixBreak flags a prompt that does not start with the parent call's
	// prompt + generation (re-templated or rewritten history), or whose
	// parent has no tokens to check against; PrefixBreakReason says which.
	PrefixBreak       bool   `json:"prefix_break,omitempty"`
	PrefixBreakReason string `json:"prefix_break_reason,omitempty"`
	FinishReason      string `json:"finish_reason,omitempty"`
	// ReasoningContent is the reasoning text a reasoning parser split off
	// (vLLM's reasoning_content, or reasoning).
	ReasoningContent string `json:"reasoning_content,omitempty"`
	// Model is the model name the endpoint answered with.
	Model string `json:"model,omitempty"`
	// PolicyVersion is the version the call was sampled from;
	// PolicyVersionSource is "endpoint" (reported by the server) or "input"
	// (set by the trainer in the rollout's policy).
	PolicyVersion       string `json:"policy_version,omitempty"`
	PolicyVersionSource string `json:"policy_version_source,omitempty"`
	// PolicyVersionSpans are set only when more than one version sampled
	// the generation (the weights changed between a durable prefix and its
	// continuation): the first token each version sampled. PolicyVersion
	// is then the first span's, the version at the call's start. A
	// generation one version sampled has none, however many requests it
	// took, so a recovered call writes the record an uninterrupted one does.
	PolicyVersionSpans []VersionSpan `json:"policy_version_spans,omitempty"`
	// Sampling are the sampling parameters the request carried, as JSON.
	Sampling json.RawMessage `json:"sampling,omitempty"`
}

// Validate checks the record's internal consistency: one log-prob per
// generated token (when log-probs are given) and digests that match.
func (g *Generation) Validate() error {
	switch g.Tokens {
	case TokensPresent:
	case TokensAbsent, TokensNotRequested:
		if len(g.PromptTokenIDs)+len(g.GenerationTokenIDs)+len(g.GenerationLogProbs) > 0 {
			return fmt.Errorf("transcript: generation says tokens %s but carries some", g.Tokens)
		}
		return nil
	default:
		return fmt.Errorf("transcript: generation tokens state %q is unknown", g.Tokens)
	}
	if n := len(g.GenerationLogProbs); n > 0 && n != len(g.GenerationTokenIDs) {
		return fmt.Errorf("transcript: %d log-probs for %d generated tokens", n, len(g.GenerationTokenIDs))
	}
	if g.PromptDigest != TokenDigest(g.PromptTokenIDs) || g.SequenceDigest != TokenDigest(g.PromptTokenIDs, g.GenerationTokenIDs) {
		return fmt.Errorf("transcript: generation digests do not match its token ids")
	}
	return g.validateSpans()
}

// validateSpans checks the version spans: none, or two or more starting at
// token 0 and going up inside the generation, each naming another version
// than the one before.
func (g *Generation) validateSpans() error {
	spans := g.PolicyVersionSpans
	if len(spans) == 0 {
		return nil
	}
	if len(spans) == 1 {
		return fmt.Errorf("transcript: one policy version span (a generation one version sampled has none)")
	}
	for i, s := range spans {
		switch {
		case i == 0 && s.Start != 0:
			return fmt.Errorf("transcript: the first policy version span starts at token %d, not 0", s.Start)
		case i > 0 && s.Start <= spans[i-1].Start:
			return fmt.Errorf("transcript: policy version span %d starts at token %d, not after %d", i, s.Start, spans[i-1].Start)
		case i > 0 && s.PolicyVersion == spans[i-1].PolicyVersion:
			return fmt.Errorf("transcript: policy version spans %d and %d both name %q", i-1, i, s.PolicyVersion)
		case s.Start >= len(g.GenerationTokenIDs):
			return fmt.Errorf("transcript: policy version span %d starts at token %d of %d", i, s.Start, len(g.GenerationTokenIDs))
		}
	}
	return nil
}

// TokenDigest is the digest of the concatenated token id sequences: the
// SHA-256 of their JSON array, e.g. [1,2,3]. Equal sequences have equal
// digests however they were split.
func TokenDigest(seqs ...[]int64) Digest {
	all := []int64{}
	for _, s := range seqs {
		all = append(all, s...)
	}
	b, err := json.Marshal(all)
	if err != nil {
		panic(fmt.Sprintf("transcript: encode token ids: %v", err)) // ints cannot fail
	}
	return DigestOf(b)
}

// CheckPrefix reports whether a call whose prompt is prompt continues its
// parent's token sequence: the prompt must start with the parent's prompt +
// generation. It is never silently accepted when it cannot be checked: a
// parent without tokens is a break too, since a trainer cannot join the two
// calls. parent is nil when the parent left no record at all.
func CheckPrefix(parent *Generation, prompt []int64) (ok bool, reason string) {
	switch {
	case parent == nil:
		return false, "parent call has no generation record"
	case parent.Tokens != TokensPresent:
		return false, fmt.Sprintf("parent call has no token ids (tokens %s)", parent.Tokens)
	}
	want := len(parent.PromptTokenIDs) + len(parent.GenerationTokenIDs)
	if len(prompt) < want {
		return false, fmt.Sprintf("prompt has %d tokens, fewer than the parent's %d prompt+generation tokens", len(prompt), want)
	}
	for i := range want {
		p := parent.tokenAt(i)
		if prompt[i] != p {
			return false, fmt.Sprintf("prompt token %d is %d, the parent's prompt+generation has %d there (of %d)", i, prompt[i], p, want)
		}
	}
	return true, ""
}

// tokenAt is token i of prompt + generation.
func (g *Generation) tokenAt(i int) int64 {
	if i < len(g.PromptTokenIDs) {
		return g.PromptTokenIDs[i]
	}
	return g.GenerationTokenIDs[i-len(g.PromptTokenIDs)]
}
