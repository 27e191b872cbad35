// Package artifact is the on-disk checkpoint format: a directory of named
// sections, each a list of (key, data) records, stored as bounded,
// deterministic tar shards with a JSONL index per section and a manifest.json
// written last.
//
// Layout of a checkpoint directory:
//
//	manifest.json                 written last: a directory without it is not a checkpoint
//	<section>.index.jsonl         one line per record: {key, shard, member, size, sha256}
//	<section>-00000.tar …         ≤ MaxShardRecords records and ≤ MaxShardBytes payload each
//
// Every member, archive and index carries a SHA-256; the manifest lists each
// archive and index with its size and digest and carries a digest of itself.
// Open validates all of it (exact directory inventory, exact member lists,
// regular files only, no path escapes, sizes and digests) before it returns
// anything, so a corrupt, torn or mismatched checkpoint yields an error and no
// data. Write is idempotent: a retried Write of the same content validates the
// existing checkpoint and returns its manifest.
//
// Determinism: the same sections give byte-identical files whatever the order
// of the caller's sections and records, so a recovered run can be compared
// byte for byte with an uninterrupted one.
package artifact

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// SchemaVersion is the manifest schema this package writes and the only one
// Open accepts.
const SchemaVersion = 1

// Defaults for Options, from the reference design (≤512 members, ≤64 MiB).
const (
	DefaultMaxShardRecords = 512
	DefaultMaxShardBytes   = 64 << 20
)

// Names of the files in a checkpoint directory.
const (
	ManifestName = "manifest.json"
	// IndexSuffix ends every index file name: <section>.index.jsonl.
	IndexSuffix = ".index.jsonl"
	// ShardSuffix ends every shard name: <section>-00000.tar.
	ShardSuffix = ".tar"
	// MemberSuffix ends every tar member name: <sha256(key) hex>.rec.
	MemberSuffix = ".rec"
	// tempPrefix starts every temporary file; such a file never belongs to a
	// committed checkpoint.
	tempPrefix = ".tmp-"
)

// Limits on names, so that every file and member name has one short, safe
// shape.
const (
	MaxSectionNameLen  = 128
	MaxKeyLen          = 1024
	MaxCheckpointIDLen = 256
	// maxShardsPerSection follows from the 5-digit shard number.
	maxShardsPerSection = 100000
	// minIndexLineBytes is less than the shortest canonical index line
	// (the member name and the digest alone take 132 bytes), so an index
	// of n bytes holds fewer than n/minIndexLineBytes records.
	minIndexLineBytes = 128
	// maxIndexLineBytes is more than the longest canonical index line (a
	// 1024-byte key escaped to 6 bytes a byte, a section name, a member
	// name and a digest).
	maxIndexLineBytes = 16 << 10
)

// Sentinel errors. Every error of Open wraps ErrInvalid; callers test with
// errors.Is.
var (
	// ErrInvalid: the checkpoint (or the input to Write) is malformed, corrupt,
	// torn or not the one asked for.
	ErrInvalid = errors.New("invalid checkpoint")
	// ErrNoManifest: the directory has no manifest.json, so it is not a
	// checkpoint (a commit tore before its end or never ran). Wrapped together
	// with ErrInvalid.
	ErrNoManifest = errors.New("no manifest")
	// ErrConflict: Write found a committed checkpoint with different content
	// in the directory; nothing was overwritten.
	ErrConflict = errors.New("checkpoint directory holds different content")
)

// Record is one keyed blob of a section.
type Record struct {
	Key  string
	Data []byte
}

// Section is a named list of records.
type Section struct {
	Name    string
	Records []Record
}

// Meta identifies a checkpoint and carries caller metadata (who created it,
// for which set and trainer step, ...). It holds no timestamps on purpose:
// the same input must give the same bytes.
type Meta struct {
	CheckpointID string
	Labels       map[string]string
}

// Options tune Write. The zero value uses the defaults.
type Options struct {
	// MaxShardRecords bounds the records per shard (0: DefaultMaxShardRecords).
	MaxShardRecords int
	// MaxShardBytes bounds the payload bytes (sum of record data) per shard
	// (0: DefaultMaxShardBytes). A single record larger than this is refused.
	MaxShardBytes int64
	// BetweenFiles, if set, is called after each file is durable and before
	// the next one is written, so a crash test can kill the process there
	// (wire failpoint.CheckpointBetweenFiles to it).
	BetweenFiles func()
	// Key, when set, signs the manifest (HMAC-SHA256, see
	// Manifest.Signature); a retried Write needs the same key to recognise
	// its own checkpoint.
	Key []byte
}

// Manifest is the content of manifest.json.
type Manifest struct {
	Schema       int               `json:"schema"`
	CheckpointID string            `json:"checkpoint_id"`
	Labels       map[string]string `json:"labels,omitempty"`
	// Records is the total over all sections.
	Records int `json:"records"`
	// Sections are sorted by name.
	Sections []SectionManifest `json:"sections"`
	// Digest is the SHA-256 (hex) of the manifest's canonical encoding with
	// Digest empty and no Signature. It identifies the whole checkpoint's
	// content, since the manifest binds every file by digest.
	Digest string `json:"digest"`
	// Signature, present only when the writer had a key, is
	// "hmac-sha256:" and the HMAC-SHA256 (hex) under that key of the
	// manifest's canonical encoding with Digest set and no Signature. A
	// digest anyone can recompute; a signature only a key holder can.
	Signature string `json:"signature,omitempty"`
}

// SectionManifest describes one section.
type SectionManifest struct {
	Name    string     `json:"name"`
	Records int        `json:"records"`
	Index   FileRef    `json:"index"`
	Shards  []ShardRef `json:"shards"`
}

// FileRef binds a file by name, size and SHA-256 (hex).
type FileRef struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// ShardRef binds a tar shard and counts its records.
type ShardRef struct {
	Name    string `json:"name"`
	Size    int64  `json:"size"`
	SHA256  string `json:"sha256"`
	Records int    `json:"records"`
}

// IndexEntry is one line of a section index.
type IndexEntry struct {
	Key    string `json:"key"`
	Shard  string `json:"shard"`
	Member string `json:"member"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Section names are lower case (no two names may differ only by case, for
// case-insensitive filesystems), start with a letter or digit (no hidden or
// temporary names) and hold no path separator.
var sectionNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)

var (
	hexRE = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// ShardName is the file name of a section's n-th shard.
func ShardName(section string, n int) string {
	return fmt.Sprintf("%s-%05d%s", section, n, ShardSuffix)
}

// IndexName is the file name of a section's index.
func IndexName(section string) string { return section + IndexSuffix }

// MemberName is the tar member name of a record key: derived from the key so
// that any key (slashes, dots, unicode) yields one fixed, safe shape.
func MemberName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:]) + MemberSuffix
}

func validSectionName(name string) error {
	switch {
	case name == "":
		return errors.New("empty section name")
	case len(name) > MaxSectionNameLen:
		return fmt.Errorf("section name %.40q… longer than %d bytes", name, MaxSectionNameLen)
	case !sectionNameRE.MatchString(name) || strings.Contains(name, ".."):
		return fmt.Errorf("section name %q: want lower-case letters, digits, '.', '_' or '-', starting with a letter or digit, no '..'", name)
	}
	return nil
}

func validKey(key string) error {
	switch {
	case key == "":
		return errors.New("empty record key")
	case len(key) > MaxKeyLen:
		return fmt.Errorf("record key %.40q… longer than %d bytes", key, MaxKeyLen)
	case !utf8.ValidString(key):
		// JSON would replace invalid bytes, and the key would not survive
		// the index.
		return fmt.Errorf("record key %q is not valid UTF-8", key)
	}
	return nil
}

func validCheckpointID(id string) error {
	switch {
	case id == "":
		return errors.New("empty checkpoint id")
	case len(id) > MaxCheckpointIDLen:
		return fmt.Errorf("checkpoint id %.40q… longer than %d bytes", id, MaxCheckpointIDLen)
	case !utf8.ValidString(id):
		return fmt.Errorf("checkpoint id %q is not valid UTF-8", id)
	case strings.IndexFunc(id, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0:
		return fmt.Errorf("checkpoint id %q holds a control character", id)
	}
	return nil
}

func validLabels(labels map[string]string) error {
	for k, v := range labels {
		if k == "" || !utf8.ValidString(k) || !utf8.ValidString(v) {
			return fmt.Errorf("label %q=%q: keys must be non-empty and both valid UTF-8", k, v)
		}
	}
	return nil
}

// encodeManifest returns the canonical bytes of m with its Digest set and,
// with a key, its Signature; it sets both in m.
func encodeManifest(m *Manifest, key []byte) ([]byte, error) {
	m.Digest, m.Signature = "", ""
	unsealed, err := canonicalManifest(m)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(unsealed)
	m.Digest = hex.EncodeToString(sum[:])
	unsigned, err := canonicalManifest(m)
	if err != nil || len(key) == 0 {
		return unsigned, err
	}
	m.Signature = Sign(key, unsigned)
	return canonicalManifest(m)
}

// canonicalManifest is the one encoding a manifest may have on disk. Open
// re-encodes what it parsed and demands the same bytes, so no byte of
// manifest.json can change without Open noticing (json decoding alone is
// lenient: case-insensitive field names, whitespace, escapes).
func canonicalManifest(m *Manifest) ([]byte, error) {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode manifest: %w", err)
	}
	return append(b, '\n'), nil
}

// canonicalIndexLine is the one encoding an index line may have.
func canonicalIndexLine(e IndexEntry) ([]byte, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encode index entry %q: %w", e.Key, err)
	}
	return append(b, '\n'), nil
}

// tarSize is the exact size of a shard holding members of these sizes, as
// archive/tar writes it in ustar format: a 512-byte header per member, the
// data padded to 512, and two zero blocks.
func tarSize(sizes []int64) int64 {
	var n int64 = 1024
	for _, s := range sizes {
		n += 512 + (s+511)/512*512
	}
	return n
}
