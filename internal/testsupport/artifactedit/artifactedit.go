// Package artifactedit edits and damages a checkpoint artifact on disk, for
// the tests of what reads one: a copy to damage, a flipped byte, a shard
// rebuilt from edited members, an edited manifest, and the manifest sealed
// again so the check a test is about is the one reached. Only tests import
// it.
package artifactedit

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/artifact"
)

// CopyDir copies the checkpoint directory from into a new temporary
// directory and returns the copy.
func CopyDir(t testing.TB, from string) string {
	t.Helper()
	to := filepath.Join(t.TempDir(), "ckpt")
	require.NoError(t, os.CopyFS(to, os.DirFS(from)))
	return to
}

// FlipByte changes the byte at off of the file at path.
func FlipByte(t testing.TB, path string, off int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	b[off] ^= 0x55
	require.NoError(t, os.WriteFile(path, b, 0o644))
}

// Member is one member of a shard: its tar header and its data.
type Member struct {
	Hdr  *tar.Header
	Data []byte
}

// RewriteShard rebuilds shard of the checkpoint in dir from its members as
// edit returns them, and reseals the manifest.
func RewriteShard(t testing.TB, dir, shard string, edit func([]Member) []Member) {
	t.Helper()
	path := filepath.Join(dir, shard)
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var ms []Member
	tr := tar.NewReader(bytes.NewReader(raw))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		data, err := io.ReadAll(tr)
		require.NoError(t, err)
		ms = append(ms, Member{Hdr: hdr, Data: data})
	}
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	for _, m := range edit(ms) {
		require.NoError(t, tw.WriteHeader(m.Hdr))
		_, err := tw.Write(m.Data)
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	require.NoError(t, os.WriteFile(path, out.Bytes(), 0o644))
	Reseal(t, dir)
}

// ReadManifest is the manifest of the checkpoint in dir.
func ReadManifest(t testing.TB, dir string) artifact.Manifest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, artifact.ManifestName))
	require.NoError(t, err)
	var m artifact.Manifest
	require.NoError(t, json.Unmarshal(b, &m))
	return m
}

// WriteManifest seals m and writes it as the manifest of the checkpoint in
// dir, encoded the way package artifact encodes it: indented JSON and a
// newline, the digest over that encoding without the digest.
func WriteManifest(t testing.TB, dir string, m artifact.Manifest) {
	t.Helper()
	encode := func() []byte {
		b, err := json.MarshalIndent(m, "", "  ")
		require.NoError(t, err)
		return append(b, '\n')
	}
	m.Digest = ""
	sum := sha256.Sum256(encode())
	m.Digest = hex.EncodeToString(sum[:])
	require.NoError(t, os.WriteFile(filepath.Join(dir, artifact.ManifestName), encode(), 0o644))
}

// EditManifest edits the manifest of the checkpoint in dir and seals it
// again.
func EditManifest(t testing.TB, dir string, edit func(*artifact.Manifest)) {
	t.Helper()
	m := ReadManifest(t, dir)
	edit(&m)
	WriteManifest(t, dir, m)
}

// Reseal makes the manifest agree with the files' current sizes and
// digests (a file that is gone keeps its entry), so that opening the
// checkpoint gets past those checks to the damage a test is about.
func Reseal(t testing.TB, dir string) {
	t.Helper()
	m := ReadManifest(t, dir)
	refresh := func(name string, size *int64, sum *string) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return
		}
		s := sha256.Sum256(b)
		*size, *sum = int64(len(b)), hex.EncodeToString(s[:])
	}
	for i := range m.Sections {
		sm := &m.Sections[i]
		refresh(sm.Index.Name, &sm.Index.Size, &sm.Index.SHA256)
		for j := range sm.Shards {
			refresh(sm.Shards[j].Name, &sm.Shards[j].Size, &sm.Shards[j].SHA256)
		}
	}
	WriteManifest(t, dir, m)
}
