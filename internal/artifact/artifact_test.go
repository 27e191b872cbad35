package artifact_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/artifact"
	"github.com/turnstile-rl/turnstile/internal/testsupport/artifactedit"
)

const testID = "ckpt-0001"

var testMeta = artifact.Meta{CheckpointID: testID, Labels: map[string]string{"created_by": "artifact_test", "set": "s1"}}

// records makes n records whose keys include awkward characters (slashes,
// dots, unicode) and whose data depends on the seed.
func records(prefix string, n, size int, seed byte) []artifact.Record {
	out := make([]artifact.Record, n)
	for i := range out {
		data := make([]byte, size)
		for j := range data {
			data[j] = byte(i*31+j) ^ seed
		}
		out[i] = artifact.Record{Key: fmt.Sprintf("%s/rollout-%05d.a1/../ü", prefix, i), Data: data}
	}
	return out
}

func sampleSections() []artifact.Section {
	return []artifact.Section{
		{Name: "transcripts", Records: records("t", 7, 300, 1)},
		{Name: "agents", Records: records("a", 5, 100, 2)},
		{Name: "env-http-127.0.0.1-8091", Records: records("e", 3, 0, 3)},
		{Name: "empty"},
	}
}

// smallOpts splits sampleSections into several shards per section.
var smallOpts = artifact.Options{MaxShardRecords: 2}

func mustWrite(t *testing.T, dir string, secs []artifact.Section, opts artifact.Options) artifact.Manifest {
	t.Helper()
	m, err := artifact.Write(context.Background(), dir, testMeta, secs, opts)
	require.NoError(t, err, "Write")
	return m
}

func reversed(secs []artifact.Section) []artifact.Section {
	out := slices.Clone(secs)
	slices.Reverse(out)
	for i := range out {
		out[i].Records = slices.Clone(out[i].Records)
		slices.Reverse(out[i].Records)
	}
	return out
}

func sorted(recs []artifact.Record) []artifact.Record {
	out := slices.Clone(recs)
	slices.SortFunc(out, func(a, b artifact.Record) int { return strings.Compare(a.Key, b.Key) })
	return out
}

func checkRoundTrip(t *testing.T, dir string, secs []artifact.Section) *artifact.Checkpoint {
	t.Helper()
	c, err := artifact.Open(context.Background(), dir, testID)
	require.NoError(t, err, "Open")
	var names []string
	for _, s := range secs {
		names = append(names, s.Name)
	}
	slices.Sort(names)
	got := c.Sections()
	require.True(t, slices.Equal(got, names), "Sections() = %v, want %v", got, names)
	for _, s := range secs {
		got, err := c.Section(context.Background(), s.Name)
		require.NoError(t, err, "Section(%q)", s.Name)
		want := sorted(s.Records)
		require.Len(t, got, len(want), "Section(%q): %d records, want %d", s.Name, len(got), len(want))
		for i := range want {
			require.Equal(t, want[i].Key, got[i].Key, "Section(%q) record %d = %q (%d bytes), want %q (%d bytes)", s.Name, i, got[i].Key, len(got[i].Data), want[i].Key, len(want[i].Data))
			require.Equal(t, string(want[i].Data), string(got[i].Data), "Section(%q) record %d = %q (%d bytes), want %q (%d bytes)", s.Name, i, got[i].Key, len(got[i].Data), want[i].Key, len(want[i].Data))
		}
	}
	return c
}

func TestRoundTrip(t *testing.T) {
	tests := []struct {
		name       string
		secs       []artifact.Section
		opts       artifact.Options
		wantShards map[string][]int // records per shard
	}{
		{
			name:       "several sections, small shards",
			secs:       sampleSections(),
			opts:       smallOpts,
			wantShards: map[string][]int{"agents": {2, 2, 1}, "transcripts": {2, 2, 2, 1}, "env-http-127.0.0.1-8091": {2, 1}, "empty": nil},
		},
		{
			name:       "split at the default 512 records",
			secs:       []artifact.Section{{Name: "agents", Records: records("a", 1100, 8, 4)}},
			wantShards: map[string][]int{"agents": {512, 512, 76}},
		},
		{
			name: "split at the byte bound",
			secs: []artifact.Section{{Name: "transcripts", Records: records("t", 10, 300, 5)}},
			// 3 records of 300 bytes fit in 1000, a 4th does not.
			opts:       artifact.Options{MaxShardBytes: 1000},
			wantShards: map[string][]int{"transcripts": {3, 3, 3, 1}},
		},
		{
			name:       "record exactly at the byte bound",
			secs:       []artifact.Section{{Name: "big", Records: records("b", 3, 1000, 6)}},
			opts:       artifact.Options{MaxShardBytes: 1000},
			wantShards: map[string][]int{"big": {1, 1, 1}},
		},
		{
			name:       "no sections",
			wantShards: map[string][]int{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			m := mustWrite(t, dir, tt.secs, tt.opts)
			c := checkRoundTrip(t, dir, tt.secs)
			opened := c.Manifest()
			require.Equal(t, m.Digest, opened.Digest, "Open manifest %+v differs from Write's %+v", opened, m)
			require.Equal(t, testID, opened.CheckpointID, "Open manifest %+v differs from Write's %+v", opened, m)
			require.Equal(t, artifact.SchemaVersion, opened.Schema, "Open manifest %+v differs from Write's %+v", opened, m)
			got := map[string][]int{}
			total := 0
			for _, sm := range m.Sections {
				var counts []int
				for i, sh := range sm.Shards {
					want := artifact.ShardName(sm.Name, i)
					assert.Equal(t, want, sh.Name, "shard %d of %q named %q, want %q", i, sm.Name, sh.Name, want)
					counts = append(counts, sh.Records)
				}
				got[sm.Name] = counts
				total += sm.Records
			}
			require.Equal(t, fmt.Sprint(tt.wantShards), fmt.Sprint(got), "shards = %v, want %v", got, tt.wantShards)
			require.Equal(t, total, m.Records, "manifest records %d, sections sum to %d", m.Records, total)
		})
	}
}

func readDir(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	out := map[string][]byte{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		out[e.Name()] = b
	}
	return out
}

func TestDeterministic(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	mustWrite(t, a, sampleSections(), smallOpts)

	// Same content, sections and records in another order.
	shuffled := sampleSections()
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	for _, s := range shuffled {
		rng.Shuffle(len(s.Records), func(i, j int) { s.Records[i], s.Records[j] = s.Records[j], s.Records[i] })
	}
	mustWrite(t, b, shuffled, smallOpts)

	fa, fb := readDir(t, a), readDir(t, b)
	require.Len(t, fa, len(fb), "%d files vs %d files", len(fa), len(fb))
	for name, da := range fa {
		assert.Equal(t, string(fb[name]), string(da), "%s differs between two writes of the same content", name)
	}
	// The tar headers are the deterministic form.
	f, err := os.Open(filepath.Join(a, "agents-00000.tar"))
	require.NoError(t, err)
	defer f.Close()
	hdr, err := tar.NewReader(f).Next()
	require.NoError(t, err)
	require.Equal(t, int64(0o644), hdr.Mode, "tar header not deterministic: %+v", hdr)
	require.Equal(t, int64(0), hdr.ModTime.Unix(), "tar header not deterministic: %+v", hdr)
	require.Equal(t, 0, hdr.Uid, "tar header not deterministic: %+v", hdr)
	require.Equal(t, 0, hdr.Gid, "tar header not deterministic: %+v", hdr)
	require.Equal(t, "", hdr.Uname, "tar header not deterministic: %+v", hdr)
	require.Equal(t, tar.FormatUSTAR, hdr.Format, "tar header not deterministic: %+v", hdr)
}

func sameFiles(t *testing.T, dir string, before map[string]os.FileInfo) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, len(before), "%d files now, %d before", len(entries), len(before))
	for _, e := range entries {
		fi, err := os.Stat(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		b, ok := before[e.Name()]
		require.True(t, ok, "%s was replaced or changed", e.Name())
		require.True(t, os.SameFile(b, fi), "%s was replaced or changed", e.Name())
		require.Equal(t, fi.Size(), b.Size(), "%s was replaced or changed", e.Name())
	}
}

func statAll(t *testing.T, dir string) map[string]os.FileInfo {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	out := map[string]os.FileInfo{}
	for _, e := range entries {
		fi, err := os.Stat(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		out[e.Name()] = fi
	}
	return out
}

func TestRetry(t *testing.T) {
	changedData := sampleSections()
	changedData[0].Records[3].Data = append(slices.Clone(changedData[0].Records[3].Data), 'x')
	tests := []struct {
		name    string
		meta    artifact.Meta
		secs    []artifact.Section
		opts    artifact.Options
		wantErr error // nil: same manifest returned
	}{
		{name: "same content", meta: testMeta, secs: sampleSections(), opts: smallOpts},
		{name: "same content, other order", meta: testMeta, secs: reversed(sampleSections()), opts: smallOpts},
		{name: "other record data", meta: testMeta, secs: changedData, opts: smallOpts, wantErr: artifact.ErrConflict},
		{name: "a section less", meta: testMeta, secs: sampleSections()[1:], opts: smallOpts, wantErr: artifact.ErrConflict},
		{name: "other shard bound", meta: testMeta, secs: sampleSections(), opts: artifact.Options{}, wantErr: artifact.ErrConflict},
		{name: "other checkpoint id", meta: artifact.Meta{CheckpointID: "ckpt-0002", Labels: testMeta.Labels}, secs: sampleSections(), opts: smallOpts, wantErr: artifact.ErrConflict},
		{name: "other labels", meta: artifact.Meta{CheckpointID: testID}, secs: sampleSections(), opts: smallOpts, wantErr: artifact.ErrConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			first := mustWrite(t, dir, sampleSections(), smallOpts)
			before := statAll(t, dir)
			m, err := artifact.Write(context.Background(), dir, tt.meta, tt.secs, tt.opts)
			sameFiles(t, dir, before)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr, "Write = %v, want %v", err, tt.wantErr)
				require.Equal(t, "", m.Digest, "refused Write returned a manifest %+v", m)
				return
			}
			require.NoError(t, err, "retried Write")
			require.Equal(t, fmt.Sprint(first), fmt.Sprint(m), "retried Write returned\n%+v\nwant\n%+v", m, first)
		})
	}
}

func TestRetryOverCorruptCheckpointRefused(t *testing.T) {
	dir := t.TempDir()
	mustWrite(t, dir, sampleSections(), smallOpts)
	artifactedit.FlipByte(t, filepath.Join(dir, "agents-00001.tar"), 600)
	before := statAll(t, dir)
	_, err := artifact.Write(context.Background(), dir, testMeta, sampleSections(), smallOpts)
	require.ErrorIs(t, err, artifact.ErrInvalid, "Write over a corrupt checkpoint = %v, want ErrInvalid naming agents-00001.tar", err)
	require.ErrorContains(t, err, "agents-00001.tar", "Write over a corrupt checkpoint = %v, want ErrInvalid naming agents-00001.tar", err)
	sameFiles(t, dir, before)
}

type crash struct{}

// TestTornCommit kills the commit (by panic) after each file in turn, as the
// checkpoint.between-files failpoint would, and checks that the directory is
// not a checkpoint until a retried Write completes it.
func TestTornCommit(t *testing.T) {
	secs := sampleSections()
	var files int
	mustWrite(t, t.TempDir(), secs, artifact.Options{MaxShardRecords: 2, BetweenFiles: func() { files++ }})
	require.Equal(t, 13, files, "BetweenFiles calls: 9 shards and 4 indexes; not after the manifest")
	for stop := 1; stop <= files; stop++ {
		t.Run(fmt.Sprint("after file ", stop), func(t *testing.T) {
			dir := t.TempDir()
			// A larger earlier attempt leaves more shards than this one needs.
			bigger := append(sampleSections(), artifact.Section{Name: "zzz", Records: records("z", 9, 10, 9)})
			n := 0
			func() {
				defer func() {
					if r := recover(); r != nil && r != (crash{}) {
						panic(r)
					}
				}()
				opts := artifact.Options{MaxShardRecords: 2, BetweenFiles: func() {
					if n++; n == stop {
						panic(crash{})
					}
				}}
				_, err := artifact.Write(context.Background(), dir, testMeta, bigger, opts)
				require.Failf(t, "Write did not stop", "Write returned %v", err)
			}()
			// A temporary file as a crash inside a write would leave it.
			require.NoError(t, os.WriteFile(filepath.Join(dir, ".tmp-agents-00000.tar-123"), []byte("partial"), 0o644))
			_, err := artifact.Open(context.Background(), dir, testID)
			require.ErrorIs(t, err, artifact.ErrNoManifest, "Open of a torn commit = %v, want ErrNoManifest and ErrInvalid", err)
			require.ErrorIs(t, err, artifact.ErrInvalid, "Open of a torn commit = %v, want ErrNoManifest and ErrInvalid", err)
			mustWrite(t, dir, secs, smallOpts)
			checkRoundTrip(t, dir, secs)
		})
	}
}

func TestWriteRefusesForeignDirectory(t *testing.T) {
	dir := t.TempDir()
	foreign := filepath.Join(dir, "notes.txt")
	require.NoError(t, os.WriteFile(foreign, []byte("mine"), 0o644))
	leftover := filepath.Join(dir, "agents-00000.tar")
	require.NoError(t, os.WriteFile(leftover, []byte("old"), 0o644))
	_, err := artifact.Write(context.Background(), dir, testMeta, sampleSections(), smallOpts)
	require.ErrorIs(t, err, artifact.ErrConflict, "Write = %v, want ErrConflict naming notes.txt", err)
	require.ErrorContains(t, err, "notes.txt", "Write = %v, want ErrConflict naming notes.txt", err)
	for _, p := range []string{foreign, leftover} {
		_, err = os.Stat(p)
		require.NoError(t, err, "%s touched by a refused Write", p)
	}
	_, err = os.Stat(filepath.Join(dir, artifact.ManifestName))
	require.Error(t, err, "refused Write wrote a manifest")
}

func TestWriteRefusesBadInput(t *testing.T) {
	tests := []struct {
		name string
		meta artifact.Meta
		secs []artifact.Section
		opts artifact.Options
		want string
	}{
		{name: "empty id", meta: artifact.Meta{}, want: "empty checkpoint id"},
		{name: "id with newline", meta: artifact.Meta{CheckpointID: "a\nb"}, want: "control character"},
		{name: "upper-case section", meta: testMeta, secs: []artifact.Section{{Name: "Agents"}}, want: "section name"},
		{name: "section with slash", meta: testMeta, secs: []artifact.Section{{Name: "a/b"}}, want: "section name"},
		{name: "hidden section", meta: testMeta, secs: []artifact.Section{{Name: ".tmp-x"}}, want: "section name"},
		{name: "section with ..", meta: testMeta, secs: []artifact.Section{{Name: "a..b"}}, want: "section name"},
		{name: "duplicate section", meta: testMeta, secs: []artifact.Section{{Name: "a"}, {Name: "a"}}, want: "given twice"},
		{name: "duplicate key", meta: testMeta, secs: []artifact.Section{{Name: "a", Records: []artifact.Record{{Key: "k"}, {Key: "k"}}}}, want: "given twice"},
		{name: "empty key", meta: testMeta, secs: []artifact.Section{{Name: "a", Records: []artifact.Record{{Key: ""}}}}, want: "empty record key"},
		{name: "invalid utf-8 key", meta: testMeta, secs: []artifact.Section{{Name: "a", Records: []artifact.Record{{Key: "\xff"}}}}, want: "UTF-8"},
		{name: "record over byte bound", meta: testMeta, secs: []artifact.Section{{Name: "a", Records: []artifact.Record{{Key: "k", Data: make([]byte, 11)}}}}, opts: artifact.Options{MaxShardBytes: 10}, want: "more than the 10 bytes"},
		{name: "negative bound", meta: testMeta, opts: artifact.Options{MaxShardRecords: -1}, want: "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ckpt")
			_, err := artifact.Write(context.Background(), dir, tt.meta, tt.secs, tt.opts)
			require.ErrorIs(t, err, artifact.ErrInvalid, "Write = %v, want ErrInvalid mentioning %q", err, tt.want)
			require.ErrorContains(t, err, tt.want, "Write = %v, want ErrInvalid mentioning %q", err, tt.want)
			_, err = os.Stat(dir)
			require.ErrorIs(t, err, os.ErrNotExist, "refused Write created %s", dir)
		})
	}
}

// --- helpers that damage a valid checkpoint -------------------------------

func truncate(t *testing.T, path string, by int64) {
	t.Helper()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.NoError(t, os.Truncate(path, fi.Size()-by))
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// setMember replaces member i by a header edited by fn, with no data unless
// the type is regular.
func setMember(i int, fn func(h *tar.Header)) func([]artifactedit.Member) []artifactedit.Member {
	return func(ms []artifactedit.Member) []artifactedit.Member {
		h := *ms[i].Hdr
		fn(&h)
		data := ms[i].Data
		if h.Typeflag != tar.TypeReg {
			h.Size, data = 0, nil
		}
		ms[i] = artifactedit.Member{Hdr: &h, Data: data}
		return ms
	}
}

func rewriteIndex(t *testing.T, dir, section string, edit func([]artifact.IndexEntry) []artifact.IndexEntry) {
	t.Helper()
	path := filepath.Join(dir, artifact.IndexName(section))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var es []artifact.IndexEntry
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var e artifact.IndexEntry
		require.NoError(t, json.Unmarshal(line, &e))
		es = append(es, e)
	}
	var out []byte
	for _, e := range edit(es) {
		line, err := artifact.CanonicalIndexLine(e)
		require.NoError(t, err)
		out = append(out, line...)
	}
	require.NoError(t, os.WriteFile(path, out, 0o644))
	artifactedit.Reseal(t, dir)
}

func editManifest(fn func(m *artifact.Manifest)) func(t *testing.T, dir string) {
	return func(t *testing.T, dir string) {
		m := artifactedit.ReadManifest(t, dir)
		fn(&m)
		artifactedit.WriteManifest(t, dir, m)
	}
}

func TestOpenRefuses(t *testing.T) {
	const shard = "agents-00001.tar"
	tests := []struct {
		name   string
		damage func(t *testing.T, dir string)
		wantID string // default testID
		want   []string
	}{
		{
			name:   "corrupt member byte",
			damage: func(t *testing.T, dir string) { artifactedit.FlipByte(t, filepath.Join(dir, shard), 512+10) },
			want:   []string{shard, "manifest says", "sha256", "key"},
		},
		{
			name: "corrupt member byte, resealed archive",
			damage: func(t *testing.T, dir string) {
				artifactedit.FlipByte(t, filepath.Join(dir, shard), 512+10)
				artifactedit.Reseal(t, dir)
			},
			want: []string{shard, "sha256", "index says"},
		},
		{
			name:   "truncated archive",
			damage: func(t *testing.T, dir string) { truncate(t, filepath.Join(dir, shard), 700) },
			want:   []string{shard, "size", "manifest says"},
		},
		{
			name: "truncated archive, resealed",
			damage: func(t *testing.T, dir string) {
				truncate(t, filepath.Join(dir, shard), 2048) // the second member and the trailer
				artifactedit.Reseal(t, dir)
			},
			want: []string{shard, "missing member"},
		},
		{
			name:   "truncated index",
			damage: func(t *testing.T, dir string) { truncate(t, filepath.Join(dir, "agents.index.jsonl"), 5) },
			want:   []string{"agents.index.jsonl", "size", "manifest says"},
		},
		{
			name: "truncated index, resealed",
			damage: func(t *testing.T, dir string) {
				truncate(t, filepath.Join(dir, "agents.index.jsonl"), 5)
				artifactedit.Reseal(t, dir)
			},
			want: []string{"agents.index.jsonl", "not terminated"},
		},
		{
			name: "index line dropped, resealed",
			damage: func(t *testing.T, dir string) {
				rewriteIndex(t, dir, "agents", func(es []artifact.IndexEntry) []artifact.IndexEntry { return es[:len(es)-1] })
			},
			want: []string{"agents.index.jsonl", "4 entries, manifest says 5"},
		},
		{
			name: "index keys unsorted, resealed",
			damage: func(t *testing.T, dir string) {
				rewriteIndex(t, dir, "agents", func(es []artifact.IndexEntry) []artifact.IndexEntry {
					es[0], es[1] = es[1], es[0]
					return es
				})
			},
			want: []string{"agents.index.jsonl", "unique and sorted"},
		},
		{
			name: "index key duplicated, resealed",
			damage: func(t *testing.T, dir string) {
				rewriteIndex(t, dir, "agents", func(es []artifact.IndexEntry) []artifact.IndexEntry {
					es[1] = es[0]
					return es
				})
			},
			want: []string{"agents.index.jsonl", "unique and sorted"},
		},
		{
			name: "index member not derived from key, resealed",
			damage: func(t *testing.T, dir string) {
				rewriteIndex(t, dir, "agents", func(es []artifact.IndexEntry) []artifact.IndexEntry {
					es[2].Member = "x.rec"
					return es
				})
			},
			want: []string{"agents.index.jsonl", `member "x.rec"`},
		},
		{
			name: "index digest mismatch",
			damage: editManifest(func(m *artifact.Manifest) {
				m.Sections[0].Index.SHA256 = strings.Repeat("0", 64)
			}),
			want: []string{"agents.index.jsonl", "sha256", "manifest says " + strings.Repeat("0", 64)},
		},
		{
			name: "extra member in a tar",
			damage: func(t *testing.T, dir string) {
				artifactedit.RewriteShard(t, dir, shard, func(ms []artifactedit.Member) []artifactedit.Member {
					h := *ms[0].Hdr
					h.Name = artifact.MemberName("intruder")
					return append(ms, artifactedit.Member{Hdr: &h, Data: ms[0].Data})
				})
			},
			want: []string{shard, "extra member", artifact.MemberName("intruder")},
		},
		{
			name: "duplicate member in a tar",
			damage: func(t *testing.T, dir string) {
				artifactedit.RewriteShard(t, dir, shard, func(ms []artifactedit.Member) []artifactedit.Member { return append(ms, ms[1]) })
			},
			want: []string{shard, "duplicate member"},
		},
		{
			name: "missing member",
			damage: func(t *testing.T, dir string) {
				artifactedit.RewriteShard(t, dir, shard, func(ms []artifactedit.Member) []artifactedit.Member { return ms[:1] })
			},
			want: []string{shard, "missing member"},
		},
		{
			name: "members reordered",
			damage: func(t *testing.T, dir string) {
				artifactedit.RewriteShard(t, dir, shard, func(ms []artifactedit.Member) []artifactedit.Member { return []artifactedit.Member{ms[1], ms[0]} })
			},
			want: []string{shard, "the index lists"},
		},
		{
			name: "symlink member",
			damage: func(t *testing.T, dir string) {
				artifactedit.RewriteShard(t, dir, shard, setMember(0, func(h *tar.Header) { h.Typeflag, h.Linkname = tar.TypeSymlink, "/etc/passwd" }))
			},
			want: []string{shard, "symlink", "/etc/passwd"},
		},
		{
			name: "hardlink member",
			damage: func(t *testing.T, dir string) {
				artifactedit.RewriteShard(t, dir, shard, setMember(1, func(h *tar.Header) { h.Typeflag, h.Linkname = tar.TypeLink, "../../x" }))
			},
			want: []string{shard, "hardlink"},
		},
		{
			name: "directory member",
			damage: func(t *testing.T, dir string) {
				artifactedit.RewriteShard(t, dir, shard, setMember(0, func(h *tar.Header) { h.Typeflag = tar.TypeDir }))
			},
			want: []string{shard, "directory"},
		},
		{
			name: "device member",
			damage: func(t *testing.T, dir string) {
				artifactedit.RewriteShard(t, dir, shard, setMember(0, func(h *tar.Header) { h.Typeflag = tar.TypeChar }))
			},
			want: []string{shard, "device"},
		},
		{
			name: "path escape member",
			damage: func(t *testing.T, dir string) {
				artifactedit.RewriteShard(t, dir, shard, setMember(0, func(h *tar.Header) { h.Name = "../x" }))
			},
			want: []string{shard, `"../x"`, "path escape"},
		},
		{
			name: "absolute path member",
			damage: func(t *testing.T, dir string) {
				artifactedit.RewriteShard(t, dir, shard, setMember(0, func(h *tar.Header) { h.Name = "/abs" }))
			},
			want: []string{shard, `"/abs"`, "absolute"},
		},
		{
			name: "member in a subdirectory",
			damage: func(t *testing.T, dir string) {
				artifactedit.RewriteShard(t, dir, shard, setMember(0, func(h *tar.Header) { h.Name = "sub/" + h.Name }))
			},
			want: []string{shard, "path separator"},
		},
		{
			name: "member header with an owner",
			damage: func(t *testing.T, dir string) {
				artifactedit.RewriteShard(t, dir, shard, setMember(0, func(h *tar.Header) { h.Uname = "root" }))
			},
			want: []string{shard, "deterministic form"},
		},
		{
			name: "member with PAX records",
			damage: func(t *testing.T, dir string) {
				artifactedit.RewriteShard(t, dir, shard, setMember(0, func(h *tar.Header) {
					h.Format, h.PAXRecords = tar.FormatPAX, map[string]string{"comment": "hi"}
				}))
			},
			want: []string{shard, "deterministic form"},
		},
		{
			name: "trailing bytes after the archive",
			damage: func(t *testing.T, dir string) {
				f, err := os.OpenFile(filepath.Join(dir, shard), os.O_APPEND|os.O_WRONLY, 0)
				require.NoError(t, err)
				f.Write(make([]byte, 512))
				f.Close()
				artifactedit.Reseal(t, dir)
			},
			want: []string{shard, "deterministic archive"},
		},
		{
			name:   "wrong checkpoint id",
			damage: func(*testing.T, string) {},
			wantID: "ckpt-0002",
			want:   []string{artifact.ManifestName, `checkpoint id "ckpt-0001", want "ckpt-0002"`},
		},
		{
			name:   "unknown schema version",
			damage: editManifest(func(m *artifact.Manifest) { m.Schema = 2 }),
			want:   []string{artifact.ManifestName, "unknown schema version 2"},
		},
		{
			name: "manifest edited without resealing",
			damage: func(t *testing.T, dir string) {
				path := filepath.Join(dir, artifact.ManifestName)
				b, _ := os.ReadFile(path)
				b = bytes.Replace(b, []byte(`"set": "s1"`), []byte(`"set": "s2"`), 1)
				os.WriteFile(path, b, 0o644)
			},
			want: []string{artifact.ManifestName, "digest mismatch"},
		},
		{
			name: "manifest not canonical",
			damage: func(t *testing.T, dir string) {
				path := filepath.Join(dir, artifact.ManifestName)
				b, _ := os.ReadFile(path)
				os.WriteFile(path, append(b, ' '), 0o644)
			},
			want: []string{artifact.ManifestName, "canonical"},
		},
		{
			name: "manifest record count off",
			damage: editManifest(func(m *artifact.Manifest) {
				m.Records++
			}),
			want: []string{artifact.ManifestName, "manifest says 16"},
		},
		{
			name: "extra file in the directory",
			damage: func(t *testing.T, dir string) {
				os.WriteFile(filepath.Join(dir, "agents-00009.tar"), nil, 0o644)
			},
			want: []string{"agents-00009.tar", "unexpected entry"},
		},
		{
			name: "leftover temporary file",
			damage: func(t *testing.T, dir string) {
				os.WriteFile(filepath.Join(dir, ".tmp-manifest.json-1"), nil, 0o644)
			},
			want: []string{".tmp-manifest.json-1", "temporary"},
		},
		{
			name: "subdirectory",
			damage: func(t *testing.T, dir string) {
				os.Mkdir(filepath.Join(dir, "sub"), 0o755)
			},
			want: []string{"sub", "unexpected entry"},
		},
		{
			name: "shard replaced by a symlink",
			damage: func(t *testing.T, dir string) {
				p, target := filepath.Join(dir, shard), filepath.Join(t.TempDir(), shard)
				os.Rename(p, target)
				os.Symlink(target, p)
			},
			want: []string{shard, "not a regular file"},
		},
		{
			name: "missing manifest",
			damage: func(t *testing.T, dir string) {
				os.Remove(filepath.Join(dir, artifact.ManifestName))
			},
			want: []string{artifact.ManifestName, "not a checkpoint"},
		},
		{
			name:   "manifest listing a missing shard",
			damage: func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, shard)) },
			want:   []string{shard, "missing"},
		},
		{
			name: "manifest listing an extra shard",
			damage: editManifest(func(m *artifact.Manifest) {
				s := &m.Sections[0]
				s.Shards = append(s.Shards, artifact.ShardRef{Name: artifact.ShardName(s.Name, len(s.Shards)), Size: 1024, SHA256: strings.Repeat("a", 64), Records: 1})
				s.Records++
				m.Records++
			}),
			want: []string{"agents-00003.tar", "missing"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			mustWrite(t, dir, sampleSections(), smallOpts)
			_, err := artifact.Open(context.Background(), dir, testID)
			require.NoError(t, err, "Open before the damage")
			tt.damage(t, dir)
			want := testID
			if tt.wantID != "" {
				want = tt.wantID
			}
			c, err := artifact.Open(context.Background(), dir, want)
			require.Nil(t, c, "Open returned a checkpoint (err %v)", err)
			require.ErrorIs(t, err, artifact.ErrInvalid, "Open = %v, want ErrInvalid", err)
			for _, w := range tt.want {
				assert.ErrorContains(t, err, w, "error %q does not mention %q", err, w)
			}
		})
	}
}

// TestSectionRechecks: a shard changed after Open yields an error from
// Section, never the changed data.
func TestSectionRechecks(t *testing.T) {
	dir := t.TempDir()
	mustWrite(t, dir, sampleSections(), smallOpts)
	c, err := artifact.Open(context.Background(), dir, testID)
	require.NoError(t, err)
	artifactedit.FlipByte(t, filepath.Join(dir, "transcripts-00002.tar"), 512+3)
	recs, err := c.Section(context.Background(), "transcripts")
	require.ErrorIs(t, err, artifact.ErrInvalid, "Section after corruption = %d records, %v; want nil, ErrInvalid", len(recs), err)
	require.Nil(t, recs, "Section after corruption = %d records, %v; want nil, ErrInvalid", len(recs), err)
	_, err = c.Section(context.Background(), "agents")
	require.NoError(t, err, "untouched section")
	_, err = c.Section(context.Background(), "nope")
	require.ErrorIs(t, err, os.ErrNotExist, "unknown section: %v", err)
}

func TestOpenCancelled(t *testing.T) {
	dir := t.TempDir()
	mustWrite(t, dir, sampleSections(), smallOpts)
	ctx, cancel := context.WithDeadline(context.Background(), time.Unix(1, 0))
	defer cancel()
	_, err := artifact.Open(ctx, dir, testID)
	require.ErrorIs(t, err, context.DeadlineExceeded, "Open with an expired context = %v", err)
}
