package transcriptstore_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
)

func TestBlobsIncludeGenerationRecords(t *testing.T) {
	ctx := t.Context()
	s, err := transcriptstore.Open(t.TempDir())
	require.NoError(t, err)
	gd, err := s.PutGeneration(ctx, transcript.Generation{
		Tokens: transcript.TokensPresent, PromptTokenIDs: []int64{1}, GenerationTokenIDs: []int64{2}, GenerationLogProbs: []float64{-0.5},
		PromptDigest: transcript.TokenDigest([]int64{1}), SequenceDigest: transcript.TokenDigest([]int64{1}, []int64{2}),
	})
	require.NoError(t, err)
	head, err := s.AppendAll(ctx, "", transcript.Item{Role: "user", Content: "hi"}, transcript.Item{Role: "assistant", Content: "yo", Generation: gd})
	require.NoError(t, err)
	blobs, err := s.Blobs(ctx, head)
	require.NoError(t, err)
	require.Len(t, blobs, 5, "two nodes, two items, one generation record")
	require.Contains(t, blobs, gd)
	g, err := s.Generation(ctx, gd)
	require.NoError(t, err)
	require.Equal(t, []int64{2}, g.GenerationTokenIDs)
}

// An item without a generation record encodes as before the field existed,
// so every head computed before token capture stays valid.
func TestItemWithoutGenerationKeepsItsDigest(t *testing.T) {
	ctx := t.Context()
	s, err := transcriptstore.Open(t.TempDir())
	require.NoError(t, err)
	d, err := s.PutJSON(ctx, transcript.Item{Role: "assistant", Content: "x"})
	require.NoError(t, err)
	require.Equal(t, transcript.DigestOf([]byte(`{"role":"assistant","content":"x"}`)), d)
}
