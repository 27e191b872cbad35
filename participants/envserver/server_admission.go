package envserver

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"go.uber.org/zap"

	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// admission is the gate every mutation passes. The checkpoint control
// protocol closes it to take a consistent cut: mutations arriving while it is
// closed are answered "parked" (retry later) without being applied, and the
// protocol waits until the mutations already admitted have finished.
type admission struct {
	mu       sync.Mutex
	closed   bool
	inflight int
	idle     []chan struct{} // closed when inflight drops to 0

	// holds counts the admitted mutations per (rollout, attempt) once their
	// identity is known, so a timed-out prepare can name its stragglers.
	holds map[holdKey]int
	// floors are retirements not yet applied to their slot: rollout id →
	// lowest attempt still accepted. A retire cannot wait for the slot's
	// lock (a stuck mutation may hold it), so the next holder of the lock
	// applies it (settle), and a prepare does not wait for mutations below
	// the floor.
	floors map[string]int
	// changed is closed (and replaced) whenever inflight, holds or floors
	// change, so a prepare can re-check its drain condition.
	changed chan struct{}
}

type holdKey struct {
	rollout string
	attempt int
}

// enter admits one mutation, or reports false when admission is closed.
func (a *admission) enter() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return false
	}
	a.inflight++
	return true
}

// leave ends a mutation admitted by enter.
func (a *admission) leave() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.inflight--
	a.wakeLocked()
	if a.inflight == 0 {
		for _, ch := range a.idle {
			close(ch)
		}
		a.idle = nil
	}
}

// closeAdmission parks every mutation that arrives from now on. Mutations
// already admitted run to the end; waitIdle waits for them.
func (s *Server) closeAdmission() {
	s.gate.mu.Lock()
	s.gate.closed = true
	s.gate.mu.Unlock()
}

// openAdmission admits mutations again.
func (s *Server) openAdmission() {
	s.gate.mu.Lock()
	s.gate.closed = false
	s.gate.mu.Unlock()
}

// admissionClosed reports whether mutations are being parked.
func (s *Server) admissionClosed() bool {
	s.gate.mu.Lock()
	defer s.gate.mu.Unlock()
	return s.gate.closed
}

// waitIdle returns once no admitted mutation is in flight, or ctx's error.
// After closeAdmission, a nil return means the sessions are quiescent until
// openAdmission.
func (s *Server) waitIdle(ctx context.Context) error {
	s.gate.mu.Lock()
	if s.gate.inflight == 0 {
		s.gate.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	s.gate.idle = append(s.gate.idle, ch)
	n := s.gate.inflight
	s.gate.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for %d in-flight mutations: %w", n, ctx.Err())
	}
}

// wakeLocked wakes everyone watching for a change. Callers hold a.mu.
func (a *admission) wakeLocked() {
	if a.changed != nil {
		close(a.changed)
		a.changed = nil
	}
}

// watch returns a channel closed at the next change.
func (a *admission) watch() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.changed == nil {
		a.changed = make(chan struct{})
	}
	return a.changed
}

// hold records that an admitted mutation of (rollout, attempt) is running
// (waiting for the rollout's lock or holding it); call the returned function
// when it ends.
func (a *admission) hold(rollout string, attempt int) (release func()) {
	k := holdKey{rollout, attempt}
	a.mu.Lock()
	if a.holds == nil {
		a.holds = map[holdKey]int{}
	}
	a.holds[k]++
	a.wakeLocked() // a mutation of a retired attempt stops counting once identified
	a.mu.Unlock()
	return func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.holds[k]--; a.holds[k] <= 0 {
			delete(a.holds, k)
		}
		a.wakeLocked()
	}
}

// raiseFloor records a retirement of every attempt below floor, to be
// applied to the rollout's slot by the next holder of its lock.
func (a *admission) raiseFloor(rollout string, floor int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.floors == nil {
		a.floors = map[string]int{}
	}
	a.floors[rollout] = max(a.floors[rollout], floor)
	a.wakeLocked()
}

// floor returns the pending retirement floor of rollout, if any.
func (a *admission) floor(rollout string) (int, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f, ok := a.floors[rollout]
	return f, ok
}

// clearFloor forgets a pending floor once it has been applied (at least
// floor; a higher one raised meanwhile stays pending).
func (a *admission) clearFloor(rollout string, applied int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if f, ok := a.floors[rollout]; ok && f <= applied {
		delete(a.floors, rollout)
		a.wakeLocked()
	}
}

// retiredHold reports whether a mutation of (rollout, attempt) belongs to a
// retired attempt whose retirement is still pending. Callers hold a.mu.
func (a *admission) retiredHoldLocked(k holdKey) bool {
	f, ok := a.floors[k.rollout]
	return ok && k.attempt < f
}

// drained reports whether every admitted mutation has finished, except those
// of retired attempts (whose results will be discarded), and lists the
// mutations still running.
func (a *admission) drained() (bool, []protocol.InFlight) {
	a.mu.Lock()
	defer a.mu.Unlock()
	pending := a.inflight
	list := make([]protocol.InFlight, 0, len(a.holds))
	for k, n := range a.holds {
		retired := a.retiredHoldLocked(k)
		if retired {
			pending -= n
		}
		list = append(list, protocol.InFlight{RolloutID: k.rollout, Attempt: k.attempt, Count: n, Retired: retired})
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].RolloutID != list[j].RolloutID {
			return list[i].RolloutID < list[j].RolloutID
		}
		return list[i].Attempt < list[j].Attempt
	})
	return pending <= 0, list
}

// waitDrained waits until drained, or returns ctx's error with the
// mutations still running.
func (s *Server) waitDrained(ctx context.Context) ([]protocol.InFlight, error) {
	for {
		ch := s.gate.watch()
		if ok, _ := s.gate.drained(); ok {
			return nil, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			ok, list := s.gate.drained()
			if ok {
				return nil, nil
			}
			return list, ctx.Err()
		}
	}
}

// settle applies a pending retirement to sl: the fence rises to the floor
// and a session of a retired attempt is closed and dropped. Callers hold
// sl.mu; every holder of the lock calls it first.
func (s *Server) settle(sl *slot) {
	f, ok := s.gate.floor(sl.id)
	if !ok {
		return
	}
	sl.raise(f)
	if old := s.store.drop(sl, f); old != nil {
		if err := old.Close(); err != nil {
			s.log.Warn("close retired session", zap.String("rollout_id", sl.id), zap.Error(err))
		}
	}
	s.gate.clearFloor(sl.id, f)
}

// lockedChecks runs under sl.mu before a mutation touches the session: it
// applies a pending retirement and re-checks admission, because a prepare
// may have closed it while the request waited for the lock; such a request
// is parked, never half-applied.
func (s *Server) lockedChecks(sl *slot) error {
	s.settle(sl)
	if s.admissionClosed() {
		return refuse(protocol.CodeParked, "admission closed for a checkpoint while the request waited; retry the same request later")
	}
	return nil
}

// retiredWhileRunning is checked under sl.mu after an environment call: if
// the request's attempt was retired meanwhile, the result is discarded (the
// session is dropped with it) and the request is refused stale_attempt.
func (s *Server) retiredWhileRunning(sl *slot, attempt int) error {
	f, ok := s.gate.floor(sl.id)
	if !ok || attempt >= f {
		return nil
	}
	s.settle(sl)
	return refuse(protocol.CodeStaleAttempt,
		"rollout %q: attempt %d was retired while its request ran; the result is discarded", sl.id, attempt)
}
