package transcript

import (
	"errors"
	"fmt"
	"strings"
)

// PrefixChunk is one durable piece of an unfinished generation: the tokens a
// model call received since the previous chunk, with their log-probs and
// text. Chunks chain back (Parent) to the first one of the call, which also
// names the conversation the call answers and holds the prompt's token ids.
// A chunk is content-addressed like every blob, so a crashed call's retry
// can name its durable prefix by one digest (the last chunk) and nothing of
// it ever travels through workflow history.
type PrefixChunk struct {
	// Parent is the previous chunk; empty for the first.
	Parent Digest `json:"parent,omitempty"`
	// Start is the index of the chunk's first token in the generation: the
	// number of generated tokens the chain holds before it.
	Start int `json:"start"`
	// Segment counts the requests the generation took: 0 for the first,
	// one more for each continuation from a durable prefix. A chunk whose
	// segment is not its parent's starts where the generation resumed.
	Segment int `json:"segment"`
	// TokenIDs and LogProbs are the chunk's generated tokens (one log-prob
	// per token, or none at all when the endpoint reported none).
	TokenIDs []int64   `json:"token_ids"`
	LogProbs []float64 `json:"log_probs,omitempty"`
	// Text is the raw text of the tokens, special tokens included: what a
	// parser of the model's answer format reads once the generation ends.
	Text string `json:"text"`
	// PolicyVersion is the version the endpoint reported for the request
	// that sampled these tokens (or the rollout's, when it reported none).
	PolicyVersion string `json:"policy_version,omitempty"`

	// The first chunk only: the conversation the call answers, its prompt's
	// token ids and the model name the endpoint answered with.
	Head           Digest  `json:"head,omitempty"`
	PromptTokenIDs []int64 `json:"prompt_token_ids,omitempty"`
	Model          string  `json:"model,omitempty"`
	// Discarded counts the tokens of earlier prefixes of the same call that
	// this chain replaced: the call could not continue them and started
	// over, so a later continuation still reports them as regenerated.
	Discarded int `json:"discarded,omitempty"`
}

// Validate checks a chunk on its own: a first chunk names its conversation
// and prompt, a later one neither, and there is one log-prob per token.
func (c *PrefixChunk) Validate() error {
	switch {
	case len(c.TokenIDs) == 0:
		return errors.New("transcript: prefix chunk holds no tokens")
	case c.Start < 0 || c.Segment < 0:
		return fmt.Errorf("transcript: prefix chunk start %d, segment %d: negative", c.Start, c.Segment)
	case len(c.LogProbs) > 0 && len(c.LogProbs) != len(c.TokenIDs):
		return fmt.Errorf("transcript: prefix chunk has %d log-probs for %d tokens", len(c.LogProbs), len(c.TokenIDs))
	}
	if c.Parent == "" {
		switch {
		case c.Start != 0 || c.Segment != 0:
			return fmt.Errorf("transcript: first prefix chunk starts at token %d, segment %d (want 0, 0)", c.Start, c.Segment)
		case len(c.PromptTokenIDs) == 0:
			return errors.New("transcript: first prefix chunk has no prompt token ids")
		case c.Discarded < 0:
			return fmt.Errorf("transcript: first prefix chunk discarded %d tokens", c.Discarded)
		}
		return c.Head.Validate()
	}
	if err := c.Parent.Validate(); err != nil {
		return err
	}
	if c.Head != "" || len(c.PromptTokenIDs) > 0 || c.Model != "" || c.Discarded != 0 {
		return errors.New("transcript: a later prefix chunk repeats the first one's conversation, prompt, model or discarded count")
	}
	return nil
}

// VersionSpan is where a policy version starts sampling in a generation: the
// tokens from Start to the next span's start (or the end) were sampled by
// PolicyVersion.
type VersionSpan struct {
	Start         int    `json:"start"`
	PolicyVersion string `json:"policy_version"`
}

// Prefix is a durable prefix put together from its chain of chunks, oldest
// first.
type Prefix struct {
	Head           Digest
	PromptTokenIDs []int64
	Model          string
	Discarded      int
	TokenIDs       []int64
	LogProbs       []float64
	Text           string
	// Segments are where each request's tokens start (Start), its segment
	// number and the version that sampled them, in order.
	Segments []PrefixSegment
}

// PrefixSegment is the part of a prefix one request generated.
type PrefixSegment struct {
	Start         int
	Segment       int
	PolicyVersion string
}

// AssemblePrefix joins chunks (oldest first, the first one the chain's root)
// into the prefix they hold, checking that each starts where the previous
// ended and that segments never go back.
func AssemblePrefix(chunks []PrefixChunk) (Prefix, error) {
	if len(chunks) == 0 {
		return Prefix{}, errors.New("transcript: a prefix needs at least one chunk")
	}
	root := chunks[0]
	if root.Parent != "" {
		return Prefix{}, errors.New("transcript: a prefix's first chunk has a parent")
	}
	p := Prefix{Head: root.Head, PromptTokenIDs: root.PromptTokenIDs, Model: root.Model, Discarded: root.Discarded}
	withLogProbs := len(root.LogProbs) > 0
	for i, c := range chunks {
		if err := c.Validate(); err != nil {
			return Prefix{}, fmt.Errorf("chunk %d: %w", i, err)
		}
		switch {
		case i > 0 && c.Parent == "":
			return Prefix{}, fmt.Errorf("transcript: prefix chunk %d is a second first chunk", i)
		case c.Start != len(p.TokenIDs):
			return Prefix{}, fmt.Errorf("transcript: prefix chunk %d starts at token %d, the chain before it holds %d", i, c.Start, len(p.TokenIDs))
		case (len(c.LogProbs) > 0) != withLogProbs:
			return Prefix{}, fmt.Errorf("transcript: prefix chunk %d has log-probs where the first chunk has none, or the other way round", i)
		}
		last := len(p.Segments) - 1
		switch {
		case last >= 0 && c.Segment < p.Segments[last].Segment:
			return Prefix{}, fmt.Errorf("transcript: prefix chunk %d goes back to segment %d from %d", i, c.Segment, p.Segments[last].Segment)
		case last < 0 || c.Segment != p.Segments[last].Segment || c.PolicyVersion != p.Segments[last].PolicyVersion:
			p.Segments = append(p.Segments, PrefixSegment{Start: c.Start, Segment: c.Segment, PolicyVersion: c.PolicyVersion})
		}
		p.TokenIDs = append(p.TokenIDs, c.TokenIDs...)
		p.LogProbs = append(p.LogProbs, c.LogProbs...)
		p.Text += c.Text
	}
	return p, nil
}

// ResumedAt is where the prefix's later requests started: the first token
// of each segment after the first.
func (p Prefix) ResumedAt() []int {
	var out []int
	for i, s := range p.Segments {
		if i > 0 && s.Segment != p.Segments[i-1].Segment {
			out = append(out, s.Start)
		}
	}
	return out
}

// VersionSpans turns segments, each with the version that sampled it, into
// the spans of a generation: adjacent segments of one version merge, so a
// generation sampled by one version (however many requests it took) has a
// single span. Segments must start at 0 and go up.
func VersionSpans(segments []PrefixSegment) []VersionSpan {
	var out []VersionSpan
	for _, s := range segments {
		if n := len(out); n > 0 && out[n-1].PolicyVersion == s.PolicyVersion {
			continue
		}
		out = append(out, VersionSpan{Start: s.Start, PolicyVersion: s.PolicyVersion})
	}
	return out
}

// PrefixIndex names the newest durable prefix of one model call, whether or
// not the call's heartbeat got out to name it. A prefix writer replaces it
// after every chunk, under a key derived from the call's identity
// (PrefixIndexKey), so that a retry after a crash between the chunk's write
// and its heartbeat still finds the chunk. A retry trusts it only when it
// names the same call and conversation and extends the prefix the
// heartbeat names.
type PrefixIndex struct {
	// Call is the identity the key was derived from.
	Call string `json:"call"`
	// Head is the conversation the call answers.
	Head Digest `json:"head"`
	// Record is the prefix's last chunk; Tokens how many generated tokens
	// the prefix holds.
	Record Digest `json:"record"`
	Tokens int    `json:"tokens"`
}

// Validate checks an index on its own.
func (x *PrefixIndex) Validate() error {
	switch {
	case x.Call == "":
		return errors.New("transcript: prefix index names no call")
	case x.Tokens <= 0:
		return fmt.Errorf("transcript: prefix index of %s holds %d tokens", x.Call, x.Tokens)
	}
	if err := x.Head.Validate(); err != nil {
		return fmt.Errorf("transcript: prefix index of %s: head: %w", x.Call, err)
	}
	if err := x.Record.Validate(); err != nil {
		return fmt.Errorf("transcript: prefix index of %s: record: %w", x.Call, err)
	}
	return nil
}

// PrefixIndexKey is the key of the index of the call named call: the
// hexadecimal SHA-256 of its name.
func PrefixIndexKey(call string) string {
	return strings.TrimPrefix(string(DigestOf([]byte(call))), "sha256:")
}
