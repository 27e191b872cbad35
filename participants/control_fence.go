package participants

import (
	"context"
	"net/http"
	"slices"
	"sync"
)

// Control operations, as the phase fence records them.
const (
	opPrepare = "prepare"
	opCommit  = "commit"
	opRestore = "restore"
	opResume  = "resume"
)

// recorded is the answer of a successful operation, with the arguments it
// must be repeated with to be replayed.
type recorded struct {
	key    string
	answer any
}

// phaseFence is the checkpoint state machine every control operation passes:
//
//   - the same (checkpoint id, operation) replays its recorded answer;
//   - another checkpoint id while one is active → checkpoint_conflict;
//   - after resume the id is retired: any operation with it but resume →
//     stale_checkpoint (a delayed prepare from a stale coordinator must not
//     close admission again); resume replays;
//   - an operation not allowed in the phase → invalid_phase;
//   - a failed operation returns to the phase (and active id) it started
//     from and records nothing, so it can be tried again;
//   - operations run one at a time; a second one waits for the first, except
//     that resume aborts a running prepare.
//
// It also holds the frozen cut, from prepare to resume.
type phaseFence struct {
	mu      sync.Mutex
	phase   Phase
	active  string // checkpoint id of the run in progress; "" when idle
	running string // operation in progress, "" if none
	done    chan struct{}
	abort   context.CancelFunc // aborts a running prepare
	results map[string]recorded
	// retired holds every checkpoint id retired by resume, for the life of
	// the process: one short string per checkpoint taken, and forgetting one
	// would let a delayed prepare from a stale coordinator close admission.
	retired map[string]ResumeResponse

	frozen *serverState // the cut, prepared → resume
	// cutRetires are retirements made while the cut was being taken or
	// after it was frozen: rollout → lowest attempt still accepted.
	cutRetires map[string]int
}

func newPhaseFence() *phaseFence {
	return &phaseFence{phase: PhaseIdle, results: map[string]recorded{}, retired: map[string]ResumeResponse{}}
}

// opSpec describes one call of an operation.
type opSpec struct {
	op  string
	id  string
	key string // arguments a replay must repeat (e.g. the commit location)
	// allowed are the phases the operation may start from; nil means any.
	allowed []Phase
	// during is the phase while it runs; "" keeps the current one.
	during Phase
}

// opRun is an operation the fence let start.
type opRun struct {
	spec        opSpec
	entryPhase  Phase
	entryActive string
	ctx         context.Context // cancelled when resume aborts the operation
	cancel      context.CancelFunc
}

// begin lets spec's operation start, or returns the recorded answer to
// replay, or a refusal. ctx bounds the wait for a running operation; the
// returned run's ctx is derived from it.
func (f *phaseFence) begin(ctx context.Context, spec opSpec) (*opRun, any, *apiError) {
	if spec.id == "" {
		return nil, nil, refuse(http.StatusBadRequest, CodeMalformed, "missing field checkpoint_id")
	}
	f.mu.Lock()
	for {
		if ans, ok := f.retired[spec.id]; ok {
			f.mu.Unlock()
			if spec.op == opResume {
				return nil, ans, nil
			}
			return nil, nil, refuse(http.StatusConflict, CodeStaleCheckpoint,
				"checkpoint %q was resumed and is retired; this %s is from a stale coordinator", spec.id, spec.op)
		}
		if f.active != "" && f.active != spec.id {
			active := f.active
			f.mu.Unlock()
			return nil, nil, refuse(http.StatusConflict, CodeCheckpointConflict,
				"checkpoint %q is active (phase %s); %s of checkpoint %q refused", active, f.phase, spec.op, spec.id)
		}
		if r, ok := f.results[spec.op]; ok {
			f.mu.Unlock()
			if r.key != spec.key {
				return nil, nil, refuse(http.StatusConflict, CodeCheckpointConflict,
					"%s of checkpoint %q already succeeded with other arguments (%s)", spec.op, spec.id, r.key)
			}
			return nil, r.answer, nil
		}
		if f.running != "" {
			if spec.op == opResume && f.abort != nil {
				f.abort()
			}
			done := f.done
			f.mu.Unlock()
			select {
			case <-done:
			case <-ctx.Done():
				return nil, nil, refuse(http.StatusConflict, CodeInvalidPhase,
					"%s of checkpoint %q gave up waiting for the running %s: %v", spec.op, spec.id, f.runningOp(), ctx.Err())
			}
			f.mu.Lock()
			continue
		}
		if spec.allowed != nil && !slices.Contains(spec.allowed, f.phase) {
			phase := f.phase
			f.mu.Unlock()
			return nil, nil, refuse(http.StatusConflict, CodeInvalidPhase,
				"%s of checkpoint %q is not allowed in phase %s (allowed: %v)", spec.op, spec.id, phase, spec.allowed)
		}
		run := &opRun{spec: spec, entryPhase: f.phase, entryActive: f.active}
		run.ctx, run.cancel = context.WithCancel(ctx)
		f.active = spec.id
		if spec.during != "" {
			f.phase = spec.during
		}
		f.running = spec.op
		f.done = make(chan struct{})
		if spec.op == opPrepare {
			f.abort = run.cancel
		}
		f.mu.Unlock()
		return run, nil, nil
	}
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
}

// fail ends run without recording anything: back to the phase and active
// checkpoint it started from.
func (f *phaseFence) fail(run *opRun) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.phase = run.entryPhase
	f.active = run.entryActive
	if f.phase == PhaseIdle {
		f.active = ""
		f.frozen = nil
		f.cutRetires = nil
	}
	f.endLocked(run)
}

// succeed ends run in phase after and records its answer. A resume retires
// the checkpoint id and forgets the run.
func (f *phaseFence) succeed(run *opRun, after Phase, answer any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.phase = after
	if run.spec.op == opResume {
		f.retired[run.spec.id] = answer.(ResumeResponse)
		f.active = ""
		f.results = map[string]recorded{}
		f.frozen = nil
		f.cutRetires = nil
	} else {
		f.results[run.spec.op] = recorded{key: run.spec.key, answer: answer}
	}
	f.endLocked(run)
}

// snapshot returns the phase, the active checkpoint id and the size of the
// frozen cut.
func (f *phaseFence) snapshot() (Phase, string, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	if f.frozen != nil {
		n = len(f.frozen.Sessions)
	}
	return f.phase, f.active, n
}
