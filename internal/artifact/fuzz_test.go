package artifact_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/artifact"
	"github.com/turnstile-rl/turnstile/internal/storage"
)

// The fuzz targets validate checkpoints held in memory (storage.Memory,
// the object-store backend over an in-memory bucket) and call OpenStore,
// the one validator Open and every restore read through: a checkpoint on
// disk costs a directory, seven files and their removal per exec, which
// held the targets to a few hundred execs a second. What the store layer
// adds for a local directory (symlinks, non-regular files) is covered by
// the tests in artifact_test.go and storage.

// fuzzSections are the sections every fuzz exec starts from: two sections,
// four shards (at most two records each), so that a mutation can hit a
// member, a shard boundary, an index line or the manifest.
func fuzzSections() []artifact.Section {
	return []artifact.Section{
		{Name: "agents", Records: records("a", 5, 100, 2)},
		{Name: "env-http-127.0.0.1-8091", Records: records("e", 2, 0, 3)},
	}
}

// checkpointFiles writes secs as a checkpoint and returns its files by name
// and the names, sorted.
func checkpointFiles(f *testing.F, secs []artifact.Section) (map[string][]byte, []string) {
	ctx := context.Background()
	st, err := storage.Memory("fuzz")
	require.NoError(f, err)
	_, err = artifact.WriteTo(ctx, st, testMeta, secs, artifact.Options{MaxShardRecords: 2})
	require.NoError(f, err)
	entries, err := st.List(ctx)
	require.NoError(f, err)
	files := map[string][]byte{}
	var names []string
	for _, e := range entries {
		b, err := storage.ReadAll(ctx, st, e.Name, 0)
		require.NoError(f, err)
		names = append(names, e.Name)
		files[e.Name] = b
	}
	slices.Sort(names)
	return files, names
}

// memoryCheckpoint stores files in a fresh in-memory store.
func memoryCheckpoint(t *testing.T, files map[string][]byte) storage.Store {
	st, err := storage.Memory("fuzz")
	require.NoError(t, err)
	for name, b := range files {
		require.NoError(t, storage.WriteBytes(context.Background(), st, name, b))
	}
	return st
}

// sameSections fails t unless c holds exactly secs.
func sameSections(t *testing.T, c *artifact.Checkpoint, secs []artifact.Section, what string) {
	for _, s := range secs {
		got, err := c.Section(context.Background(), s.Name)
		require.NoError(t, err, "%s: Section(%q) after a successful Open", what, s.Name)
		want := sorted(s.Records)
		require.Len(t, got, len(want), "%s: %s has %d records, want %d", what, s.Name, len(got), len(want))
		for i := range want {
			require.Equal(t, want[i].Key, got[i].Key, "%s: %s record %d differs", what, s.Name, i)
			require.Equal(t, string(want[i].Data), string(got[i].Data), "%s: %s record %d differs", what, s.Name, i)
		}
	}
}

// FuzzOpen alters one file of a valid checkpoint (flip, truncate, insert,
// delete, or add a file) and demands that OpenStore never panics, refuses
// every alteration with ErrInvalid, and accepts the checkpoint, content
// intact, when nothing was altered. The seeds run as a normal test; explore
// with
//
//	go test -run '^$' -fuzz '^FuzzOpen$' ./artifact/
func FuzzOpen(f *testing.F) {
	secs := fuzzSections()
	files, names := checkpointFiles(f, secs)

	// Seeds: every operation on every file, at a few offsets (header, member
	// data, digest text), plus the unaltered checkpoint.
	for i := range names {
		for _, off := range []uint32{0, 100, 148, 515, 600, 1500} {
			f.Add(uint8(i), off, uint8(0x01), uint8(opFlip))
		}
		f.Add(uint8(i), uint32(0), uint8(0), uint8(opTruncate))
		f.Add(uint8(i), uint32(1025), uint8(0), uint8(opTruncate))
		f.Add(uint8(i), uint32(7), uint8(' '), uint8(opInsert))
		f.Add(uint8(i), uint32(0), uint8(0), uint8(opDelete))
	}
	f.Add(uint8(0), uint32(0), uint8('x'), uint8(opAddFile))
	f.Add(uint8(0), uint32(0), uint8(0), uint8(opFlip)) // unaltered

	f.Fuzz(func(t *testing.T, file uint8, off uint32, val uint8, op uint8) {
		target := names[int(file)%len(names)]
		altered := make(map[string][]byte, len(files)+1)
		changed := false
		for _, name := range names {
			b := files[name]
			if name == target {
				var keep bool
				b, keep = mutate(slices.Clone(b), off, val, op)
				if !keep {
					changed = true
					continue
				}
				changed = changed || !bytes.Equal(b, files[name])
			}
			altered[name] = b
		}
		if op%opCount == opAddFile {
			changed = true
			altered[fmt.Sprintf("extra-%d", val)] = []byte{val}
		}

		c, err := artifact.OpenStore(context.Background(), memoryCheckpoint(t, altered), testID)
		if changed {
			require.Nil(t, c, "altered %s (op %d, off %d, val %d): Open = %v, %v; want nil, ErrInvalid", target, op%opCount, off, val, c, err)
			require.ErrorIs(t, err, artifact.ErrInvalid, "altered %s (op %d, off %d, val %d): Open = %v, %v; want nil, ErrInvalid", target, op%opCount, off, val, c, err)
			return
		}
		require.NoError(t, err, "unaltered checkpoint refused")
		sameSections(t, c, secs, "unaltered checkpoint")
	})
}

const (
	opFlip = iota
	opTruncate
	opInsert
	opDelete
	opAddFile
	opCount
)

// mutate applies one operation to b; keep is false when the file is to be
// deleted.
func mutate(b []byte, off uint32, val uint8, op uint8) (out []byte, keep bool) {
	switch op % opCount {
	case opFlip:
		if len(b) > 0 {
			b[int(off)%len(b)] ^= val
		}
	case opTruncate:
		b = b[:int(off)%(len(b)+1)]
	case opInsert:
		i := int(off) % (len(b) + 1)
		b = slices.Insert(b, i, val)
	case opDelete:
		return nil, false
	}
	return b, true
}

// FuzzOpenResealed alters a shard or an index and then re-seals the manifest
// to the altered files, as a buggy writer would, so that the mutation gets
// past the archive digests into the tar, index and member checks. OpenStore
// must never panic, and if it accepts the checkpoint, every record must be
// exactly the original one: altered bytes may only be ones no reader can
// observe.
func FuzzOpenResealed(f *testing.F) {
	secs := fuzzSections()
	files, all := checkpointFiles(f, secs)
	var names []string // shards and indexes only: reseal rewrites the manifest
	for _, name := range all {
		if name != artifact.ManifestName {
			names = append(names, name)
		}
	}
	for i := range names {
		for _, off := range []uint32{0, 100, 124, 148, 156, 257, 265, 345, 515, 600, 1100} {
			f.Add(uint8(i), off, uint8(0x01), uint8(opFlip))
			f.Add(uint8(i), off, uint8('0'), uint8(opInsert))
		}
		f.Add(uint8(i), uint32(1024), uint8(0), uint8(opTruncate))
	}

	f.Fuzz(func(t *testing.T, file uint8, off uint32, val uint8, op uint8) {
		if op%opCount == opDelete || op%opCount == opAddFile {
			return // covered by FuzzOpen; nothing to reseal
		}
		target := names[int(file)%len(names)]
		altered := maps.Clone(files)
		altered[target], _ = mutate(slices.Clone(files[target]), off, val, op)
		resealFiles(t, altered)
		c, err := artifact.OpenStore(context.Background(), memoryCheckpoint(t, altered), testID)
		if err != nil {
			require.Nil(t, c, "Open = %v, %v; want nil, ErrInvalid", c, err)
			require.ErrorIs(t, err, artifact.ErrInvalid, "Open = %v, %v; want nil, ErrInvalid", c, err)
			return
		}
		sameSections(t, c, secs, "altered "+target+" accepted")
	})
}

// resealFiles is reseal (artifact_test.go) of a checkpoint held as files by
// name: the manifest is made to agree with the files' sizes and digests.
func resealFiles(t *testing.T, files map[string][]byte) {
	var m artifact.Manifest
	require.NoError(t, json.Unmarshal(files[artifact.ManifestName], &m))
	refresh := func(name string, size *int64, sum *string) {
		b := files[name]
		*size, *sum = int64(len(b)), sha(b)
	}
	for i := range m.Sections {
		sm := &m.Sections[i]
		refresh(sm.Index.Name, &sm.Index.Size, &sm.Index.SHA256)
		for j := range sm.Shards {
			refresh(sm.Shards[j].Name, &sm.Shards[j].Size, &sm.Shards[j].SHA256)
		}
	}
	b, err := artifact.SealManifest(&m)
	require.NoError(t, err)
	files[artifact.ManifestName] = b
}
