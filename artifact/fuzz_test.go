package artifact_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/turnstile-rl/turnstile/artifact"
)

// FuzzOpen alters one file of a valid checkpoint (flip, truncate, insert,
// delete, or add a file) and demands that Open never panics, refuses every
// alteration with ErrInvalid, and accepts the checkpoint, content intact,
// when nothing was altered. The seeds run as a normal test; explore with
//
//	go test -run '^$' -fuzz FuzzOpen ./artifact/
func FuzzOpen(f *testing.F) {
	secs := []artifact.Section{
		{Name: "agents", Records: records("a", 5, 100, 2)},
		{Name: "env-http-127.0.0.1-8091", Records: records("e", 2, 0, 3)},
	}
	tmpl := f.TempDir()
	if _, err := artifact.Write(context.Background(), tmpl, testMeta, secs, artifact.Options{MaxShardRecords: 2}); err != nil {
		f.Fatal(err)
	}
	entries, err := os.ReadDir(tmpl)
	if err != nil {
		f.Fatal(err)
	}
	var names []string
	files := map[string][]byte{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(tmpl, e.Name()))
		if err != nil {
			f.Fatal(err)
		}
		names = append(names, e.Name())
		files[e.Name()] = b
	}
	slices.Sort(names)

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
		dir := t.TempDir()
		target := names[int(file)%len(names)]
		altered := false
		for _, name := range names {
			b := slices.Clone(files[name])
			if name == target {
				var keep bool
				b, keep = mutate(b, off, val, op)
				if !keep {
					altered = true
					continue
				}
				altered = altered || !bytes.Equal(b, files[name])
			}
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if op%opCount == opAddFile {
			altered = true
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("extra-%d", val)), []byte{val}, 0o644); err != nil {
				t.Fatal(err)
			}
		}

		c, err := artifact.Open(context.Background(), dir, testID)
		if altered {
			if c != nil || !errors.Is(err, artifact.ErrInvalid) {
				t.Fatalf("altered %s (op %d, off %d, val %d): Open = %v, %v; want nil, ErrInvalid", target, op%opCount, off, val, c, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("unaltered checkpoint refused: %v", err)
		}
		for _, s := range secs {
			got, err := c.Section(context.Background(), s.Name)
			if err != nil {
				t.Fatal(err)
			}
			want := sorted(s.Records)
			if len(got) != len(want) {
				t.Fatalf("%s: %d records, want %d", s.Name, len(got), len(want))
			}
			for i := range want {
				if got[i].Key != want[i].Key || !bytes.Equal(got[i].Data, want[i].Data) {
					t.Fatalf("%s: record %d differs", s.Name, i)
				}
			}
		}
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
// past the archive digests into the tar, index and member checks. Open must
// never panic, and if it accepts the directory, every record must be exactly
// the original one: altered bytes may only be ones no reader can observe.
func FuzzOpenResealed(f *testing.F) {
	secs := []artifact.Section{
		{Name: "agents", Records: records("a", 5, 100, 2)},
		{Name: "env-http-127.0.0.1-8091", Records: records("e", 2, 0, 3)},
	}
	tmpl := f.TempDir()
	if _, err := artifact.Write(context.Background(), tmpl, testMeta, secs, artifact.Options{MaxShardRecords: 2}); err != nil {
		f.Fatal(err)
	}
	entries, err := os.ReadDir(tmpl)
	if err != nil {
		f.Fatal(err)
	}
	var names []string // shards and indexes only: reseal rewrites the manifest
	files := map[string][]byte{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(tmpl, e.Name()))
		if err != nil {
			f.Fatal(err)
		}
		files[e.Name()] = b
		if e.Name() != artifact.ManifestName {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
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
		dir := t.TempDir()
		target := names[int(file)%len(names)]
		for name, b := range files {
			b = slices.Clone(b)
			if name == target {
				b, _ = mutate(b, off, val, op)
			}
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		reseal(t, dir)
		c, err := artifact.Open(context.Background(), dir, testID)
		if err != nil {
			if c != nil || !errors.Is(err, artifact.ErrInvalid) {
				t.Fatalf("Open = %v, %v; want nil, ErrInvalid", c, err)
			}
			return
		}
		for _, s := range secs {
			got, err := c.Section(context.Background(), s.Name)
			if err != nil {
				t.Fatalf("Section(%q) after a successful Open: %v", s.Name, err)
			}
			want := sorted(s.Records)
			if len(got) != len(want) {
				t.Fatalf("altered %s accepted: %s has %d records, want %d", target, s.Name, len(got), len(want))
			}
			for i := range want {
				if got[i].Key != want[i].Key || !bytes.Equal(got[i].Data, want[i].Data) {
					t.Fatalf("altered %s accepted: %s record %d differs", target, s.Name, i)
				}
			}
		}
	})
}
