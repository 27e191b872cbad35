// Package transcriptstore keeps conversations once, content-addressed by
// SHA-256 (package transcript defines what is kept), in a local directory or
// an object store, so that workflows and activities pass a head digest
// instead of the conversation. A conversation is a chain of nodes; each node
// names its parent node and one item. The head is the digest of the last
// node; equal conversations have equal heads.
package transcriptstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/turnstile-rl/turnstile/internal/location"
	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/internal/transcript"
)

// node links an item to the conversation before it.
type node struct {
	Parent transcript.Digest `json:"parent,omitempty"`
	Item   transcript.Digest `json:"item"`
}

// Store is a set of blobs named by digest, in a local directory or an
// object store (package storage). Several processes may share one: every
// write is atomic and equal content has equal names, so concurrent writers
// cannot disagree, and every read checks the content against its name.
type Store struct {
	st    storage.Store
	stats counters
	convs *convCache
}

// Stats counts a store's file operations since it was opened: blobs read
// and written (a Put of content already stored writes nothing) and their
// bytes. A worker exports them as metrics.
type Stats struct {
	Reads, ReadBytes   int64
	Writes, WriteBytes int64
}

type counters struct {
	reads, readBytes, writes, writeBytes atomic.Int64
}

// Stats returns the store's counts so far.
func (s *Store) Stats() Stats {
	return Stats{
		Reads: s.stats.reads.Load(), ReadBytes: s.stats.readBytes.Load(),
		Writes: s.stats.writes.Load(), WriteBytes: s.stats.writeBytes.Load(),
	}
}

// Open returns the store in the local directory dir, creating it if
// needed.
func Open(dir string) (*Store, error) {
	return openDir(dir, storage.DefaultFileMode)
}

// openDir opens the store in directory dir, creating it (and its blobs)
// with file mode mode (directories: storage.DirMode of it).
func openDir(dir string, mode fs.FileMode) (*Store, error) {
	if dir == "" {
		return nil, errors.New("transcript: empty directory")
	}
	if mode == 0 {
		mode = storage.DefaultFileMode
	}
	if err := os.MkdirAll(dir, storage.DirMode(mode)); err != nil {
		return nil, fmt.Errorf("transcript: open %s: %w", dir, err)
	}
	st, err := storage.DirWithMode(dir, mode)
	if err != nil {
		return nil, fmt.Errorf("transcript: open %s: %w", dir, err)
	}
	return New(st), nil
}

// OpenLocation returns the store at where: a directory (created if
// needed, with o's file mode) or an object-store URL, opened through o.
func OpenLocation(ctx context.Context, o *storage.Opener, where string) (*Store, error) {
	if where != "" && !location.IsURL(where) {
		mode := storage.DefaultFileMode
		if o != nil && o.FileMode != 0 {
			mode = o.FileMode
		}
		return openDir(where, mode)
	}
	st, err := o.Open(ctx, where)
	if err != nil {
		return nil, fmt.Errorf("transcript: open %s: %w", where, err)
	}
	return New(st), nil
}

// New returns the store kept in st.
func New(st storage.Store) *Store {
	return &Store{st: st, convs: newConvCache(DefaultCacheItems)}
}

// Location is where the store keeps its blobs: a directory or a URL.
func (s *Store) Location() string { return s.st.Location() }

func name(d transcript.Digest) string {
	h := strings.TrimPrefix(string(d), "sha256:")
	return h[:2] + "/" + h
}

// Put stores data and returns its digest. Storing existing content is a
// no-op: the write is conditional, and whoever wrote the name first wrote
// the same bytes.
func (s *Store) Put(ctx context.Context, data []byte) (transcript.Digest, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	d := transcript.DigestOf(data)
	err := s.st.Create(ctx, name(d), data)
	if errors.Is(err, storage.ErrExist) {
		return d, s.refresh(ctx, d, data)
	}
	if err != nil {
		return "", fmt.Errorf("transcript: put %s: %w", d, err)
	}
	s.stats.writes.Add(1)
	s.stats.writeBytes.Add(int64(len(data)))
	return d, nil
}

// maxBlobBytes bounds a blob Get reads; far above any item or record.
const maxBlobBytes = 256 << 20

// Get returns the blob named d, checking that its content still matches.
func (s *Store) Get(ctx context.Context, d transcript.Digest) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := d.Validate(); err != nil {
		return nil, err
	}
	data, err := storage.ReadAll(ctx, s.st, name(d), maxBlobBytes)
	if err == nil {
		s.stats.reads.Add(1)
		s.stats.readBytes.Add(int64(len(data)))
	}
	if errors.Is(err, storage.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", transcript.ErrNotFound, d)
	}
	if err != nil {
		return nil, fmt.Errorf("transcript: get %s: %w", d, err)
	}
	if got := transcript.DigestOf(data); got != d {
		return nil, fmt.Errorf("%w: blob %s has content digest %s", transcript.ErrCorrupt, d, got)
	}
	return data, nil
}

// PutJSON stores v as JSON.
func (s *Store) PutJSON(ctx context.Context, v any) (transcript.Digest, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("transcript: encode: %w", err)
	}
	return s.Put(ctx, data)
}

// GetJSON loads the blob named d into v.
func (s *Store) GetJSON(ctx context.Context, d transcript.Digest, v any) error {
	data, err := s.Get(ctx, d)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%w: decode %s: %v", transcript.ErrCorrupt, d, err)
	}
	return nil
}

// Append stores item after the conversation head and returns the new head.
func (s *Store) Append(ctx context.Context, head transcript.Digest, item transcript.Item) (transcript.Digest, error) {
	if head != "" {
		if err := head.Validate(); err != nil {
			return "", err
		}
	}
	itemDigest, err := s.PutJSON(ctx, item)
	if err != nil {
		return "", err
	}
	return s.PutJSON(ctx, node{Parent: head, Item: itemDigest})
}

// AppendAll appends items in order.
func (s *Store) AppendAll(ctx context.Context, head transcript.Digest, items ...transcript.Item) (transcript.Digest, error) {
	for _, it := range items {
		var err error
		if head, err = s.Append(ctx, head, it); err != nil {
			return "", err
		}
	}
	return head, nil
}

// Load returns the conversation ending at head, oldest item first. It
// walks the chain back only to the newest conversation it has cached (the
// one the previous model call of the rollout loaded, typically), so a
// rollout's calls read each item once instead of once per later call.
func (s *Store) Load(ctx context.Context, head transcript.Digest) ([]transcript.Item, error) {
	if head == "" {
		return nil, ctx.Err()
	}
	if items, ok := s.convs.get(head); ok {
		return slices.Clone(items), nil
	}
	var newest []transcript.Item // newest first
	var base []transcript.Item
	err := s.walkUntil(ctx, head, func(d transcript.Digest) bool {
		var ok bool
		base, ok = s.convs.get(d)
		return ok
	}, func(_ transcript.Digest, n node) error {
		var it transcript.Item
		if err := s.GetJSON(ctx, n.Item, &it); err != nil {
			return err
		}
		newest = append(newest, it)
		return nil
	})
	if err != nil {
		return nil, err
	}
	items := make([]transcript.Item, len(base), len(base)+len(newest))
	copy(items, base)
	for i := len(newest) - 1; i >= 0; i-- {
		items = append(items, newest[i])
	}
	s.convs.put(head, slices.Clone(items))
	return items, nil
}

// Blobs returns every digest the conversation at head references (its nodes,
// items and their generation records), newest first. A checkpoint copies
// exactly these.
func (s *Store) Blobs(ctx context.Context, head transcript.Digest) ([]transcript.Digest, error) {
	var out []transcript.Digest
	err := s.walk(ctx, head, func(d transcript.Digest, n node) error {
		out = append(out, d, n.Item)
		var it transcript.Item
		if err := s.GetJSON(ctx, n.Item, &it); err != nil {
			return err
		}
		if it.Generation != "" {
			out = append(out, it.Generation)
		}
		return nil
	})
	return out, err
}

func (s *Store) walk(ctx context.Context, head transcript.Digest, fn func(transcript.Digest, node) error) error {
	return s.walkUntil(ctx, head, func(transcript.Digest) bool { return false }, fn)
}

// walkUntil walks the chain from head back to the first node for which stop
// holds (not visited), or to the start.
func (s *Store) walkUntil(ctx context.Context, head transcript.Digest, stop func(transcript.Digest) bool, fn func(transcript.Digest, node) error) error {
	seen := map[transcript.Digest]bool{}
	for d := head; d != "" && !stop(d); {
		if seen[d] {
			return fmt.Errorf("%w: cycle at %s", transcript.ErrCorrupt, d)
		}
		seen[d] = true
		var n node
		if err := s.GetJSON(ctx, d, &n); err != nil {
			return err
		}
		if err := n.Item.Validate(); err != nil {
			return fmt.Errorf("%w: node %s: %v", transcript.ErrCorrupt, d, err)
		}
		if err := fn(d, n); err != nil {
			return err
		}
		d = n.Parent
	}
	return nil
}

// PutGeneration validates and stores g and returns its digest.
func (s *Store) PutGeneration(ctx context.Context, g transcript.Generation) (transcript.Digest, error) {
	if err := g.Validate(); err != nil {
		return "", err
	}
	return s.PutJSON(ctx, g)
}

// Generation loads the record named d.
func (s *Store) Generation(ctx context.Context, d transcript.Digest) (transcript.Generation, error) {
	var g transcript.Generation
	if err := s.GetJSON(ctx, d, &g); err != nil {
		return transcript.Generation{}, err
	}
	if err := g.Validate(); err != nil {
		return transcript.Generation{}, fmt.Errorf("%w: %s: %v", transcript.ErrCorrupt, d, err)
	}
	return g, nil
}

// maxPrefixChunks bounds the chain a prefix is read from: far above any
// generation's chunk count (a million tokens at one token per chunk).
const maxPrefixChunks = 1 << 20

// PutPrefixChunk stores one chunk of an unfinished generation's durable
// prefix, after checking it on its own.
func (s *Store) PutPrefixChunk(ctx context.Context, c transcript.PrefixChunk) (transcript.Digest, error) {
	if err := c.Validate(); err != nil {
		return "", err
	}
	return s.PutJSON(ctx, c)
}

// Prefix loads the durable prefix whose last chunk is d: the chain walked to
// its first chunk and put together. A missing chunk is transcript.ErrNotFound;
// a chunk that does not decode or does not continue the one before is
// transcript.ErrCorrupt.
func (s *Store) Prefix(ctx context.Context, d transcript.Digest) (transcript.Prefix, error) {
	chunks, _, err := s.prefixChain(ctx, d)
	if err != nil {
		return transcript.Prefix{}, err
	}
	p, err := transcript.AssemblePrefix(chunks)
	if err != nil {
		return transcript.Prefix{}, fmt.Errorf("%w: prefix %s: %v", transcript.ErrCorrupt, d, err)
	}
	return p, nil
}

// PrefixBlobs returns the digests of the chunks of the prefix whose last
// chunk is d, newest first: what a checkpoint copies of a cut generation.
func (s *Store) PrefixBlobs(ctx context.Context, d transcript.Digest) ([]transcript.Digest, error) {
	_, digests, err := s.prefixChain(ctx, d)
	return digests, err
}

// prefixChain reads the chunks from d back to the first, returning them
// oldest first and their digests newest first.
func (s *Store) prefixChain(ctx context.Context, d transcript.Digest) ([]transcript.PrefixChunk, []transcript.Digest, error) {
	var chunks []transcript.PrefixChunk
	var digests []transcript.Digest
	for next := d; next != ""; {
		if len(digests) == maxPrefixChunks {
			return nil, nil, fmt.Errorf("%w: prefix %s: more than %d chunks", transcript.ErrCorrupt, d, maxPrefixChunks)
		}
		var c transcript.PrefixChunk
		if err := s.GetJSON(ctx, next, &c); err != nil {
			return nil, nil, err
		}
		if err := c.Validate(); err != nil {
			return nil, nil, fmt.Errorf("%w: prefix chunk %s: %v", transcript.ErrCorrupt, next, err)
		}
		chunks = append(chunks, c)
		digests = append(digests, next)
		next = c.Parent
	}
	slices.Reverse(chunks)
	return chunks, digests, nil
}
