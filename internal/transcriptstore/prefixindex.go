package transcriptstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/internal/transcript"
)

// prefixIndexDir holds the prefix indexes: mutable objects beside the
// content-addressed blobs (a sweep looks only at the two-digit blob
// directories, so it never sees them).
const prefixIndexDir = "prefix-index"

// maxPrefixIndexBytes bounds an index read: far above any real one.
const maxPrefixIndexBytes = 64 << 10

func prefixIndexName(key string) (string, error) {
	if !isHex(key, 64) {
		return "", fmt.Errorf("transcript: prefix index key %q: want 64 lowercase hexadecimal digits", key)
	}
	return prefixIndexDir + "/" + key, nil
}

// PutPrefixIndex replaces the prefix index under key (transcript.PrefixIndexKey).
func (s *Store) PutPrefixIndex(ctx context.Context, key string, x transcript.PrefixIndex) error {
	n, err := prefixIndexName(key)
	if err != nil {
		return err
	}
	if err := x.Validate(); err != nil {
		return err
	}
	data, err := json.Marshal(x)
	if err != nil {
		return fmt.Errorf("transcript: encode prefix index of %s: %w", x.Call, err)
	}
	if err := storage.WriteBytes(ctx, s.st, n, data); err != nil {
		return fmt.Errorf("transcript: put prefix index of %s: %w", x.Call, err)
	}
	s.stats.writes.Add(1)
	s.stats.writeBytes.Add(int64(len(data)))
	return nil
}

// PrefixIndex reads the prefix index under key. None there is
// transcript.ErrNotFound; one that does not decode strictly or validate is
// transcript.ErrCorrupt.
func (s *Store) PrefixIndex(ctx context.Context, key string) (transcript.PrefixIndex, error) {
	n, err := prefixIndexName(key)
	if err != nil {
		return transcript.PrefixIndex{}, err
	}
	data, err := storage.ReadAll(ctx, s.st, n, maxPrefixIndexBytes)
	if errors.Is(err, storage.ErrNotExist) {
		return transcript.PrefixIndex{}, fmt.Errorf("%w: prefix index %s", transcript.ErrNotFound, key)
	}
	if err != nil {
		return transcript.PrefixIndex{}, fmt.Errorf("transcript: get prefix index %s: %w", key, err)
	}
	s.stats.reads.Add(1)
	s.stats.readBytes.Add(int64(len(data)))
	var x transcript.PrefixIndex
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&x); err != nil {
		return transcript.PrefixIndex{}, fmt.Errorf("%w: prefix index %s: %v", transcript.ErrCorrupt, key, err)
	}
	if err := x.Validate(); err != nil {
		return transcript.PrefixIndex{}, fmt.Errorf("%w: prefix index %s: %v", transcript.ErrCorrupt, key, err)
	}
	return x, nil
}

// RemovePrefixIndex deletes the prefix index under key; none there is no
// error.
func (s *Store) RemovePrefixIndex(ctx context.Context, key string) error {
	n, err := prefixIndexName(key)
	if err != nil {
		return err
	}
	if err := s.st.Remove(ctx, n); err != nil {
		return fmt.Errorf("transcript: remove prefix index %s: %w", key, err)
	}
	return nil
}
