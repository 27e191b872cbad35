package artifact_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/artifact"
)

// update rewrites the test vectors' files and digests from their
// vector.json (go test ./internal/artifact -run TestVectors -update).
var update = flag.Bool("update", false, "rewrite docs/protocol/testdata/*/checkpoint and SHA256SUMS from vector.json")

// vectorsDir holds the checked-in test vectors of docs/protocol/ARTIFACT.md.
const vectorsDir = "../../docs/protocol/testdata"

// vector is a test vector's vector.json: the input of a write and the
// manifest digest it must give.
type vector struct {
	About           string            `json:"about"`
	CheckpointID    string            `json:"checkpoint_id"`
	Labels          map[string]string `json:"labels"`
	MaxShardRecords int               `json:"max_shard_records"`
	Sections        []vectorSection   `json:"sections"`
	ManifestDigest  string            `json:"manifest_digest"`
}

type vectorSection struct {
	Name    string         `json:"name"`
	Records []vectorRecord `json:"records"`
}

type vectorRecord struct {
	Key  string `json:"key"`
	Data string `json:"data"`
}

func (v vector) sections() []artifact.Section {
	out := make([]artifact.Section, 0, len(v.Sections))
	for _, s := range v.Sections {
		sec := artifact.Section{Name: s.Name, Records: []artifact.Record{}}
		for _, r := range s.Records {
			sec.Records = append(sec.Records, artifact.Record{Key: r.Key, Data: []byte(r.Data)})
		}
		out = append(out, sec)
	}
	return out
}

// TestVectors: the checked-in test vectors of ARTIFACT.md are what this
// package writes, byte for byte, and what it validates: for each vector,
// writing its sections gives exactly the files of its checkpoint directory
// and the manifest digest it states; opening that directory validates and
// reads the same records back; SHA256SUMS lists every file's digest. So the
// specification and the code cannot drift apart.
func TestVectors(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join(vectorsDir, "*", "vector.json"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(dirs), 2, "test vectors in %s", vectorsDir)
	for _, path := range dirs {
		dir := filepath.Dir(path)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			var v vector
			raw, err := os.ReadFile(path)
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(raw, &v))
			written := t.TempDir()
			m, err := artifact.Write(context.Background(), written, artifact.Meta{CheckpointID: v.CheckpointID, Labels: v.Labels},
				v.sections(), artifact.Options{MaxShardRecords: v.MaxShardRecords})
			require.NoError(t, err)
			if *update {
				writeVector(t, dir, path, v, written, m)
				return
			}
			require.Equal(t, v.ManifestDigest, m.Digest, "manifest digest of %s", path)
			checked := filepath.Join(dir, "checkpoint")
			require.Equal(t, listFiles(t, written), listFiles(t, checked), "files of %s", checked)
			for _, name := range listFiles(t, written) {
				want, err := os.ReadFile(filepath.Join(checked, name))
				require.NoError(t, err)
				got, err := os.ReadFile(filepath.Join(written, name))
				require.NoError(t, err)
				require.Equal(t, want, got, "%s differs from what Write produces", name)
			}
			cp, err := artifact.Open(context.Background(), checked, v.CheckpointID)
			require.NoError(t, err)
			require.Equal(t, v.ManifestDigest, cp.Manifest().Digest)
			for _, s := range v.sections() {
				recs, err := cp.Section(context.Background(), s.Name)
				require.NoError(t, err)
				sort.Slice(s.Records, func(i, j int) bool { return s.Records[i].Key < s.Records[j].Key })
				require.Equal(t, s.Records, recs, "section %s", s.Name)
			}
			sums, err := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
			require.NoError(t, err)
			require.Equal(t, shaSums(t, checked), string(sums), "SHA256SUMS of %s", dir)
		})
	}
}

func listFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

// shaSums is SHA256SUMS of a vector's checkpoint directory, as `sha256sum
// checkpoint/*` prints it in the vector's directory.
func shaSums(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	for _, name := range listFiles(t, dir) {
		data, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		sum := sha256.Sum256(data)
		fmt.Fprintf(&b, "%s  checkpoint/%s\n", hex.EncodeToString(sum[:]), name)
	}
	return b.String()
}

// writeVector replaces a vector's checkpoint directory, SHA256SUMS and
// manifest digest with what Write produced.
func writeVector(t *testing.T, dir, path string, v vector, written string, m artifact.Manifest) {
	t.Helper()
	checked := filepath.Join(dir, "checkpoint")
	require.NoError(t, os.RemoveAll(checked))
	require.NoError(t, os.MkdirAll(checked, 0o755))
	for _, name := range listFiles(t, written) {
		data, err := os.ReadFile(filepath.Join(written, name))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(checked, name), data, 0o644))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(shaSums(t, checked)), 0o644))
	v.ManifestDigest = m.Digest
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	require.NoError(t, enc.Encode(v))
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
	t.Logf("rewrote %s: manifest digest %s", dir, m.Digest)
}
