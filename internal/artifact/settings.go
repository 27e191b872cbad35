package artifact

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Settings of a process that reads checkpoints (a worker's coordinator, an
// environment server), read from its environment by SettingsFromLookup.
const (
	// EnvMaxManifestBytes bounds manifest.json.
	EnvMaxManifestBytes = "TURNSTILE_CHECKPOINT_MAX_MANIFEST_BYTES"
	// EnvMaxIndexBytes bounds one section's index file.
	EnvMaxIndexBytes = "TURNSTILE_CHECKPOINT_MAX_INDEX_BYTES"
	// EnvMaxRecordBytes bounds one record (a tar member) read into memory.
	EnvMaxRecordBytes = "TURNSTILE_CHECKPOINT_MAX_RECORD_BYTES"
	// EnvKeyFile names a file holding the key manifests are signed with
	// (HMAC-SHA256); unset, manifests are written unsigned and read
	// without a signature check.
	EnvKeyFile = "TURNSTILE_CHECKPOINT_KEY_FILE"
)

// Defaults of Settings: far above what a real checkpoint holds (an index
// line is about 250 bytes, so the index bound is about a million records
// per section; a record is bounded by the writer's shard size, 64 MiB by
// default).
const (
	DefaultMaxManifestBytes = 64 << 20
	DefaultMaxIndexBytes    = 256 << 20
	DefaultMaxRecordBytes   = 256 << 20
	// MinKeyBytes is the shortest signing key accepted.
	MinKeyBytes = 32
)

// SignaturePrefix starts a manifest's signature: the algorithm, then the
// MAC in lower-case hex.
const SignaturePrefix = "hmac-sha256:"

// Settings bound what Open reads before it trusts anything, and carry the
// signing key. The zero value means the defaults and no key.
type Settings struct {
	// MaxManifestBytes bounds manifest.json (0: DefaultMaxManifestBytes).
	MaxManifestBytes int64
	// MaxIndexBytes bounds the size an index may claim and have
	// (0: DefaultMaxIndexBytes).
	MaxIndexBytes int64
	// MaxRecordBytes bounds the size an index may claim for one record
	// (0: DefaultMaxRecordBytes).
	MaxRecordBytes int64
	// Key, when set, is the HMAC-SHA256 key: Write signs the manifest with
	// it, and Open refuses a manifest that is unsigned or signed otherwise.
	Key []byte
}

func (s Settings) withDefaults() Settings {
	if s.MaxManifestBytes <= 0 {
		s.MaxManifestBytes = DefaultMaxManifestBytes
	}
	if s.MaxIndexBytes <= 0 {
		s.MaxIndexBytes = DefaultMaxIndexBytes
	}
	if s.MaxRecordBytes <= 0 {
		s.MaxRecordBytes = DefaultMaxRecordBytes
	}
	return s
}

// Signed reports whether a key is configured.
func (s Settings) Signed() bool { return len(s.Key) > 0 }

// SettingsFromLookup reads Settings from a process's environment (lookup
// is os.LookupEnv, or a map in tests). Sizes are bytes, optionally with a
// KiB, MiB or GiB suffix; the key file holds at least MinKeyBytes bytes,
// surrounding whitespace trimmed.
func SettingsFromLookup(lookup func(string) (string, bool)) (Settings, error) {
	var s Settings
	for _, f := range []struct {
		env string
		dst *int64
	}{{EnvMaxManifestBytes, &s.MaxManifestBytes}, {EnvMaxIndexBytes, &s.MaxIndexBytes}, {EnvMaxRecordBytes, &s.MaxRecordBytes}} {
		v, ok := lookup(f.env)
		if !ok || strings.TrimSpace(v) == "" {
			continue
		}
		n, err := ParseSize(v)
		if err != nil {
			return Settings{}, fmt.Errorf("%s=%q: %w", f.env, v, err)
		}
		*f.dst = n
	}
	if path, ok := lookup(EnvKeyFile); ok && strings.TrimSpace(path) != "" {
		key, err := ReadKeyFile(strings.TrimSpace(path))
		if err != nil {
			return Settings{}, fmt.Errorf("%s: %w", EnvKeyFile, err)
		}
		s.Key = key
	}
	return s.withDefaults(), nil
}

// ReadKeyFile reads a signing key: the file's content with surrounding
// whitespace trimmed, at least MinKeyBytes bytes.
func ReadKeyFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint key: %w", err)
	}
	key := bytes.TrimSpace(b)
	if len(key) < MinKeyBytes {
		return nil, fmt.Errorf("checkpoint key %s: %d bytes, want at least %d (for example `openssl rand -hex 32`)", path, len(key), MinKeyBytes)
	}
	return key, nil
}

// ParseSize parses a positive byte count: "1048576", "64MiB", "2GiB".
func ParseSize(v string) (int64, error) {
	v = strings.TrimSpace(v)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if n, ok := strings.CutSuffix(v, u.suffix); ok {
			v, mult = strings.TrimSpace(n), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return 0, errors.New("want a positive number of bytes, optionally with a KiB, MiB or GiB suffix")
	}
	return n * mult, nil
}

// Sign is the signature of a manifest under key: SignaturePrefix and the
// HMAC-SHA256 (hex) of unsigned, the manifest's canonical bytes with its
// digest set and no signature. The coordinator signs its aggregate
// manifest the same way.
func Sign(key, unsigned []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write(unsigned)
	return SignaturePrefix + hex.EncodeToString(mac.Sum(nil))
}

// CheckSignature checks a manifest's signature (empty: unsigned) against
// key; unsigned are the manifest's canonical bytes without its signature.
// Without a key only the signature's shape is checked, so a checkpoint
// signed elsewhere still reads.
func CheckSignature(signature string, unsigned, key []byte) error {
	if signature != "" {
		mac, ok := strings.CutPrefix(signature, SignaturePrefix)
		if !ok || !hexRE.MatchString(mac) {
			return fmt.Errorf("signature %q: want %s followed by 64 lower-case hex digits", signature, SignaturePrefix)
		}
	}
	switch {
	case len(key) == 0:
		return nil
	case signature == "":
		return fmt.Errorf("unsigned, but this process has a checkpoint key (%s) and accepts only manifests signed with it", EnvKeyFile)
	case !hmac.Equal([]byte(Sign(key, unsigned)), []byte(signature)):
		return errors.New("signature does not verify with this process's checkpoint key (signed with another key, or forged)")
	}
	return nil
}
