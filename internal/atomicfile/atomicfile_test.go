package atomicfile_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/atomicfile"
)

// entries lists the names in dir.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// target makes a fresh directory and the path of file.json in it, which
// holds existing if that is not nil.
func target(t *testing.T, existing []byte) (dir, path string) {
	t.Helper()
	dir = t.TempDir()
	path = filepath.Join(dir, "file.json")
	if existing != nil {
		require.NoError(t, os.WriteFile(path, existing, 0o644))
	}
	return dir, path
}

func TestWriteFile(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB: more than one write
	tests := []struct {
		name     string
		existing []byte // nil: no file before
		data     []byte
		perm     os.FileMode
	}{
		{name: "new file", data: []byte("hello\n"), perm: 0o644},
		{name: "replaces an existing file", existing: []byte("old content, longer than the new\n"), data: []byte("new\n"), perm: 0o600},
		{name: "empty file", existing: []byte("old\n"), data: []byte{}, perm: 0o644},
		{name: "large file appears whole", data: big, perm: 0o640},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, path := target(t, tt.existing)
			require.NoError(t, atomicfile.WriteFile(path, tt.data, tt.perm), "WriteFile")
			got, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, string(tt.data), string(got), "content: got %d bytes, want %d", len(got), len(tt.data))
			fi, err := os.Stat(path)
			require.NoError(t, err)
			assert.Equal(t, tt.perm, fi.Mode().Perm(), "permissions %v, want %v", fi.Mode().Perm(), tt.perm)
			names := entries(t, dir)
			require.Len(t, names, 1, "directory holds %v, want only file.json (no temporary file left)", names)
			require.Equal(t, "file.json", names[0], "directory holds %v, want only file.json (no temporary file left)", names)
		})
	}
}

func TestWriteFailedFillLeavesNothing(t *testing.T) {
	errFill := errors.New("fill failed")
	tests := []struct {
		name     string
		existing []byte
	}{
		{name: "no file before"},
		{name: "existing file kept", existing: []byte("old\n")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, path := target(t, tt.existing)
			err := atomicfile.Write(path, 0o644, func(w io.Writer) error {
				if _, err := w.Write([]byte("partial")); err != nil {
					return err
				}
				return errFill
			})
			require.ErrorIs(t, err, errFill, "Write: got %v, want the fill error", err)
			got, err := os.ReadFile(path)
			if tt.existing == nil {
				assert.ErrorIs(t, err, os.ErrNotExist, "after a failed write: read gives %q, %v; want no file", got, err)
			} else {
				assert.NoError(t, err, "after a failed write: want the old content %q", tt.existing)
				assert.Equal(t, string(tt.existing), string(got), "after a failed write: want the old content")
			}
			want := 0
			if tt.existing != nil {
				want = 1
			}
			names := entries(t, dir)
			assert.Len(t, names, want, "directory holds %v, want %d file(s) and no temporary file", names, want)
		})
	}
}

// While the new content is being written, path still holds the old one and
// the new one sits in a temporary file named for it.
func TestWriteInvisibleUntilRenamed(t *testing.T) {
	dir, path := target(t, []byte("old\n"))
	err := atomicfile.Write(path, 0o644, func(w io.Writer) error {
		if _, err := w.Write([]byte("new\n")); err != nil {
			return err
		}
		got, err := os.ReadFile(path)
		require.NoError(t, err, "during the write path holds %q, %v; want the old content", got, err)
		require.Equal(t, "old\n", string(got), "during the write path holds %q, %v; want the old content", got, err)
		var temps []string
		for _, n := range entries(t, dir) {
			if strings.HasPrefix(n, atomicfile.TempPrefix+"file.json-") {
				temps = append(temps, n)
			}
		}
		assert.Len(t, temps, 1, "during the write the directory holds %v, want one temporary file for file.json", entries(t, dir))
		return nil
	})
	require.NoError(t, err, "Write")
	got, err := os.ReadFile(path)
	require.NoError(t, err, "after the write path holds %q, %v; want the new content", got, err)
	require.Equal(t, "new\n", string(got), "after the write path holds %q, %v; want the new content", got, err)
}

func TestWriteFileMissingDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "missing")
	require.Error(t, atomicfile.WriteFile(filepath.Join(dir, "file.json"), []byte("x"), 0o644), "WriteFile into a missing directory succeeded")
	_, err := os.Stat(dir)
	assert.ErrorIs(t, err, os.ErrNotExist, "the missing directory was created: %v", err)
}

func TestSyncDir(t *testing.T) {
	assert.NoError(t, atomicfile.SyncDir(t.TempDir()), "SyncDir of a directory")
	missing := filepath.Join(t.TempDir(), "missing")
	err := atomicfile.SyncDir(missing)
	require.ErrorIs(t, err, os.ErrNotExist, "SyncDir of a missing directory: got %v, want a not-exist error naming it", err)
	require.ErrorContains(t, err, missing, "SyncDir of a missing directory: got %v, want a not-exist error naming it", err)
}
