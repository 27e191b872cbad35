package bookkeeping

import (
	"context"
	"sync"
	"time"

	"github.com/turnstile-rl/turnstile/internal/visibility"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
	"github.com/turnstile-rl/turnstile/workflows/set"
)

// SetFences answers, for the rollouts a worker seeds, whether a restore of
// their set fenced their run chain. It reads each set's fence record from
// Temporal (a describe) and answers from that read for set.FenceReadTTL:
// the rollouts of a set seeded in the same second cost one read, not one
// each. A restore waits set.FenceSettle after writing its fence, so no
// answer from a read older than the fence is given once it installs
// anything. A record that cannot be read is an error (the caller retries):
// a run never goes on unchecked. Share one value per worker process.
type SetFences struct {
	Client visibility.Describer
	// TTL overrides set.FenceReadTTL (tests); it must not exceed it.
	TTL time.Duration
	// Now is the clock reads are timed by (nil: time.Now).
	Now func() time.Time

	mu    sync.Mutex
	reads map[string]*fenceRead
	// Reads counts the records read from Temporal (tests).
	Reads int
}

// fenceRead is one read of a set's record, in flight until done closes.
type fenceRead struct {
	done   chan struct{}
	issued time.Time
	fence  set.SetFence
	err    error
}

// maxCachedSets bounds the records kept: beyond it, expired ones go.
const maxCachedSets = 1024

// FencedRun says whether a restore of set fenced the run chain that
// started at startedAt, and by which window.
func (s *SetFences) FencedRun(ctx context.Context, name string, startedAt time.Time) (rollout.FenceWindow, bool, error) {
	f, err := s.record(ctx, name)
	if err != nil {
		return rollout.FenceWindow{}, false, err
	}
	w, fenced := f.FencesRun(startedAt)
	return w, fenced, nil
}

// record is set name's fence record as read less than the TTL ago, read
// now when there is none (one read at a time per set; callers meanwhile
// wait for it).
func (s *SetFences) record(ctx context.Context, name string) (set.SetFence, error) {
	r, mine := s.current(name)
	if mine {
		r.fence, r.err = visibility.ReadSetFence(ctx, s.Client, name)
		close(r.done)
	}
	select {
	case <-r.done:
		return r.fence, r.err
	case <-ctx.Done():
		return set.SetFence{}, ctx.Err()
	}
}

// current is the read of name's record to answer from, and whether the
// caller must make it.
func (s *SetFences) current(name string) (*fenceRead, bool) {
	now := time.Now()
	if s.Now != nil {
		now = s.Now()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.reads[name]; r != nil && now.Sub(r.issued) < s.ttl() && !failed(r) {
		return r, false
	}
	if s.reads == nil || len(s.reads) >= maxCachedSets {
		s.reads = s.unexpired(now)
	}
	r := &fenceRead{done: make(chan struct{}), issued: now}
	s.reads[name] = r
	s.Reads++
	return r, true
}

func (s *SetFences) ttl() time.Duration {
	if s.TTL > 0 && s.TTL < set.FenceReadTTL {
		return s.TTL
	}
	return set.FenceReadTTL
}

// unexpired are the reads still usable at now.
func (s *SetFences) unexpired(now time.Time) map[string]*fenceRead {
	out := map[string]*fenceRead{}
	for name, r := range s.reads {
		if now.Sub(r.issued) < s.ttl() {
			out[name] = r
		}
	}
	return out
}

// failed says whether r ended in an error (a read in flight has not).
func failed(r *fenceRead) bool {
	select {
	case <-r.done:
		return r.err != nil
	default:
		return false
	}
}
