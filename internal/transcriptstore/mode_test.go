package transcriptstore_test

import (
	"context"
	"io/fs"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
)

// A transcript store's directory and blobs are private to the worker's
// user: they hold every conversation.
func TestStoreWritesPrivateFiles(t *testing.T) {
	root := filepath.Join(t.TempDir(), "transcripts")
	s, err := transcriptstore.Open(root)
	require.NoError(t, err)
	_, err = s.Put(context.Background(), []byte("a conversation"))
	require.NoError(t, err)
	require.NoError(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		fi, err := d.Info()
		require.NoError(t, err)
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		}
		require.Equal(t, want, fi.Mode().Perm(), "%s", p)
		return nil
	}))
}
