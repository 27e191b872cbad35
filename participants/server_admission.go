package participants

import (
	"context"
	"fmt"
	"sync"
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
