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

// A durable prefix is a chain of chunks: stored one by one, read back put
// together, and listed for a checkpoint.
func TestPrefixChain(t *testing.T) {
	ctx := t.Context()
	s, err := transcriptstore.Open(t.TempDir())
	require.NoError(t, err)
	head := transcript.DigestOf([]byte("conversation"))
	d1, err := s.PutPrefixChunk(ctx, transcript.PrefixChunk{Head: head, PromptTokenIDs: []int64{1}, TokenIDs: []int64{2, 3}, LogProbs: []float64{-1, -2}, Text: "ab"})
	require.NoError(t, err)
	d2, err := s.PutPrefixChunk(ctx, transcript.PrefixChunk{Parent: d1, Start: 2, Segment: 1, TokenIDs: []int64{4}, LogProbs: []float64{-3}, Text: "c", PolicyVersion: "v2"})
	require.NoError(t, err)
	p, err := s.Prefix(ctx, d2)
	require.NoError(t, err)
	require.Equal(t, []int64{2, 3, 4}, p.TokenIDs)
	require.Equal(t, "abc", p.Text)
	require.Equal(t, head, p.Head)
	require.Equal(t, []int{2}, p.ResumedAt())
	blobs, err := s.PrefixBlobs(ctx, d2)
	require.NoError(t, err)
	require.Equal(t, []transcript.Digest{d2, d1}, blobs)

	_, err = s.PutPrefixChunk(ctx, transcript.PrefixChunk{Parent: d1, Start: 2})
	require.Error(t, err, "an empty chunk is refused before anything is stored")
	// A chunk that does not continue its parent is corrupt when read.
	bad, err := s.PutPrefixChunk(ctx, transcript.PrefixChunk{Parent: d1, Start: 5, TokenIDs: []int64{9}, LogProbs: []float64{-1}})
	require.NoError(t, err)
	_, err = s.Prefix(ctx, bad)
	require.ErrorIs(t, err, transcript.ErrCorrupt)
	_, err = s.Prefix(ctx, transcript.DigestOf([]byte("nothing")))
	require.ErrorIs(t, err, transcript.ErrNotFound)
}
