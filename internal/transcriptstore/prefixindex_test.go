package transcriptstore_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
)

// A prefix index is replaced in place, read back strictly, removed, and
// never touched by a sweep; a bad key or index is refused and changes
// nothing.
func TestPrefixIndex(t *testing.T) {
	dir := t.TempDir()
	s, err := transcriptstore.Open(dir)
	require.NoError(t, err)
	ctx := t.Context()
	key := transcript.PrefixIndexKey(`["wf","run","7","r1/a0/t1"]`)
	head := transcript.DigestOf([]byte("head"))
	x := transcript.PrefixIndex{Call: "c", Head: head, Record: transcript.DigestOf([]byte("one")), Tokens: 64}

	_, err = s.PrefixIndex(ctx, key)
	require.ErrorIs(t, err, transcript.ErrNotFound)
	require.NoError(t, s.PutPrefixIndex(ctx, key, x))
	x.Record, x.Tokens = transcript.DigestOf([]byte("two")), 128
	require.NoError(t, s.PutPrefixIndex(ctx, key, x))
	got, err := s.PrefixIndex(ctx, key)
	require.NoError(t, err)
	require.Equal(t, x, got, "the newest index replaced the older one")

	res, err := s.Sweep(ctx, func(transcript.Digest) bool { return false }, transcriptstore.SweepCutoff(time.Now().Add(time.Hour), 0))
	require.NoError(t, err)
	require.Zero(t, res.FreedBlobs)
	_, err = s.PrefixIndex(ctx, key)
	require.NoError(t, err, "a sweep leaves indexes alone")

	require.ErrorContains(t, s.PutPrefixIndex(ctx, "../x", x), `prefix index key "../x"`)
	bad := x
	bad.Tokens = 0
	require.ErrorContains(t, s.PutPrefixIndex(ctx, key, bad), "holds 0 tokens")
	got, err = s.PrefixIndex(ctx, key)
	require.NoError(t, err)
	require.Equal(t, x, got, "a refused index changed nothing")

	file := filepath.Join(dir, "prefix-index", key)
	for _, data := range []string{`{`, `{"call":"c","head":"` + string(head) + `","record":"` + string(x.Record) + `","tokens":1,"more":2}`, `{"call":"c","tokens":3}`} {
		require.NoError(t, os.WriteFile(file, []byte(data), 0o600))
		_, err = s.PrefixIndex(ctx, key)
		require.ErrorIs(t, err, transcript.ErrCorrupt, "%s", data)
		require.True(t, strings.Contains(err.Error(), key), "the error names the index")
	}

	require.NoError(t, s.RemovePrefixIndex(ctx, key))
	require.NoError(t, s.RemovePrefixIndex(ctx, key), "removing none is no error")
	_, err = s.PrefixIndex(ctx, key)
	require.ErrorIs(t, err, transcript.ErrNotFound)
}
