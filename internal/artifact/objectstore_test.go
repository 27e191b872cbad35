package artifact_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/artifact"
	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/internal/storage/s3test"
	"github.com/turnstile-rl/turnstile/internal/testsupport/artifactedit"
)

// s3Checkpoint is a checkpoint location on a real S3-compatible server:
// the store, and the directory the server keeps its objects in (to damage
// them behind its back, as a failing disk or a bad copy would).
type s3Checkpoint struct {
	st  storage.Store
	dir string
}

func newS3Checkpoint(t *testing.T) s3Checkpoint {
	t.Helper()
	srv := s3test.Start(t)
	srv.SetEnv(t)
	var o storage.Opener
	t.Cleanup(func() { o.Close() })
	st, err := o.Open(context.Background(), srv.Bucket(t, "ckpt", "root/"+testID))
	require.NoError(t, err)
	return s3Checkpoint{st: st, dir: srv.ObjectPath("ckpt", "root/"+testID)}
}

// TestObjectStoreRoundTrip writes a checkpoint to S3 and reads it back
// with every record intact, byte-identical to the local directory's
// files, and a retried write returns the same manifest.
func TestObjectStoreRoundTrip(t *testing.T) {
	ctx := context.Background()
	c := newS3Checkpoint(t)
	m, err := artifact.WriteTo(ctx, c.st, testMeta, sampleSections(), smallOpts)
	require.NoError(t, err)
	cp, err := artifact.OpenStore(ctx, c.st, testID)
	require.NoError(t, err)
	for _, sec := range sampleSections() {
		got, err := cp.Section(ctx, sec.Name)
		require.NoError(t, err)
		want := sorted(sec.Records)
		require.Len(t, got, len(want), "section %s: %d records, want %d", sec.Name, len(got), len(want))
		for i := range want {
			require.Equal(t, want[i].Key, got[i].Key, "section %s record %d differs", sec.Name, i)
			require.Equal(t, string(want[i].Data), string(got[i].Data), "section %s record %d differs", sec.Name, i)
		}
	}
	local := t.TempDir()
	mustWrite(t, local, sampleSections(), smallOpts)
	for name, data := range readDir(t, local) {
		got, err := storage.ReadAll(ctx, c.st, name, 0)
		require.NoError(t, err, "object %s differs from the local file (%v)", name, err)
		require.Equal(t, string(data), string(got), "object %s differs from the local file (%v)", name, err)
	}
	again, err := artifact.WriteTo(ctx, c.st, testMeta, reversed(sampleSections()), smallOpts)
	require.NoError(t, err, "retried write = %s, %v; want %s", again.Digest, err, m.Digest)
	require.Equal(t, m.Digest, again.Digest, "retried write = %s, %v; want %s", again.Digest, err, m.Digest)
	_, err = artifact.WriteTo(ctx, c.st, artifact.Meta{CheckpointID: testID}, sampleSections(), smallOpts)
	require.ErrorIs(t, err, artifact.ErrConflict, "write of other content over it = %v; want ErrConflict", err)
	size, err := artifact.SizeIn(ctx, c.st, m)
	require.NoError(t, err, "SizeIn = %d, %v", size, err)
	require.Greater(t, size, int64(0), "SizeIn = %d, %v", size, err)
}

// TestObjectStoreFailsClosed damages a committed checkpoint on the
// server's disk in each way a store can go wrong; OpenStore must refuse
// it with ErrInvalid and return no data.
func TestObjectStoreFailsClosed(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, c s3Checkpoint)
		want   error
	}{
		{"torn: no manifest", func(t *testing.T, c s3Checkpoint) {
			must(t, os.Remove(filepath.Join(c.dir, artifact.ManifestName)))
		}, artifact.ErrNoManifest},
		{"flipped byte in a shard", func(t *testing.T, c s3Checkpoint) {
			artifactedit.FlipByte(t, filepath.Join(c.dir, artifact.ShardName("transcripts", 0)), 600)
		}, artifact.ErrInvalid},
		{"truncated shard", func(t *testing.T, c s3Checkpoint) {
			truncate(t, filepath.Join(c.dir, artifact.ShardName("agents", 0)), 100)
		}, artifact.ErrInvalid},
		{"shard missing", func(t *testing.T, c s3Checkpoint) {
			must(t, os.Remove(filepath.Join(c.dir, artifact.ShardName("agents", 0))))
		}, artifact.ErrInvalid},
		{"edited index", func(t *testing.T, c s3Checkpoint) {
			artifactedit.FlipByte(t, filepath.Join(c.dir, artifact.IndexName("agents")), 3)
		}, artifact.ErrInvalid},
		{"extra object", func(t *testing.T, c s3Checkpoint) {
			must(t, os.WriteFile(filepath.Join(c.dir, "stray.tar"), []byte("x"), 0o644))
		}, artifact.ErrInvalid},
		{"nested prefix", func(t *testing.T, c s3Checkpoint) {
			must(t, os.MkdirAll(filepath.Join(c.dir, "sub"), 0o755))
			must(t, os.WriteFile(filepath.Join(c.dir, "sub", "x"), []byte("x"), 0o644))
		}, artifact.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			c := newS3Checkpoint(t)
			_, err := artifact.WriteTo(ctx, c.st, testMeta, sampleSections(), smallOpts)
			require.NoError(t, err)
			tt.damage(t, c)
			cp, err := artifact.OpenStore(ctx, c.st, testID)
			require.ErrorIs(t, err, tt.want, "OpenStore of a damaged checkpoint = %v, %v; want %v", cp, err, tt.want)
			require.ErrorIs(t, err, artifact.ErrInvalid, "OpenStore of a damaged checkpoint = %v, %v; want %v", cp, err, tt.want)
			require.Nil(t, cp, "OpenStore of a damaged checkpoint = %v, %v; want %v", cp, err, tt.want)
		})
	}
}

// TestObjectStoreTornCommitRecovers: a commit that died before its
// manifest left shards behind; the next commit of the same content
// removes them and completes, and the checkpoint validates.
func TestObjectStoreTornCommitRecovers(t *testing.T) {
	ctx := context.Background()
	c := newS3Checkpoint(t)
	calls := 0
	opts := smallOpts
	opts.BetweenFiles = func() {
		calls++
		if calls == 2 {
			panic("killed between files")
		}
	}
	func() {
		defer func() { _ = recover() }()
		_, _ = artifact.WriteTo(ctx, c.st, testMeta, sampleSections(), opts)
	}()
	_, err := artifact.OpenStore(ctx, c.st, testID)
	require.ErrorIs(t, err, artifact.ErrNoManifest, "torn commit opens as %v; want ErrNoManifest", err)
	_, err = artifact.WriteTo(ctx, c.st, testMeta, sampleSections(), smallOpts)
	require.NoError(t, err)
	_, err = artifact.OpenStore(ctx, c.st, testID)
	require.NoError(t, err)
}

func must(t *testing.T, err error) {
	t.Helper()
	require.NoError(t, err)
}
