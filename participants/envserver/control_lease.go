package envserver

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// sessionLease is the lease of the active checkpoint session (R28): once
// prepared, and again once committed, the session resumes by itself if no
// further operation of its checkpoint arrives within length. Any control
// operation that starts cancels the running lease (gen moves on), so a newer
// operation always holds the session; the lease is armed again when an
// operation ends with a checkpoint session prepared or committed.
type sessionLease struct {
	length time.Duration // the prepare's lease; 0 when no checkpoint session
	gen    uint64
	timer  *time.Timer
	// expire resumes the session id if lease generation gen is still the
	// current one; set by the server.
	expire func(id string, gen uint64)
}

// cancelLocked stops the running lease, if any. Callers hold f.mu.
func (f *phaseFence) cancelLeaseLocked() {
	f.lease.gen++
	if f.lease.timer != nil {
		f.lease.timer.Stop()
		f.lease.timer = nil
	}
}

// armLeaseLocked starts the lease of the active checkpoint session when it
// is prepared or committed and nothing runs. Callers hold f.mu.
func (f *phaseFence) armLeaseLocked() {
	f.cancelLeaseLocked()
	held := f.phase == protocol.PhasePrepared || f.phase == protocol.PhaseCommitted
	if !held || f.running != "" || f.activeKind != sessionCheckpoint || f.lease.length <= 0 || f.lease.expire == nil {
		return
	}
	id, gen, expire := f.active, f.lease.gen, f.lease.expire
	f.lease.timer = time.AfterFunc(f.lease.length, func() { expire(id, gen) })
}

// startExpiryLocked begins the resume a lease's expiry makes: only if the
// lease is still the current one, its session still active and nothing
// running. Callers hold f.mu.
func (f *phaseFence) startExpiryLocked(id string, gen uint64) *opRun {
	if f.lease.gen != gen || f.active != id || f.running != "" || f.activeKind != sessionCheckpoint {
		return nil
	}
	return f.startLocked(context.Background(), opSpec{op: opResume, id: id})
}

// expireLease resumes checkpoint session id when its lease gen ends with
// no newer operation: admission reopens and the id is retired, exactly as
// a resume of the checkpoint does (a late resume replays; a late prepare or
// commit is stale_checkpoint).
func (s *Server) expireLease(id string, gen uint64) {
	f := s.ctl.fence
	f.mu.Lock()
	run := f.startExpiryLocked(id, gen)
	f.mu.Unlock()
	if run == nil {
		return
	}
	s.openAdmission()
	f.succeed(run, protocol.PhaseIdle, protocol.ResumeResponse{Phase: protocol.PhaseIdle, CheckpointID: id})
	s.log.Warn("checkpoint lease expired with no resume; resumed by itself",
		zap.String("checkpoint_id", id), zap.Duration("lease", f.leaseLength()))
}

func (f *phaseFence) leaseLength() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lease.length
}
