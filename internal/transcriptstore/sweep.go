package transcriptstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/internal/transcript"
)

// RefreshAge is how old a stored blob may be before a Put of the same
// content writes it again. A Put of content already stored writes nothing,
// so without the refresh a writer could take up a blob that a sweep,
// seeing it old and unreferenced, is about to delete. With it, a blob
// that a writer has put within RefreshAge is never older than RefreshAge,
// and a sweep whose grace period exceeds RefreshAge leaves it alone.
const RefreshAge = time.Hour

// MinGrace is the shortest grace period a sweep outside tests should use:
// RefreshAge plus the longest an activity holds a digest before its
// workflow records it (a model call), with room for clock skew between the
// machines and the object store.
const MinGrace = 2 * RefreshAge

// refresh writes an existing blob again when the stored copy is older than
// RefreshAge (by the store's clock; a backend that keeps no times is never
// refreshed).
func (s *Store) refresh(ctx context.Context, d transcript.Digest, data []byte) error {
	e, err := s.st.Stat(ctx, name(d))
	if errors.Is(err, storage.ErrNotExist) {
		// Swept between the Create and the Stat: store it again.
		return s.create(ctx, d, data)
	}
	if err != nil {
		return fmt.Errorf("transcript: put %s: %w", d, err)
	}
	if e.ModTime.IsZero() || time.Since(e.ModTime) < RefreshAge {
		return nil
	}
	if err := storage.WriteBytes(ctx, s.st, name(d), data); err != nil {
		return fmt.Errorf("transcript: refresh %s: %w", d, err)
	}
	return nil
}

// create stores data under d, counting the write; existing is no error.
func (s *Store) create(ctx context.Context, d transcript.Digest, data []byte) error {
	err := s.st.Create(ctx, name(d), data)
	if errors.Is(err, storage.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("transcript: put %s: %w", d, err)
	}
	s.stats.writes.Add(1)
	s.stats.writeBytes.Add(int64(len(data)))
	return nil
}

// SweepResult counts what a sweep kept and freed.
type SweepResult struct {
	// Kept are the blobs left in place: referenced, or written after the
	// cutoff; Young counts the latter among them.
	KeptBlobs int   `json:"kept_blobs"`
	KeptBytes int64 `json:"kept_bytes"`
	Young     int   `json:"young_blobs"`
	// Freed are the blobs deleted: unreferenced and older than the cutoff.
	FreedBlobs int   `json:"freed_blobs"`
	FreedBytes int64 `json:"freed_bytes"`
}

// SweepCutoff is the cutoff of a sweep whose mark began at markStart: a
// blob written (or refreshed) at or after markStart-grace is never
// deleted. It is a whole second earlier still, truncated to the second:
// some object stores keep modification times in whole seconds, and a file
// system stamps times from a clock that may lag by a tick, so a blob
// written at markStart may carry a time up to a second earlier.
func SweepCutoff(markStart time.Time, grace time.Duration) time.Time {
	return markStart.Add(-grace).Truncate(time.Second).Add(-time.Second)
}

// Sweep deletes every blob that referenced does not name and whose stored
// copy was last written before cutoff (SweepCutoff of when the mark began),
// and counts what it kept and freed. A blob without a modification time
// is kept. Each candidate is looked at again just before it is deleted,
// so one refreshed by a writer since the listing is kept.
//
// Why it is safe against writers running meanwhile: a blob written after
// the mark began is younger than the cutoff; one whose content a writer
// put again has been refreshed unless it was already younger than
// RefreshAge, which the grace period exceeds. So whatever a writer holds
// that the mark did not see is never older than the cutoff.
func (s *Store) Sweep(ctx context.Context, referenced func(transcript.Digest) bool, cutoff time.Time) (SweepResult, error) {
	var res SweepResult
	tops, err := s.st.List(ctx)
	if err != nil {
		return res, fmt.Errorf("transcript: sweep %s: %w", s.st.Location(), err)
	}
	for _, top := range tops {
		if !top.Dir || !isHex(top.Name, 2) {
			continue
		}
		if err := s.sweepDir(ctx, top.Name, referenced, cutoff, &res); err != nil {
			return res, err
		}
	}
	return res, nil
}

// sweepDir sweeps the blobs under one two-digit directory.
func (s *Store) sweepDir(ctx context.Context, dir string, referenced func(transcript.Digest) bool, cutoff time.Time, res *SweepResult) error {
	sub, err := s.st.Sub(dir)
	if err != nil {
		return fmt.Errorf("transcript: sweep %s: %w", dir, err)
	}
	entries, err := sub.List(ctx)
	if err != nil {
		return fmt.Errorf("transcript: sweep %s: %w", sub.Location(), err)
	}
	for _, e := range entries {
		if !e.Regular || !isHex(e.Name, 64) || !strings.HasPrefix(e.Name, dir) {
			continue // not a blob (a temporary file, something else)
		}
		d := transcript.Digest("sha256:" + e.Name)
		if referenced(d) {
			res.KeptBlobs++
			res.KeptBytes += e.Size
			continue
		}
		freed, err := s.sweepBlob(ctx, sub, e, cutoff)
		if err != nil {
			return err
		}
		if freed {
			res.FreedBlobs++
			res.FreedBytes += e.Size
		} else {
			res.KeptBlobs++
			res.KeptBytes += e.Size
			res.Young++
		}
	}
	return nil
}

// sweepBlob deletes an unreferenced blob if it is still older than cutoff.
func (s *Store) sweepBlob(ctx context.Context, sub storage.Store, e storage.Entry, cutoff time.Time) (bool, error) {
	if e.ModTime.IsZero() || !e.ModTime.Before(cutoff) {
		return false, nil
	}
	now, err := sub.Stat(ctx, e.Name)
	if errors.Is(err, storage.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("transcript: sweep %s: %w", e.Name, err)
	}
	if now.ModTime.IsZero() || !now.ModTime.Before(cutoff) {
		return false, nil
	}
	if err := sub.Remove(ctx, e.Name); err != nil {
		return false, fmt.Errorf("transcript: sweep: remove %s: %w", e.Name, err)
	}
	return true, nil
}

// isHex is true when s is n lowercase hexadecimal digits.
func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, r := range s {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return false
		}
	}
	return true
}

// ModTime is when blob d was last written, by the store's clock (zero
// when the backend keeps no times).
func (s *Store) ModTime(ctx context.Context, d transcript.Digest) (time.Time, error) {
	if err := d.Validate(); err != nil {
		return time.Time{}, err
	}
	e, err := s.st.Stat(ctx, name(d))
	if err != nil {
		return time.Time{}, fmt.Errorf("transcript: stat %s: %w", d, err)
	}
	return e.ModTime, nil
}
