package transcript_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/transcript"
)

var someHead = transcript.DigestOf([]byte("conversation"))

func rootChunk(ids ...int64) transcript.PrefixChunk {
	return transcript.PrefixChunk{
		Head: someHead, PromptTokenIDs: []int64{7, 8}, Model: "m",
		TokenIDs: ids, LogProbs: logProbs(len(ids)), Text: "ab", PolicyVersion: "v1",
	}
}

func logProbs(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = -0.25 * float64(i+1)
	}
	return out
}

func TestPrefixChunkValidate(t *testing.T) {
	root := rootChunk(1, 2)
	require.NoError(t, root.Validate())
	for name, tc := range map[string]struct {
		edit func(*transcript.PrefixChunk)
		want string
	}{
		"no tokens":          {func(c *transcript.PrefixChunk) { c.TokenIDs, c.LogProbs = nil, nil }, "no tokens"},
		"log-probs mismatch": {func(c *transcript.PrefixChunk) { c.LogProbs = c.LogProbs[:1] }, "1 log-probs for 2 tokens"},
		"root not at 0":      {func(c *transcript.PrefixChunk) { c.Start = 3 }, "want 0, 0"},
		"root no prompt":     {func(c *transcript.PrefixChunk) { c.PromptTokenIDs = nil }, "no prompt token ids"},
		"root bad head":      {func(c *transcript.PrefixChunk) { c.Head = "x" }, "malformed digest"},
		"later with prompt":  {func(c *transcript.PrefixChunk) { c.Parent, c.Start = someHead, 2 }, "repeats the first one's"},
	} {
		t.Run(name, func(t *testing.T) {
			c := rootChunk(1, 2)
			tc.edit(&c)
			require.ErrorContains(t, c.Validate(), tc.want)
		})
	}
}

func later(start, segment int, version string, ids ...int64) transcript.PrefixChunk {
	return transcript.PrefixChunk{Parent: someHead, Start: start, Segment: segment, TokenIDs: ids, LogProbs: logProbs(len(ids)), Text: "c", PolicyVersion: version}
}

func TestAssemblePrefix(t *testing.T) {
	p, err := transcript.AssemblePrefix([]transcript.PrefixChunk{
		rootChunk(1, 2), later(2, 0, "v1", 3), later(3, 1, "v1", 4, 5), later(5, 2, "v2", 6),
	})
	require.NoError(t, err)
	require.Equal(t, []int64{1, 2, 3, 4, 5, 6}, p.TokenIDs)
	require.Len(t, p.LogProbs, 6)
	require.Equal(t, "abccc", p.Text)
	require.Equal(t, []int64{7, 8}, p.PromptTokenIDs)
	require.Equal(t, []int{3, 5}, p.ResumedAt(), "segments 1 and 2 start where the generation resumed")
	require.Equal(t, []transcript.VersionSpan{{Start: 0, PolicyVersion: "v1"}, {Start: 5, PolicyVersion: "v2"}}, transcript.VersionSpans(p.Segments),
		"a resume under the same version is no new span")

	_, err = transcript.AssemblePrefix([]transcript.PrefixChunk{rootChunk(1, 2), later(3, 0, "v1", 3)})
	require.ErrorContains(t, err, "starts at token 3, the chain before it holds 2")
	_, err = transcript.AssemblePrefix([]transcript.PrefixChunk{rootChunk(1, 2), later(2, 1, "v1", 3), later(3, 0, "v1", 4)})
	require.ErrorContains(t, err, "goes back to segment 0")
	_, err = transcript.AssemblePrefix([]transcript.PrefixChunk{later(0, 0, "v1", 1)})
	require.ErrorContains(t, err, "has a parent")
	_, err = transcript.AssemblePrefix(nil)
	require.Error(t, err)
}

func TestGenerationPolicyVersionSpans(t *testing.T) {
	g := generation([]int64{1}, []int64{2, 3, 4})
	g.PolicyVersionSpans = []transcript.VersionSpan{{Start: 0, PolicyVersion: "v1"}, {Start: 2, PolicyVersion: "v2"}}
	require.NoError(t, g.Validate())
	for name, spans := range map[string][]transcript.VersionSpan{
		"one span":       {{Start: 0, PolicyVersion: "v1"}},
		"not from 0":     {{Start: 1, PolicyVersion: "v1"}, {Start: 2, PolicyVersion: "v2"}},
		"not increasing": {{Start: 0, PolicyVersion: "v1"}, {Start: 0, PolicyVersion: "v2"}},
		"same version":   {{Start: 0, PolicyVersion: "v1"}, {Start: 1, PolicyVersion: "v1"}},
		"past the end":   {{Start: 0, PolicyVersion: "v1"}, {Start: 3, PolicyVersion: "v2"}},
	} {
		bad := g
		bad.PolicyVersionSpans = spans
		require.Error(t, bad.Validate(), name)
	}
}
