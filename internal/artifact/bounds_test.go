package artifact_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/artifact"
	"github.com/turnstile-rl/turnstile/internal/testsupport/artifactedit"
)

// allocatedDuring is how many bytes the Go heap allocated while fn ran (all
// allocations, freed or not: a peak cannot hide between two samples).
func allocatedDuring(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// growIndex makes the first section's index a sparse file of size bytes
// (its lines, then zeros) and re-seals the manifest to claim exactly that
// file: what anyone who can write the checkpoint store can do, since the
// manifest's digest is not keyed.
func growIndex(t *testing.T, dir string, size int64) string {
	t.Helper()
	m := artifactedit.ReadManifest(t, dir)
	sm := &m.Sections[0]
	require.NoError(t, os.Truncate(filepath.Join(dir, sm.Index.Name), size))
	sm.Index.Size = size
	sm.Index.SHA256 = sha([]byte("not the digest of a sparse file"))
	artifactedit.WriteManifest(t, dir, m)
	return sm.Index.Name
}

// A manifest re-sealed to claim a 3 GiB index is refused without reading
// the index: the process's heap does not grow by anything near the claim.
func TestOpenRefusesHugeIndexWithFlatMemory(t *testing.T) {
	dir := t.TempDir()
	mustWrite(t, dir, sampleSections(), smallOpts)
	const claim = 3 << 30
	name := growIndex(t, dir, claim)

	var err error
	grew := allocatedDuring(func() { _, err = artifact.Open(context.Background(), dir, testID) })
	require.ErrorIs(t, err, artifact.ErrInvalid)
	require.ErrorContains(t, err, name)
	require.Less(t, grew, uint64(64<<20), "Open allocated %d bytes for an index claiming %d", grew, claim)
}

// A manifest re-sealed to claim more records than any index could hold is
// refused, not trusted as a size to allocate.
func TestOpenRefusesImpossibleRecordCount(t *testing.T) {
	dir := t.TempDir()
	mustWrite(t, dir, []artifact.Section{{Name: "one", Records: records("r", 1, 10, 1)}}, artifact.Options{})
	m := artifactedit.ReadManifest(t, dir)
	m.Records = 1 << 60
	m.Sections[0].Records = 1 << 60
	m.Sections[0].Shards[0].Records = 1 << 60
	artifactedit.WriteManifest(t, dir, m)

	var err error
	grew := allocatedDuring(func() {
		_, err = artifact.Open(context.Background(), dir, testID)
	})
	require.ErrorIs(t, err, artifact.ErrInvalid)
	require.Less(t, grew, uint64(64<<20))
}

func TestOpenHugeIndexErrorNamesTheLimit(t *testing.T) {
	dir := t.TempDir()
	mustWrite(t, dir, sampleSections(), smallOpts)
	growIndex(t, dir, 3<<30)
	_, err := artifact.Open(context.Background(), dir, testID)
	require.True(t, errors.Is(err, artifact.ErrInvalid))
	require.ErrorContains(t, err, artifact.EnvMaxIndexBytes)
}

// An index under the bound is hashed as it streams by: a re-sealed 512 MiB
// index of zeros is refused by its digest with the heap as flat as for a
// refusal up front.
func TestOpenStreamsIndexUnderTheBound(t *testing.T) {
	dir := t.TempDir()
	mustWrite(t, dir, sampleSections(), smallOpts)
	const claim = 512 << 20
	name := growIndex(t, dir, claim)

	var err error
	grew := allocatedDuring(func() {
		_, err = artifact.OpenWith(context.Background(), dir, testID, artifact.Settings{MaxIndexBytes: 1 << 30})
	})
	require.ErrorIs(t, err, artifact.ErrInvalid)
	require.ErrorContains(t, err, name+": sha256")
	require.Less(t, grew, uint64(16<<20), "Open allocated %d bytes streaming an index of %d", grew, claim)
}

// A record claiming more than the record bound is refused before any of
// it is read.
func TestOpenRefusesRecordOverTheBound(t *testing.T) {
	dir := t.TempDir()
	mustWrite(t, dir, []artifact.Section{{Name: "big", Records: records("r", 2, 4096, 1)}}, artifact.Options{})
	_, err := artifact.OpenWith(context.Background(), dir, testID, artifact.Settings{MaxRecordBytes: 1024})
	require.ErrorIs(t, err, artifact.ErrInvalid)
	require.ErrorContains(t, err, "claims 4096 bytes, more than the 1024")
	require.ErrorContains(t, err, artifact.EnvMaxRecordBytes)

	_, err = artifact.OpenWith(context.Background(), dir, testID, artifact.Settings{MaxRecordBytes: 4096})
	require.NoError(t, err)
}

// An index line longer than any canonical one is refused without reading
// the rest of it into memory.
func TestOpenRefusesOverlongIndexLine(t *testing.T) {
	dir := t.TempDir()
	mustWrite(t, dir, sampleSections(), smallOpts)
	m := artifactedit.ReadManifest(t, dir)
	sm := m.Sections[0]
	long := append(bytes.Repeat([]byte("x"), 1<<20), '\n')
	require.NoError(t, os.WriteFile(filepath.Join(dir, sm.Index.Name), long, 0o600))
	artifactedit.Reseal(t, dir)
	_, err := artifact.Open(context.Background(), dir, testID)
	require.ErrorIs(t, err, artifact.ErrInvalid)
	require.ErrorContains(t, err, "line 1: longer than")
}

func TestOpenRefusesManifestOverTheBound(t *testing.T) {
	dir := t.TempDir()
	mustWrite(t, dir, sampleSections(), smallOpts)
	_, err := artifact.OpenWith(context.Background(), dir, testID, artifact.Settings{MaxManifestBytes: 100})
	require.ErrorIs(t, err, artifact.ErrInvalid)
	require.ErrorContains(t, err, artifact.EnvMaxManifestBytes)
}
