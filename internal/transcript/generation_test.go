package transcript_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/transcript"
)

func generation(prompt, gen []int64) transcript.Generation {
	lps := make([]float64, len(gen))
	for i := range lps {
		lps[i] = -0.5
	}
	return transcript.Generation{
		Tokens: transcript.TokensPresent, PromptTokenIDs: prompt, GenerationTokenIDs: gen, GenerationLogProbs: lps,
		PromptDigest: transcript.TokenDigest(prompt), SequenceDigest: transcript.TokenDigest(prompt, gen),
	}
}

func TestTokenDigestIgnoresSplit(t *testing.T) {
	require.Equal(t, transcript.TokenDigest([]int64{1, 2, 3}), transcript.TokenDigest([]int64{1}, []int64{2, 3}))
	require.Equal(t, transcript.TokenDigest(nil), transcript.TokenDigest([]int64{}))
	require.NotEqual(t, transcript.TokenDigest([]int64{1, 2}), transcript.TokenDigest([]int64{12}))
}

func TestGenerationValidate(t *testing.T) {
	g := generation([]int64{1, 2}, []int64{3})
	require.NoError(t, g.Validate())
	bad := g
	bad.GenerationLogProbs = []float64{-1, -2}
	require.ErrorContains(t, bad.Validate(), "2 log-probs for 1 generated tokens")
	bad = g
	bad.SequenceDigest = bad.PromptDigest
	require.ErrorContains(t, bad.Validate(), "digests")
	require.NoError(t, (&transcript.Generation{Tokens: transcript.TokensAbsent}).Validate())
	require.Error(t, (&transcript.Generation{Tokens: transcript.TokensAbsent, PromptTokenIDs: []int64{1}}).Validate())
	require.Error(t, (&transcript.Generation{}).Validate(), "the tokens state is always said")
}

func TestCheckPrefix(t *testing.T) {
	parent := generation([]int64{1, 2}, []int64{3, 4})
	ok, why := transcript.CheckPrefix(&parent, []int64{1, 2, 3, 4, 5, 6})
	require.True(t, ok, why)
	ok, why = transcript.CheckPrefix(&parent, []int64{1, 2, 3, 4})
	require.True(t, ok, "a prompt equal to the parent's sequence continues it: %s", why)

	ok, why = transcript.CheckPrefix(&parent, []int64{1, 2, 9, 4, 5})
	require.False(t, ok)
	require.Contains(t, why, "prompt token 2 is 9")
	ok, why = transcript.CheckPrefix(&parent, []int64{1, 2, 3})
	require.False(t, ok)
	require.Contains(t, why, "fewer than")
	ok, why = transcript.CheckPrefix(nil, []int64{1})
	require.False(t, ok)
	require.Contains(t, why, "no generation record")
	ok, why = transcript.CheckPrefix(&transcript.Generation{Tokens: transcript.TokensAbsent}, []int64{1})
	require.False(t, ok)
	require.Contains(t, why, "tokens absent")
}
