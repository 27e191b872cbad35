package artifact

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/turnstile-rl/turnstile/internal/storage"
)

// plannedSection is a validated, sorted section cut into shards.
type plannedSection struct {
	name   string
	shards [][]Record // each sorted by key; concatenated they are sorted
}

// Write commits sections as checkpoint meta.CheckpointID into dir (created if
// missing) and returns its manifest.
//
// Files are written one at a time, each to a temporary name in dir, fsynced,
// renamed and followed by an fsync of dir; manifest.json comes last, so a
// crash leaves either a complete checkpoint or a directory without a manifest,
// which Open refuses.
//
// If dir already holds a manifest, Write writes nothing: when it describes
// exactly this content and the checkpoint validates, Write returns the same
// Manifest (a retried commit); otherwise it returns an error wrapping
// ErrConflict or ErrInvalid. If dir has no manifest, leftovers of a torn
// commit (temporary files, shards, indexes) are removed first; any other
// entry makes Write refuse (ErrConflict) without touching anything.
//
// One writer per directory at a time: Write takes no lock, and its cleanup
// would remove a concurrent writer's temporary files.
//
// Sections and records may come in any order; the bytes written do not
// depend on it. Write does not modify the caller's records; they must not
// change while Write runs.
func Write(ctx context.Context, dir string, meta Meta, sections []Section, opts Options) (Manifest, error) {
	if dir == "" {
		return Manifest{}, fmt.Errorf("write checkpoint: empty directory: %w", ErrInvalid)
	}
	st, err := storage.Dir(dir)
	if err != nil {
		return Manifest{}, fmt.Errorf("write checkpoint %q: %w", dir, err)
	}
	return WriteTo(ctx, st, meta, sections, opts)
}

// WriteTo is Write into a store: a local directory or an object-store
// prefix. Every file is one atomic write (a whole object PUT, or a local
// temporary file renamed into place); the manifest comes last and is
// created conditionally, so of two commits racing for one location only one
// manifest is ever stored and the other validates it as a retry.
func WriteTo(ctx context.Context, st storage.Store, meta Meta, sections []Section, opts Options) (Manifest, error) {
	loc := st.Location()
	opts, err := opts.withDefaults()
	if err != nil {
		return Manifest{}, fmt.Errorf("write checkpoint %q: %w: %w", loc, err, ErrInvalid)
	}
	if err := validCheckpointID(meta.CheckpointID); err != nil {
		return Manifest{}, fmt.Errorf("write checkpoint %q: %w: %w", loc, err, ErrInvalid)
	}
	if err := validLabels(meta.Labels); err != nil {
		return Manifest{}, fmt.Errorf("write checkpoint %q: %w: %w", loc, err, ErrInvalid)
	}
	planned, err := plan(sections, opts)
	if err != nil {
		return Manifest{}, fmt.Errorf("write checkpoint %q: %w: %w", loc, err, ErrInvalid)
	}

	_, err = st.Stat(ctx, ManifestName)
	switch {
	case err == nil:
		return retryWrite(ctx, st, meta, planned, opts.Key)
	case !errors.Is(err, fs.ErrNotExist):
		return Manifest{}, fmt.Errorf("write checkpoint %q: %w", loc, err)
	}

	if err := prepareDir(ctx, st); err != nil {
		return Manifest{}, fmt.Errorf("write checkpoint %q: %w", loc, err)
	}
	w := fileWriter{ctx: ctx, st: st, between: opts.BetweenFiles}
	m := newManifest(meta)
	for _, ps := range planned {
		sm, err := writeSection(&w, ps)
		if err != nil {
			return Manifest{}, fmt.Errorf("write checkpoint %q: %w", loc, err)
		}
		m.Sections = append(m.Sections, sm)
		m.Records += sm.Records
	}
	mb, err := encodeManifest(&m, opts.Key)
	if err != nil {
		return Manifest{}, fmt.Errorf("write checkpoint %q: %w", loc, err)
	}
	err = st.Create(ctx, ManifestName, mb)
	if errors.Is(err, fs.ErrExist) {
		// Another commit of this location won the race: ours is a retry
		// of it, if it wrote the same content.
		return retryWrite(ctx, st, meta, planned, opts.Key)
	}
	if err != nil {
		return Manifest{}, fmt.Errorf("write checkpoint %q: %s: %w", loc, ManifestName, err)
	}
	return m, nil
}

func (o Options) withDefaults() (Options, error) {
	switch {
	case o.MaxShardRecords < 0:
		return o, fmt.Errorf("MaxShardRecords %d is negative", o.MaxShardRecords)
	case o.MaxShardBytes < 0:
		return o, fmt.Errorf("MaxShardBytes %d is negative", o.MaxShardBytes)
	}
	if o.MaxShardRecords == 0 {
		o.MaxShardRecords = DefaultMaxShardRecords
	}
	if o.MaxShardBytes == 0 {
		o.MaxShardBytes = DefaultMaxShardBytes
	}
	return o, nil
}

func newManifest(meta Meta) Manifest {
	m := Manifest{Schema: SchemaVersion, CheckpointID: meta.CheckpointID, Sections: []SectionManifest{}}
	if len(meta.Labels) > 0 {
		m.Labels = maps.Clone(meta.Labels)
	}
	return m
}

// plan validates names and keys, sorts, and cuts each section into shards.
func plan(sections []Section, opts Options) ([]plannedSection, error) {
	sorted := slices.Clone(sections)
	slices.SortFunc(sorted, func(a, b Section) int { return strings.Compare(a.Name, b.Name) })
	out := make([]plannedSection, 0, len(sorted))
	for i, s := range sorted {
		if err := validSectionName(s.Name); err != nil {
			return nil, err
		}
		if i > 0 && sorted[i-1].Name == s.Name {
			return nil, fmt.Errorf("section %q given twice", s.Name)
		}
		recs := slices.Clone(s.Records)
		slices.SortFunc(recs, func(a, b Record) int { return strings.Compare(a.Key, b.Key) })
		ps := plannedSection{name: s.Name}
		var cur []Record
		var curBytes int64
		for j, r := range recs {
			if err := validKey(r.Key); err != nil {
				return nil, fmt.Errorf("section %q: %w", s.Name, err)
			}
			if j > 0 && recs[j-1].Key == r.Key {
				return nil, fmt.Errorf("section %q: record key %q given twice", s.Name, r.Key)
			}
			size := int64(len(r.Data))
			if size > opts.MaxShardBytes {
				return nil, fmt.Errorf("section %q: record %q has %d bytes, more than the %d bytes a shard may hold", s.Name, r.Key, size, opts.MaxShardBytes)
			}
			if len(cur) > 0 && (len(cur) == opts.MaxShardRecords || curBytes+size > opts.MaxShardBytes) {
				ps.shards = append(ps.shards, cur)
				cur, curBytes = nil, 0
			}
			cur = append(cur, r)
			curBytes += size
		}
		if len(cur) > 0 {
			ps.shards = append(ps.shards, cur)
		}
		if len(ps.shards) > maxShardsPerSection {
			return nil, fmt.Errorf("section %q needs %d shards, more than %d", s.Name, len(ps.shards), maxShardsPerSection)
		}
		out = append(out, ps)
	}
	return out, nil
}

// writeShard writes recs as a deterministic ustar archive: fixed mode,
// mtime, owner; no user names, no PAX records.
func writeShard(w io.Writer, recs []Record) error {
	tw := tar.NewWriter(w)
	for _, r := range recs {
		hdr := &tar.Header{
			Typeflag: tar.TypeReg,
			Name:     MemberName(r.Key),
			Mode:     0o644,
			Size:     int64(len(r.Data)),
			ModTime:  time.Unix(0, 0),
			Format:   tar.FormatUSTAR,
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("tar header for %q: %w", r.Key, err)
		}
		if _, err := tw.Write(r.Data); err != nil {
			return fmt.Errorf("tar data for %q: %w", r.Key, err)
		}
	}
	return tw.Close()
}

// indexBytes is the whole index file of a section.
func indexBytes(ps plannedSection) ([]byte, error) {
	var buf bytes.Buffer
	for n, recs := range ps.shards {
		shard := ShardName(ps.name, n)
		for _, r := range recs {
			sum := sha256.Sum256(r.Data)
			line, err := canonicalIndexLine(IndexEntry{
				Key:    r.Key,
				Shard:  shard,
				Member: MemberName(r.Key),
				Size:   int64(len(r.Data)),
				SHA256: hex.EncodeToString(sum[:]),
			})
			if err != nil {
				return nil, err
			}
			buf.Write(line)
		}
	}
	return buf.Bytes(), nil
}

// sink receives the files of a section: the real directory, or only a hash
// when a retry computes what it would have written.
type sink interface {
	write(name string, between bool, fill func(io.Writer) error) (FileRef, error)
}

func writeSection(s sink, ps plannedSection) (SectionManifest, error) {
	sm := SectionManifest{Name: ps.name, Shards: []ShardRef{}}
	for n, recs := range ps.shards {
		ref, err := s.write(ShardName(ps.name, n), true, func(w io.Writer) error { return writeShard(w, recs) })
		if err != nil {
			return SectionManifest{}, err
		}
		sm.Shards = append(sm.Shards, ShardRef{Name: ref.Name, Size: ref.Size, SHA256: ref.SHA256, Records: len(recs)})
		sm.Records += len(recs)
	}
	idx, err := indexBytes(ps)
	if err != nil {
		return SectionManifest{}, err
	}
	sm.Index, err = s.write(IndexName(ps.name), true, func(w io.Writer) error {
		_, err := w.Write(idx)
		return err
	})
	if err != nil {
		return SectionManifest{}, err
	}
	return sm, nil
}

// countingHash hashes and counts what is written to it.
type countingHash struct {
	h hash.Hash
	n int64
}

func (c *countingHash) Write(p []byte) (int, error) {
	c.h.Write(p)
	c.n += int64(len(p))
	return len(p), nil
}

func (c *countingHash) ref(name string) FileRef {
	return FileRef{Name: name, Size: c.n, SHA256: hex.EncodeToString(c.h.Sum(nil))}
}

// hashSink computes file refs without writing.
type hashSink struct{}

func (hashSink) write(name string, _ bool, fill func(io.Writer) error) (FileRef, error) {
	ch := &countingHash{h: sha256.New()}
	if err := fill(ch); err != nil {
		return FileRef{}, fmt.Errorf("%s: %w", name, err)
	}
	return ch.ref(name), nil
}

// fileWriter writes files atomically (and, locally, durably) into a store.
type fileWriter struct {
	ctx     context.Context
	st      storage.Store
	between func()
}

// write writes one file atomically; then, if between is set, calls the
// BetweenFiles hook.
func (fw *fileWriter) write(name string, between bool, fill func(io.Writer) error) (FileRef, error) {
	if err := fw.ctx.Err(); err != nil {
		return FileRef{}, fmt.Errorf("%s: %w", name, err)
	}
	var ref FileRef
	err := fw.st.Write(fw.ctx, name, func(w io.Writer) error {
		ch := &countingHash{h: sha256.New()}
		bw := bufio.NewWriterSize(io.MultiWriter(w, ch), 256<<10)
		if err := fill(bw); err != nil {
			return err
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		ref = ch.ref(name)
		return nil
	})
	if err != nil {
		return FileRef{}, fmt.Errorf("%s: %w", name, err)
	}
	if between && fw.between != nil {
		fw.between()
	}
	return ref, nil
}

// leftoverRE matches what a torn commit can leave behind: temporary files,
// shards and indexes.
var leftoverRE = regexp.MustCompile(`^(\.tmp-.*|[a-z0-9][a-z0-9._-]*(-[0-9]{5}\.tar|\.index\.jsonl))$`)

// prepareDir removes the leftovers of a torn commit from the store. It
// refuses, removing nothing, if the store holds anything else.
func prepareDir(ctx context.Context, st storage.Store) error {
	entries, err := st.List(ctx)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Regular || !leftoverRE.MatchString(e.Name) {
			return fmt.Errorf("directory holds %q, which is no checkpoint file; refusing to write there: %w", e.Name, ErrConflict)
		}
	}
	for _, e := range entries {
		if err := st.Remove(ctx, e.Name); err != nil {
			return fmt.Errorf("remove leftover of a torn commit: %w", err)
		}
	}
	if len(entries) > 0 {
		return storage.Sync(ctx, st)
	}
	return nil
}

// retryWrite handles a Write into a directory that already has a manifest:
// the same content validates and returns the manifest, anything else is
// refused. Nothing is written.
func retryWrite(ctx context.Context, st storage.Store, meta Meta, planned []plannedSection, key []byte) (Manifest, error) {
	dir := st.Location()
	want := newManifest(meta)
	for _, ps := range planned {
		sm, err := writeSection(hashSink{}, ps)
		if err != nil {
			return Manifest{}, fmt.Errorf("write checkpoint %q: %w", dir, err)
		}
		want.Sections = append(want.Sections, sm)
		want.Records += sm.Records
	}
	wantBytes, err := encodeManifest(&want, key)
	if err != nil {
		return Manifest{}, fmt.Errorf("write checkpoint %q: %w", dir, err)
	}
	have, err := readManifestBytes(ctx, st, DefaultMaxManifestBytes)
	if err != nil {
		return Manifest{}, fmt.Errorf("write checkpoint %q: existing checkpoint: %w", dir, err)
	}
	if !bytes.Equal(have, wantBytes) {
		return Manifest{}, fmt.Errorf("write checkpoint %q: %s exists and describes other content than this write (digest %s); nothing overwritten: %w",
			dir, ManifestName, want.Digest, ErrConflict)
	}
	if _, err := OpenStoreWith(ctx, st, meta.CheckpointID, Settings{Key: key}); err != nil {
		return Manifest{}, fmt.Errorf("write checkpoint %q: existing checkpoint does not validate; nothing overwritten: %w", dir, err)
	}
	// A previous attempt may have renamed the manifest and then failed
	// before its directory fsync.
	if err := storage.Sync(ctx, st); err != nil {
		return Manifest{}, fmt.Errorf("write checkpoint %q: %w", dir, err)
	}
	return want, nil
}

// Size is the number of bytes the checkpoint m describes takes in dir: its
// manifest file and every shard and index m names. The sizes of shards and
// indexes come from m; only the manifest file is looked at.
func Size(dir string, m Manifest) (int64, error) {
	st, err := storage.Dir(dir)
	if err != nil {
		return 0, fmt.Errorf("size of checkpoint %q: %w", dir, err)
	}
	return SizeIn(context.Background(), st, m)
}

// SizeIn is Size of a checkpoint in a store.
func SizeIn(ctx context.Context, st storage.Store, m Manifest) (int64, error) {
	e, err := st.Stat(ctx, ManifestName)
	if err != nil {
		return 0, fmt.Errorf("size of checkpoint %q: %w", st.Location(), err)
	}
	n := e.Size
	for _, sm := range m.Sections {
		n += sm.Index.Size
		for _, sh := range sm.Shards {
			n += sh.Size
		}
	}
	return n, nil
}
