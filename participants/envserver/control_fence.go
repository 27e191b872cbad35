package envserver

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// Control operations, as the phase fence records them.
const (
	opPrepare = "prepare"
	opCommit  = "commit"
	opRestore = "restore"
	opResume  = "resume"
)

// Kinds of control session, as the fence remembers them once retired.
const (
	sessionNone       = ""           // a resume alone (an abort before anything ran)
	sessionCheckpoint = "checkpoint" // a prepare succeeded: this server took (or began) the cut
	sessionRestore    = "restore"
)

// takenOverSession is what a restore took over of a committed checkpoint
// session: its id and recorded answers.
type takenOverSession struct {
	id         string
	results    map[string]recorded
	frozen     *serverState
	cutRetires map[string]int
}

// retiredSession is what the fence keeps of a session resume ended.
type retiredSession struct {
	answer protocol.ResumeResponse
	kind   string
}

// recorded is the answer of a successful operation, with the arguments it
// must be repeated with to be replayed.
type recorded struct {
	key    string
	answer any
}

// phaseFence is the checkpoint state machine every control operation passes.
// It is keyed by the control session's id: the checkpoint id for a
// checkpoint (prepare, commit), the restore id for a restore (which
// defaults to the id of the checkpoint it restores); both share one
// namespace.
//
//   - the same (session id, operation) replays its recorded answer;
//   - another session id while one is active → checkpoint_conflict;
//   - after resume the id is retired: any operation with it but resume →
//     stale_checkpoint (a delayed prepare from a stale coordinator must not
//     close admission again; a re-run of a finished restore must not install
//     again); resume replays;
//   - one exception: the id of a checkpoint this process took may open one
//     restore session of that same checkpoint (the trainer rolling back to
//     checkpoint k on a live server, under the default restore id k); once
//     that restore is resumed the id is retired as a restore. Restoring the
//     same checkpoint again takes a new restore id;
//   - a restore may take over a checkpoint session left committed (a
//     checkpoint taken with stay-paused, never resumed): admission stays
//     closed throughout, and when the restore succeeds the checkpoint's id
//     is retired as if resumed; when it fails the checkpoint session is
//     back as it was;
//   - an operation not allowed in the phase → invalid_phase;
//   - a failed operation returns to the phase (and active id) it started
//     from and records nothing, so it can be tried again;
//   - operations run one at a time; a second one waits for the first, except
//     that resume aborts a running prepare.
//
// It also holds the frozen cut, from prepare to resume.
type phaseFence struct {
	mu     sync.Mutex
	phase  protocol.Phase
	active string // session id of the run in progress; "" when idle
	// activeKind is sessionCheckpoint or sessionRestore once a prepare or
	// a restore began in the active session; activeCheckpoint is the
	// checkpoint it is about.
	activeKind       string
	activeCheckpoint string
	running          string // operation in progress, "" if none
	done             chan struct{}
	abort            context.CancelFunc // aborts a running prepare
	results          map[string]recorded
	// retired holds every session id retired by resume, for the life of
	// the process: one short string per checkpoint taken or restore run,
	// and forgetting one would let a delayed prepare from a stale
	// coordinator close admission, or a re-run restore install twice.
	retired map[string]retiredSession

	frozen *serverState // the cut, prepared → resume
	// cutRetires are retirements made while the cut was being taken or
	// after it was frozen: rollout → lowest attempt still accepted.
	cutRetires map[string]int

	lease sessionLease
}

func newPhaseFence() *phaseFence {
	return &phaseFence{phase: protocol.PhaseIdle, results: map[string]recorded{}, retired: map[string]retiredSession{}}
}

// opSpec describes one call of an operation.
type opSpec struct {
	op string
	id string // the session id: checkpoint id, or restore id
	// checkpoint is the checkpoint the operation is about (a restore's
	// differs from id when it runs under its own restore id).
	checkpoint string
	key        string // arguments a replay must repeat (e.g. the commit location)
	// allowed are the phases the operation may start from; nil means any.
	allowed []protocol.Phase
	// during is the phase while it runs; "" keeps the current one.
	during protocol.Phase
	// lease is a prepare's lease (R28).
	lease time.Duration
}

// opRun is an operation the fence let start.
type opRun struct {
	spec        opSpec
	entryPhase  protocol.Phase
	entryActive string
	entryKind   string
	entryCkpt   string
	entryLease  time.Duration
	// takenOver is the committed checkpoint session a restore took over,
	// kept so a failed restore gives it back whole; nil otherwise.
	takenOver *takenOverSession
	ctx       context.Context // cancelled when resume aborts the operation
	cancel    context.CancelFunc
}

// begin lets spec's operation start, or returns the recorded answer to
// replay, or a refusal. ctx bounds the wait for a running operation; the
// returned run's ctx is derived from it.
func (f *phaseFence) begin(ctx context.Context, spec opSpec) (*opRun, any, error) {
	if spec.id == "" {
		return nil, nil, refuse(protocol.CodeMalformed, "missing field checkpoint_id")
	}
	f.mu.Lock()
	for {
		if answer, decided, err := f.decideLocked(spec); decided {
			f.mu.Unlock()
			return nil, answer, err
		}
		if f.running == "" {
			break
		}
		if spec.op == opResume && f.abort != nil {
			f.abort()
		}
		done := f.done
		f.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return nil, nil, refuse(protocol.CodeInvalidPhase,
				"%s of checkpoint %q gave up waiting for the running %s: %v", spec.op, spec.id, f.runningOp(), ctx.Err())
		}
		f.mu.Lock()
	}
	defer f.mu.Unlock()
	if err := f.checkPhaseLocked(spec); err != nil {
		return nil, nil, err
	}
	return f.startLocked(ctx, spec), nil, nil
}

// decideLocked answers spec without running it when the fence already
// knows the answer: a refusal of a retired or conflicting session, or the
// recorded answer to replay. Callers hold f.mu.
func (f *phaseFence) decideLocked(spec opSpec) (answer any, decided bool, err error) {
	if ret, ok := f.retired[spec.id]; ok {
		reusing := f.active == spec.id && f.activeKind == sessionRestore
		switch {
		case reusing && (spec.op == opRestore || spec.op == opResume):
			// The restore session that reuses the id of a checkpoint
			// this process took: its own operations go on below.
		case !reusing && spec.op == opResume:
			return ret.answer, true, nil
		case !reusing && spec.op == opRestore && ret.kind == sessionCheckpoint && spec.checkpoint == spec.id:
			// The first restore of a checkpoint this process took,
			// under the checkpoint's own id: a new restore session.
		default:
			return nil, true, refuse(protocol.CodeStaleCheckpoint,
				"%s session %q was resumed and is retired; this %s is from a stale coordinator or a re-run "+
					"(restore a checkpoint again under a new restore_id)", kindName(ret.kind), spec.id, spec.op)
		}
	}
	if f.active != "" && f.active != spec.id && !f.takesOverLocked(spec) {
		return nil, true, refuse(protocol.CodeCheckpointConflict,
			"checkpoint %q is active (phase %s); %s of checkpoint %q refused", f.active, f.phase, spec.op, spec.id)
	}
	if f.takesOverLocked(spec) {
		return nil, false, nil // the checkpoint's recorded answers are not the restore's
	}
	if r, ok := f.results[spec.op]; ok {
		if r.key != spec.key {
			return nil, true, refuse(protocol.CodeCheckpointConflict,
				"%s of checkpoint %q already succeeded with other arguments (%s)", spec.op, spec.id, r.key)
		}
		return r.answer, true, nil
	}
	return nil, false, nil
}

// takesOverLocked says whether spec is a restore that takes over a
// checkpoint session left committed (stay-paused): nothing of it runs, its
// cut is written, and the restore replaces the world it paused. Callers
// hold f.mu.
func (f *phaseFence) takesOverLocked(spec opSpec) bool {
	return spec.op == opRestore && f.running == "" && f.phase == protocol.PhaseCommitted && f.activeKind == sessionCheckpoint
}

// checkPhaseLocked refuses an operation the phase does not allow, and a
// restore session's resume that names another checkpoint. Callers hold f.mu.
func (f *phaseFence) checkPhaseLocked(spec opSpec) error {
	if spec.allowed != nil && !slices.Contains(spec.allowed, f.phase) {
		return refuse(protocol.CodeInvalidPhase,
			"%s of checkpoint %q is not allowed in phase %s (allowed: %v)", spec.op, spec.id, f.phase, spec.allowed)
	}
	if f.active == spec.id && f.activeKind == sessionRestore && spec.op == opResume &&
		spec.checkpoint != "" && spec.checkpoint != f.activeCheckpoint {
		return refuse(protocol.CodeCheckpointConflict,
			"restore session %q restores checkpoint %q; resume names checkpoint %q", spec.id, f.activeCheckpoint, spec.checkpoint)
	}
	return nil
}

// startLocked records spec's operation as running in its session. Callers
// hold f.mu.
func (f *phaseFence) startLocked(ctx context.Context, spec opSpec) *opRun {
	f.cancelLeaseLocked()
	run := &opRun{spec: spec, entryPhase: f.phase, entryActive: f.active, entryKind: f.activeKind, entryCkpt: f.activeCheckpoint,
		entryLease: f.lease.length}
	run.ctx, run.cancel = context.WithCancel(ctx)
	if spec.op == opPrepare {
		f.lease.length = spec.lease
	}
	if f.takesOverLocked(spec) {
		run.takenOver = &takenOverSession{id: f.active, results: f.results, frozen: f.frozen, cutRetires: f.cutRetires}
		f.results, f.frozen, f.cutRetires = map[string]recorded{}, nil, nil
		f.activeCheckpoint = spec.checkpoint
	}
	if f.active != spec.id {
		f.activeCheckpoint = spec.checkpoint
	}
	f.active = spec.id
	switch spec.op {
	case opPrepare:
		f.activeKind = sessionCheckpoint
	case opRestore:
		f.activeKind = sessionRestore
	}
	if spec.during != "" {
		f.phase = spec.during
	}
	f.running = spec.op
	f.done = make(chan struct{})
	if spec.op == opPrepare {
		f.abort = run.cancel
	}
	return run
}

func (f *phaseFence) runningOp() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.running
}

// endLocked ends the running operation. Callers hold f.mu.
func (f *phaseFence) endLocked(run *opRun) {
	run.cancel()
	f.running = ""
	f.abort = nil
	close(f.done)
	f.done = nil
	f.armLeaseLocked()
}

// fail ends run without recording anything: back to the phase and active
// checkpoint it started from.
func (f *phaseFence) fail(run *opRun) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.phase = run.entryPhase
	f.active = run.entryActive
	f.activeKind, f.activeCheckpoint = run.entryKind, run.entryCkpt
	f.lease.length = run.entryLease
	if t := run.takenOver; t != nil {
		// The committed checkpoint session, as it was.
		f.results, f.frozen, f.cutRetires = t.results, t.frozen, t.cutRetires
	}
	if f.phase == protocol.PhaseIdle {
		f.active, f.activeKind, f.activeCheckpoint = "", sessionNone, ""
		f.frozen = nil
		f.cutRetires = nil
	}
	f.endLocked(run)
}

// succeed ends run in phase after and records its answer. A resume retires
// the session id, with the kind of session it ended, and forgets the run.
func (f *phaseFence) succeed(run *opRun, after protocol.Phase, answer any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.phase = after
	if run.spec.op == opResume {
		f.retired[run.spec.id] = retiredSession{answer: answer.(protocol.ResumeResponse), kind: f.activeKind}
		f.active, f.activeKind, f.activeCheckpoint = "", sessionNone, ""
		f.results = map[string]recorded{}
		f.frozen = nil
		f.cutRetires = nil
	} else {
		f.results[run.spec.op] = recorded{key: run.spec.key, answer: answer}
	}
	if t := run.takenOver; t != nil {
		// The checkpoint session ends here, as a resume would have ended
		// it: a late resume of it replays, a late prepare or commit is stale.
		f.retired[t.id] = retiredSession{answer: protocol.ResumeResponse{Phase: protocol.PhaseIdle, CheckpointID: t.id}, kind: sessionCheckpoint}
	}
	f.endLocked(run)
}

// fenceView is what status and capabilities report of the fence.
type fenceView struct {
	phase      protocol.Phase
	checkpoint string // the checkpoint the active session is about
	restoreID  string // the active restore session's id, if any
	cut        int    // sessions in the frozen cut
}

// snapshot returns the phase, the active session and the size of the
// frozen cut.
func (f *phaseFence) snapshot() fenceView {
	f.mu.Lock()
	defer f.mu.Unlock()
	v := fenceView{phase: f.phase, checkpoint: f.activeCheckpoint}
	if f.activeKind == sessionRestore {
		v.restoreID = f.active
	}
	if f.frozen != nil {
		v.cut = len(f.frozen.Sessions)
	}
	return v
}

func kindName(kind string) string {
	if kind == sessionNone {
		return "control"
	}
	return kind
}
