package artifact_test

import (
	"io/fs"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A checkpoint's directory and files are private to the writer's user.
func TestWriteMakesPrivateFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt", "agents")
	mustWrite(t, dir, sampleSections(), smallOpts)
	require.NoError(t, filepath.WalkDir(filepath.Dir(dir), func(p string, d fs.DirEntry, err error) error {
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
