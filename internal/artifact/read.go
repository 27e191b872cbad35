package artifact

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/internal/strictjson"
)

// Checkpoint is a checkpoint directory that Open has validated in full.
type Checkpoint struct {
	st       storage.Store
	dir      string
	manifest Manifest
	sections map[string]sectionIndex
}

// sectionIndex is one section as Open validated it: its manifest entry and
// its parsed index, in the order the shards hold the records.
type sectionIndex struct {
	manifest SectionManifest
	entries  []IndexEntry
}

// invalid builds an error naming the directory, the file and the problem,
// wrapping ErrInvalid.
func invalid(dir, file, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s: %s", ErrInvalid, dir, file, fmt.Sprintf(format, args...))
}

// unreadable reports a file that could not be opened or listed. A store
// that did not answer (an object store out of reach) or a cancelled
// context is no verdict on the checkpoint: such an error does not wrap
// ErrInvalid, so a caller may retry. Anything else (a symlink, a
// directory, a local I/O error) is.
func unreadable(ctx context.Context, dir, file string, err error) error {
	if ctx.Err() != nil || errors.Is(err, storage.ErrUnavailable) {
		return fmt.Errorf("checkpoint %s: %s: %w", dir, file, err)
	}
	return invalid(dir, file, "%v", err)
}

// Open validates the checkpoint in dir completely and returns it, or returns
// an error wrapping ErrInvalid that names the file and the problem. It checks:
// the manifest (known schema, canonical encoding, its own digest, checkpoint
// id equal to wantCheckpointID, well-formed section, shard and index
// entries); that dir holds exactly manifest.json and the files it lists —
// anything else, leftover temporary files and subdirectories included, is an
// error, since a finished commit leaves none; each index's and archive's size
// and SHA-256; that each index is canonical, its keys unique and sorted, its
// member names derived from the keys; that each tar holds exactly the members
// its index lists, in order, as regular files with safe names, deterministic
// headers, matching sizes and SHA-256s, and nothing else.
//
// Open reads with the default Settings: no key, default size bounds.
func Open(ctx context.Context, dir, wantCheckpointID string) (*Checkpoint, error) {
	return OpenWith(ctx, dir, wantCheckpointID, Settings{})
}

// OpenWith is Open with settings: size bounds and a signing key.
func OpenWith(ctx context.Context, dir, wantCheckpointID string, set Settings) (*Checkpoint, error) {
	st, err := storage.Dir(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalid, dir, err)
	}
	return OpenStoreWith(ctx, st, wantCheckpointID, set)
}

// OpenStore is Open of a checkpoint in a store: a local directory or an
// object-store prefix. For an object store, "regular file" means an object
// and a subdirectory is a common key prefix.
func OpenStore(ctx context.Context, st storage.Store, wantCheckpointID string) (*Checkpoint, error) {
	return OpenStoreWith(ctx, st, wantCheckpointID, Settings{})
}

// OpenStoreWith is OpenStore with settings. Every size the manifest and
// the indexes claim is checked against set's bounds before anything of
// that size is read, and every file is hashed as it streams by: nothing is
// held whole before its size claim has passed its bound, and no index is
// trusted before its digest has matched.
func OpenStoreWith(ctx context.Context, st storage.Store, wantCheckpointID string, set Settings) (*Checkpoint, error) {
	set = set.withDefaults()
	dir := st.Location()
	if err := validCheckpointID(wantCheckpointID); err != nil {
		return nil, fmt.Errorf("%w: %s: wanted %w", ErrInvalid, dir, err)
	}
	b, err := readManifestBytes(ctx, st, set.MaxManifestBytes)
	if err != nil {
		return nil, err
	}
	m, err := parseManifest(dir, b, wantCheckpointID, set)
	if err != nil {
		return nil, err
	}
	if err := checkInventory(ctx, st, m); err != nil {
		return nil, err
	}
	c := &Checkpoint{st: st, dir: dir, manifest: m, sections: make(map[string]sectionIndex, len(m.Sections))}
	for _, sm := range m.Sections {
		entries, err := readIndex(ctx, st, sm, set)
		if err != nil {
			return nil, err
		}
		si := sectionIndex{manifest: sm, entries: entries}
		if err := si.readShards(ctx, st, nil); err != nil {
			return nil, err
		}
		c.sections[sm.Name] = si
	}
	return c, nil
}

// Manifest returns a copy of the validated manifest.
func (c *Checkpoint) Manifest() Manifest {
	m := c.manifest
	m.Sections = slices.Clone(m.Sections)
	for i := range m.Sections {
		m.Sections[i].Shards = slices.Clone(m.Sections[i].Shards)
	}
	m.Labels = maps.Clone(m.Labels)
	return m
}

// Sections returns the section names, sorted.
func (c *Checkpoint) Sections() []string {
	names := make([]string, 0, len(c.manifest.Sections))
	for _, sm := range c.manifest.Sections {
		names = append(names, sm.Name)
	}
	return names
}

// Section reads a section's records, sorted by key. It reads the shards again
// and checks every member against the index Open validated, so a file changed
// since Open yields an error, never unvalidated data.
func (c *Checkpoint) Section(ctx context.Context, name string) ([]Record, error) {
	si, ok := c.sections[name]
	if !ok {
		return nil, fmt.Errorf("checkpoint %s: no section %q: %w", c.dir, name, fs.ErrNotExist)
	}
	recs := make([]Record, len(si.entries))
	err := si.readShards(ctx, c.st, func(i int, data []byte) {
		recs[i] = Record{Key: si.entries[i].Key, Data: data}
	})
	if err != nil {
		return nil, err
	}
	return recs, nil
}

// readManifestBytes reads manifest.json, refusing one larger than limit
// before reading any of it.
func readManifestBytes(ctx context.Context, st storage.Store, limit int64) ([]byte, error) {
	dir := st.Location()
	f, size, err := st.Open(ctx, ManifestName)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s: %s: %w: not a checkpoint (its commit tore before the end or never ran)", ErrInvalid, dir, ManifestName, ErrNoManifest)
	}
	if err != nil {
		return nil, unreadable(ctx, dir, ManifestName, err)
	}
	defer f.Close()
	if size > limit {
		return nil, invalid(dir, ManifestName, "%d bytes, more than the %d this process reads of a manifest (%s)", size, limit, EnvMaxManifestBytes)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, invalid(dir, ManifestName, "read: %v", err)
	}
	if int64(len(b)) > limit {
		return nil, invalid(dir, ManifestName, "grew past the %d bytes this process reads of a manifest (%s) while reading", limit, EnvMaxManifestBytes)
	}
	return b, nil
}

func parseManifest(dir string, b []byte, wantID string, set Settings) (Manifest, error) {
	var probe struct {
		Schema *int `json:"schema"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return Manifest{}, invalid(dir, ManifestName, "not valid JSON: %v", err)
	}
	if probe.Schema == nil {
		return Manifest{}, invalid(dir, ManifestName, "no schema version")
	}
	if *probe.Schema != SchemaVersion {
		return Manifest{}, invalid(dir, ManifestName, "unknown schema version %d (this build reads %d)", *probe.Schema, SchemaVersion)
	}
	var m Manifest
	if err := strictjson.Decode(b, &m); err != nil {
		return Manifest{}, invalid(dir, ManifestName, "malformed: %v", err)
	}
	canon, err := canonicalManifest(&m)
	if err != nil {
		return Manifest{}, invalid(dir, ManifestName, "%v", err)
	}
	if !bytes.Equal(canon, b) {
		return Manifest{}, invalid(dir, ManifestName, "not in canonical form (edited or corrupt)")
	}
	unsigned := m
	unsigned.Signature = ""
	unsealed := unsigned
	unsealed.Digest = ""
	ub, err := canonicalManifest(&unsealed)
	if err != nil {
		return Manifest{}, invalid(dir, ManifestName, "%v", err)
	}
	sum := sha256.Sum256(ub)
	if got := hex.EncodeToString(sum[:]); got != m.Digest {
		return Manifest{}, invalid(dir, ManifestName, "digest mismatch: content hashes to %s, manifest says %q", got, m.Digest)
	}
	sb, err := canonicalManifest(&unsigned)
	if err != nil {
		return Manifest{}, invalid(dir, ManifestName, "%v", err)
	}
	if err := CheckSignature(m.Signature, sb, set.Key); err != nil {
		return Manifest{}, invalid(dir, ManifestName, "%v", err)
	}
	if m.CheckpointID != wantID {
		return Manifest{}, invalid(dir, ManifestName, "checkpoint id %q, want %q", m.CheckpointID, wantID)
	}
	if err := checkManifestShape(m); err != nil {
		return Manifest{}, invalid(dir, ManifestName, "%v", err)
	}
	if err := checkManifestBounds(m, set); err != nil {
		return Manifest{}, invalid(dir, ManifestName, "%v", err)
	}
	return m, nil
}

// checkManifestBounds checks the sizes and counts the manifest claims
// against what this process reads, before any file is opened: an index
// larger than the bound, or more records than its index could hold.
func checkManifestBounds(m Manifest, set Settings) error {
	for _, sm := range m.Sections {
		if sm.Index.Size > set.MaxIndexBytes {
			return fmt.Errorf("section %q: index %s claims %d bytes, more than the %d this process reads of an index (%s)",
				sm.Name, sm.Index.Name, sm.Index.Size, set.MaxIndexBytes, EnvMaxIndexBytes)
		}
		if room := sm.Index.Size / minIndexLineBytes; int64(sm.Records) > room {
			return fmt.Errorf("section %q: %d records, but its index of %d bytes has room for at most %d", sm.Name, sm.Records, sm.Index.Size, room)
		}
	}
	return nil
}

// checkManifestShape checks what the digest cannot: that a manifest is one
// this package could have written.
func checkManifestShape(m Manifest) error {
	if err := validCheckpointID(m.CheckpointID); err != nil {
		return err
	}
	if err := validLabels(m.Labels); err != nil {
		return err
	}
	total := 0
	for i, sm := range m.Sections {
		if err := validSectionName(sm.Name); err != nil {
			return err
		}
		if i > 0 && m.Sections[i-1].Name >= sm.Name {
			return fmt.Errorf("sections not sorted or duplicate: %q after %q", sm.Name, m.Sections[i-1].Name)
		}
		if err := checkRef(sm.Index.Name, IndexName(sm.Name), sm.Index.Size, sm.Index.SHA256); err != nil {
			return fmt.Errorf("section %q index: %w", sm.Name, err)
		}
		if len(sm.Shards) > maxShardsPerSection {
			return fmt.Errorf("section %q: %d shards, more than %d", sm.Name, len(sm.Shards), maxShardsPerSection)
		}
		n := 0
		for j, sh := range sm.Shards {
			if err := checkRef(sh.Name, ShardName(sm.Name, j), sh.Size, sh.SHA256); err != nil {
				return fmt.Errorf("section %q shard %d: %w", sm.Name, j, err)
			}
			if sh.Records < 1 {
				return fmt.Errorf("section %q shard %q: %d records", sm.Name, sh.Name, sh.Records)
			}
			n += sh.Records
		}
		if n != sm.Records {
			return fmt.Errorf("section %q: shards hold %d records, section says %d", sm.Name, n, sm.Records)
		}
		total += n
	}
	if total != m.Records {
		return fmt.Errorf("sections hold %d records, manifest says %d", total, m.Records)
	}
	return nil
}

func checkRef(name, wantName string, size int64, sum string) error {
	if name != wantName {
		return fmt.Errorf("file name %q, want %q", name, wantName)
	}
	if size < 0 {
		return fmt.Errorf("%s: negative size %d", name, size)
	}
	if !hexRE.MatchString(sum) {
		return fmt.Errorf("%s: sha256 %q is not 64 lower-case hex digits", name, sum)
	}
	return nil
}

// checkInventory demands that dir holds exactly the manifest and the files it
// lists, all regular files.
func checkInventory(ctx context.Context, st storage.Store, m Manifest) error {
	dir := st.Location()
	want := map[string]bool{ManifestName: true}
	var order []string
	for _, sm := range m.Sections {
		for _, sh := range sm.Shards {
			want[sh.Name] = true
			order = append(order, sh.Name)
		}
		want[sm.Index.Name] = true
		order = append(order, sm.Index.Name)
	}
	entries, err := st.List(ctx)
	if err != nil {
		return unreadable(ctx, dir, ".", err)
	}
	have := make(map[string]bool, len(entries))
	for _, e := range entries {
		name := e.Name
		switch {
		case !want[name] && strings.HasPrefix(name, tempPrefix):
			return invalid(dir, name, "leftover temporary file (a commit was interrupted or is still running)")
		case !want[name]:
			return invalid(dir, name, "unexpected entry, not listed in the manifest")
		case e.Dir:
			return invalid(dir, name, "not a regular file (a directory)")
		case !e.Regular:
			return invalid(dir, name, "not a regular file")
		}
		have[name] = true
	}
	for _, name := range order {
		if !have[name] {
			return invalid(dir, name, "listed in the manifest but missing")
		}
	}
	return nil
}

// readIndex reads a section's index in one pass: it hashes the file while
// it parses it line by line, so memory holds one line and the entries, and
// a parse problem is reported only when the file as a whole matches the
// manifest's size and digest (otherwise the mismatch is the error, since
// it says more about what happened).
func readIndex(ctx context.Context, st storage.Store, sm SectionManifest, set Settings) ([]IndexEntry, error) {
	dir := st.Location()
	ref := sm.Index
	f, size, err := st.Open(ctx, ref.Name)
	if err != nil {
		return nil, unreadable(ctx, dir, ref.Name, err)
	}
	defer f.Close()
	if size != ref.Size {
		return nil, invalid(dir, ref.Name, "size %d, manifest says %d", size, ref.Size)
	}
	ch := &countingHash{h: sha256.New()}
	br := bufio.NewReaderSize(io.TeeReader(io.LimitReader(f, ref.Size+1), ch), 64<<10)
	p := newIndexParser(sm, set)
	parseErr := p.parse(br)
	if _, err := io.Copy(io.Discard, br); err != nil {
		return nil, invalid(dir, ref.Name, "read: %v", err)
	}
	got := ch.ref(ref.Name)
	switch {
	case got.Size != ref.Size:
		return nil, invalid(dir, ref.Name, "changed while reading: %d bytes, manifest says %d", got.Size, ref.Size)
	case got.SHA256 != ref.SHA256:
		return nil, invalid(dir, ref.Name, "sha256 %s, manifest says %s", got.SHA256, ref.SHA256)
	case parseErr != nil:
		return nil, invalid(dir, ref.Name, "%v", parseErr)
	}
	return p.entries, nil
}

// indexParser checks a section index line by line against its manifest
// entry.
type indexParser struct {
	sm             SectionManifest
	maxRecord      int64
	entries        []IndexEntry
	shard, inShard int
}

func newIndexParser(sm SectionManifest, set Settings) *indexParser {
	// checkManifestBounds made sm.Records at most what the index has room
	// for, so this allocation is bounded by the index bound.
	return &indexParser{sm: sm, maxRecord: set.MaxRecordBytes, entries: make([]IndexEntry, 0, sm.Records)}
}

// parse reads lines from br until its end or the first problem.
func (p *indexParser) parse(br *bufio.Reader) error {
	for lineNo := 1; ; lineNo++ {
		line, err := readIndexLine(br)
		if err == io.EOF {
			break
		}
		if err == nil {
			err = p.add(line)
		}
		if err != nil {
			return fmt.Errorf("line %d: %v", lineNo, err)
		}
	}
	if len(p.entries) != p.sm.Records {
		return fmt.Errorf("%d entries, manifest says %d records", len(p.entries), p.sm.Records)
	}
	return nil
}

// readIndexLine returns the next line of br, its newline included, or
// io.EOF at the end; a line longer than any canonical one is an error,
// read no further.
func readIndexLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		switch {
		case len(line) > maxIndexLineBytes:
			return nil, fmt.Errorf("longer than the %d bytes an index line may have", maxIndexLineBytes)
		case err == nil:
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF && len(line) > 0:
			return nil, errors.New("last line not terminated")
		default:
			return nil, err
		}
	}
}

// add checks one line and appends its entry.
func (p *indexParser) add(line []byte) error {
	var e IndexEntry
	if err := strictjson.Decode(line, &e); err != nil {
		return err
	}
	canon, err := canonicalIndexLine(e)
	if err != nil || !bytes.Equal(canon, line) {
		return errors.New("not in canonical form")
	}
	if err := validKey(e.Key); err != nil {
		return err
	}
	if n := len(p.entries); n > 0 && p.entries[n-1].Key >= e.Key {
		return fmt.Errorf("key %q after %q: keys must be unique and sorted", e.Key, p.entries[n-1].Key)
	}
	if want := MemberName(e.Key); e.Member != want {
		return fmt.Errorf("member %q, but key %q gives %q", e.Member, e.Key, want)
	}
	if e.Size < 0 || !hexRE.MatchString(e.SHA256) {
		return fmt.Errorf("bad size %d or sha256 %q", e.Size, e.SHA256)
	}
	if e.Size > p.maxRecord {
		return fmt.Errorf("key %q claims %d bytes, more than the %d this process reads of a record (%s)", e.Key, e.Size, p.maxRecord, EnvMaxRecordBytes)
	}
	return p.place(e)
}

// place checks that e is in the shard the manifest's record counts put it
// in, and appends it.
func (p *indexParser) place(e IndexEntry) error {
	sm := p.sm
	for p.shard < len(sm.Shards) && p.inShard == sm.Shards[p.shard].Records {
		p.shard, p.inShard = p.shard+1, 0
	}
	if p.shard == len(sm.Shards) {
		return fmt.Errorf("more entries than the %d records the manifest lists", sm.Records)
	}
	sh := sm.Shards[p.shard]
	if e.Shard != sh.Name {
		return fmt.Errorf("key %q in shard %q, manifest record counts put it in %q", e.Key, e.Shard, sh.Name)
	}
	if e.Size > sh.Size {
		return fmt.Errorf("key %q claims %d bytes, more than its shard %q has", e.Key, e.Size, sh.Name)
	}
	p.inShard++
	p.entries = append(p.entries, e)
	return nil
}

// readShards validates every shard of the section against its manifest and
// index; collect, if set, receives each record's data by index position. It
// is a method because the manifest and the entries are one parsed section and
// travel together.
func (si sectionIndex) readShards(ctx context.Context, st storage.Store, collect func(int, []byte)) error {
	dir := st.Location()
	first := 0
	for _, sh := range si.manifest.Shards {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("checkpoint %s: %s: %w", dir, sh.Name, err)
		}
		part := si.entries[first : first+sh.Records]
		var each func(int, []byte)
		if collect != nil {
			base := first
			each = func(i int, data []byte) { collect(base+i, data) }
		}
		if err := readShard(ctx, st, sh, part, each); err != nil {
			return err
		}
		first += sh.Records
	}
	return nil
}

// readShard reads one archive in a single pass, hashing all of it while the
// tar reader walks the members. A member problem is reported only when the
// archive as a whole matches its manifest digest; otherwise the digest
// mismatch is the error, since it says more about what happened.
func readShard(ctx context.Context, st storage.Store, ref ShardRef, entries []IndexEntry, collect func(int, []byte)) error {
	dir := st.Location()
	f, size, err := st.Open(ctx, ref.Name)
	if err != nil {
		return unreadable(ctx, dir, ref.Name, err)
	}
	defer f.Close()
	if size != ref.Size {
		return invalid(dir, ref.Name, "size %d, manifest says %d", size, ref.Size)
	}
	ch := &countingHash{h: sha256.New()}
	tee := io.TeeReader(io.LimitReader(f, ref.Size+1), ch)
	memberErr := walkMembers(tar.NewReader(tee), entries, collect)
	if _, err := io.Copy(io.Discard, tee); err != nil {
		return invalid(dir, ref.Name, "read: %v", err)
	}
	got := ch.ref(ref.Name)
	if got.Size != ref.Size || got.SHA256 != ref.SHA256 {
		msg := fmt.Sprintf("%d bytes with sha256 %s, manifest says %d bytes with sha256 %s", got.Size, got.SHA256, ref.Size, ref.SHA256)
		if memberErr != nil {
			msg += fmt.Sprintf(" (and %v)", memberErr)
		}
		return invalid(dir, ref.Name, "%s", msg)
	}
	if memberErr != nil {
		return invalid(dir, ref.Name, "%v", memberErr)
	}
	sizes := make([]int64, len(entries))
	for i, e := range entries {
		sizes[i] = e.Size
	}
	if want := tarSize(sizes); want != ref.Size {
		return invalid(dir, ref.Name, "%d bytes, but a deterministic archive of its members has %d (extra headers, padding or trailing data)", ref.Size, want)
	}
	return nil
}

// walkMembers demands that tr holds exactly entries, in order.
func walkMembers(tr *tar.Reader, entries []IndexEntry, collect func(int, []byte)) error {
	seen := make(map[string]bool, len(entries))
	buf := copyBuffer(entries)
	for i := 0; ; i++ {
		hdr, err := tr.Next()
		if err == io.EOF {
			if i < len(entries) {
				return fmt.Errorf("missing member %q (key %q) and %d more", entries[i].Member, entries[i].Key, len(entries)-i-1)
			}
			return nil
		}
		// The tar reader reports unsafe names (when GODEBUG asks it to)
		// together with the header; checkMemberHeader names the problem.
		if err != nil && !(errors.Is(err, tar.ErrInsecurePath) && hdr != nil) {
			return fmt.Errorf("after %d members: tar: %v", i, err)
		}
		if err := checkMemberHeader(hdr); err != nil {
			return err
		}
		if seen[hdr.Name] {
			return fmt.Errorf("duplicate member %q", hdr.Name)
		}
		seen[hdr.Name] = true
		if i >= len(entries) {
			return fmt.Errorf("extra member %q, not in the index", hdr.Name)
		}
		e := entries[i]
		if hdr.Name != e.Member {
			return fmt.Errorf("member %d is %q, the index lists %q (key %q)", i, hdr.Name, e.Member, e.Key)
		}
		if hdr.Size != e.Size {
			return fmt.Errorf("member %q (key %q): %d bytes, index says %d", hdr.Name, e.Key, hdr.Size, e.Size)
		}
		h := sha256.New()
		var data []byte
		if collect != nil {
			data = make([]byte, e.Size)
			if _, err := io.ReadFull(tr, data); err != nil {
				return fmt.Errorf("member %q (key %q): read: %v", hdr.Name, e.Key, err)
			}
			h.Write(data)
		} else if n, err := io.CopyBuffer(h, tr, buf); err != nil || n != e.Size {
			return fmt.Errorf("member %q (key %q): read %d of %d bytes: %v", hdr.Name, e.Key, n, e.Size, err)
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != e.SHA256 {
			return fmt.Errorf("member %q (key %q): sha256 %s, index says %s", hdr.Name, e.Key, got, e.SHA256)
		}
		if collect != nil {
			collect(i, data)
		}
	}
}

// copyBuffer is the one buffer walkMembers hashes a shard's members
// through: io.Copy would allocate 32 KiB per member, most of it unused for
// the small records a rollout or session usually is.
func copyBuffer(entries []IndexEntry) []byte {
	size := int64(512)
	for _, e := range entries {
		size = max(size, min(e.Size, 32<<10))
	}
	return make([]byte, size)
}

// checkMemberHeader refuses unsafe names, anything but regular files, and
// headers not in the deterministic form Write produces.
func checkMemberHeader(hdr *tar.Header) error {
	name := hdr.Name
	switch {
	case name == "":
		return errors.New("member with an empty name")
	case strings.HasPrefix(name, "/") || filepath.IsAbs(name):
		return fmt.Errorf("member %q: absolute path", name)
	case strings.Contains(name, ".."):
		return fmt.Errorf("member %q: path escape ('..')", name)
	case strings.ContainsAny(name, "/\\\x00"):
		return fmt.Errorf("member %q: path separator in a member name", name)
	}
	switch hdr.Typeflag {
	case tar.TypeReg:
	case tar.TypeSymlink:
		return fmt.Errorf("member %q: symlink (to %q), only regular files are allowed", name, hdr.Linkname)
	case tar.TypeLink:
		return fmt.Errorf("member %q: hardlink (to %q), only regular files are allowed", name, hdr.Linkname)
	case tar.TypeDir:
		return fmt.Errorf("member %q: directory, only regular files are allowed", name)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return fmt.Errorf("member %q: device or fifo (type %q), only regular files are allowed", name, hdr.Typeflag)
	default:
		return fmt.Errorf("member %q: type %q, only regular files are allowed", name, hdr.Typeflag)
	}
	if hdr.Mode != 0o644 || hdr.Uid != 0 || hdr.Gid != 0 || hdr.Uname != "" || hdr.Gname != "" ||
		hdr.ModTime.Unix() != 0 || hdr.Linkname != "" || len(hdr.PAXRecords) != 0 || hdr.Format&tar.FormatUSTAR == 0 {
		return fmt.Errorf("member %q: header not in the deterministic form (mode %o, uid %d, gid %d, uname %q, gname %q, mtime %d, format %v, %d PAX records)",
			name, hdr.Mode, hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname, hdr.ModTime.Unix(), hdr.Format, len(hdr.PAXRecords))
	}
	return nil
}
