package storage_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/storage"
)

// requireModes walks root and requires every file to have file mode and
// every directory below root dir mode.
func requireModes(t *testing.T, root string, file, dir fs.FileMode) {
	t.Helper()
	n := 0
	require.NoError(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		if p == root {
			return nil
		}
		fi, err := d.Info()
		require.NoError(t, err)
		want := file
		if d.IsDir() {
			want = dir
		}
		require.Equal(t, want, fi.Mode().Perm(), "%s", p)
		n++
		return nil
	}))
	require.Positive(t, n)
}

// Files and directories a store writes are private to the process's user:
// transcripts, checkpoints and staging files hold conversations and state.
func TestDirWritesPrivateFiles(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	st, err := storage.Dir(filepath.Join(root, "store"))
	require.NoError(t, err)
	require.NoError(t, storage.WriteBytes(ctx, st, "a/b/written.json", []byte("{}")))
	require.NoError(t, st.Create(ctx, "c/created", []byte("x")))
	sub, err := st.Sub("d")
	require.NoError(t, err)
	require.NoError(t, storage.WriteBytes(ctx, sub, "e", []byte("y")))
	requireModes(t, root, 0o600, 0o700)
}

func TestDirWithModeWidensOnPurpose(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	old := umask(0o027)
	defer umask(old)
	st, err := storage.DirWithMode(filepath.Join(root, "store"), 0o640)
	require.NoError(t, err)
	require.NoError(t, storage.WriteBytes(ctx, st, "a/b/written.json", []byte("{}")))
	require.NoError(t, st.Create(ctx, "c/created", []byte("x")))
	requireModes(t, root, 0o640, 0o750)

	o := &storage.Opener{FileMode: 0o640}
	st, err = o.Open(ctx, filepath.Join(root, "opened"))
	require.NoError(t, err)
	require.NoError(t, storage.WriteBytes(ctx, st, "f", []byte("z")))
	fi, err := os.Stat(filepath.Join(root, "opened", "f"))
	require.NoError(t, err)
	require.Equal(t, fs.FileMode(0o640), fi.Mode().Perm())
}

func TestParseFileMode(t *testing.T) {
	for in, want := range map[string]fs.FileMode{"0600": 0o600, "640": 0o640, "0o644": 0o644} {
		got, err := storage.ParseFileMode(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "rw", "0400", "0700", "0666x", "01600", "0602"} {
		_, err := storage.ParseFileMode(bad)
		require.Error(t, err, bad)
	}
}
