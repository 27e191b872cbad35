package envserver

import (
	"container/list"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// DefaultRetiredSessions is how many retired sessions keep their receipts
// (so a verify retried after the session ended still gets its verdict).
const DefaultRetiredSessions = 4096

// DefaultRetiredGrace is how long a retired session keeps its receipts after
// its last use (its retirement, or a request answered from them). A retry
// of a finished rollout's request comes within an activity's timeout (the
// longest, a rollout's model call, is 5 minutes); twice that is the grace.
const DefaultRetiredGrace = 10 * time.Minute

// DefaultForgetAfter is how long a finished rollout whose receipts were
// dropped is still remembered (its fence and its session's info) after its
// last change. What the memory is for is a late request of an old attempt,
// to be refused stale_attempt; such a request is sent by an environment
// activity of that attempt and arrives within that call's timeout (15 s by
// default) of the attempt being fenced out, which is before the rollout's
// last attempt finished. An hour is far above that and above
// DefaultRetiredGrace, and bounds what a server holds (and exports in every
// checkpoint) to the rollouts of about the last hour.
const DefaultForgetAfter = time.Hour

// The sweep that forgets finished rollouts runs every quarter of the
// retention, within these bounds.
const (
	minForgetSweep = 100 * time.Millisecond
	maxForgetSweep = time.Minute
)

// Receipt kinds: which mutation a stored response answers.
const (
	kindStart   = "start"
	kindOperate = "operate"
	kindVerify  = "verify"
)

// receipt is the stored response of one applied mutation.
type receipt struct {
	Kind string `json:"kind"`
	// Digest is the sha256 of the canonical request body without the
	// attempt, so a higher attempt re-sending the same request matches.
	Digest   string          `json:"digest"`
	Response json.RawMessage `json:"response"`
	// Request is the canonical request Digest is the digest of, kept for
	// sessions of replay environments only: the log a restore re-applies.
	Request json.RawMessage `json:"request,omitempty"`
}

// session is one rollout's episode on this server. Its exported fields are
// what a checkpoint needs besides the environment's own state.
type session struct {
	Env      string             `json:"env"`
	Attempt  int                `json:"attempt"` // the attempt that started (or installed) it
	Revision int64              `json:"revision"`
	Retired  bool               `json:"retired"`
	Receipts map[string]receipt `json:"receipts"`

	live envs.Session // nil once retired
	// idleSince, for a retired session read from a checkpoint, is when it
	// was retired or last answered from there; zero otherwise.
	idleSince time.Time
}

func (s *session) info(rolloutID string) protocol.SessionInfo {
	return protocol.SessionInfo{RolloutID: rolloutID, Env: s.Env, Attempt: s.Attempt, Revision: s.Revision, Retired: s.Retired}
}

// slot is everything the server knows about one rollout id. The fence
// outlives the session: a slot is deleted only when its rollout is
// forgotten (forgetIfIdle: no live session, no receipts kept, unchanged for
// the retention). mu serialises the rollout's requests; lock order is
// slot.mu, then sessionStore.mu.
type slot struct {
	mu sync.Mutex
	id string
	// touched is when the slot last changed (created, a session installed,
	// retired or dropped, its fence raised). Guarded by mu.
	touched time.Time
	// gone says the slot was forgotten and is no longer in the store: a
	// holder of a slot looked up before that must look it up again (or
	// find none). Guarded by mu.
	gone bool
	// fence is the highest attempt installed: written only under mu (and
	// only ever raised, by the control plane or a restore), read without
	// it by the control plane, which must not wait behind a mutation that
	// may never return.
	fence atomic.Int64
	live  *session // the live session, or nil
}

// installed is the slot's fence.
func (sl *slot) installed() int { return int(sl.fence.Load()) }

// raise raises the fence to at least v. Callers hold sl.mu.
func (sl *slot) raise(v int) {
	if int64(v) > sl.fence.Load() {
		sl.fence.Store(int64(v))
	}
}

// sessionStore holds the slots and the retired sessions. A retired
// session keeps its receipts while it is among the retiredCap most
// recently used and was used within grace; then only its info is kept
// (evictedInfo), and a request it would have answered fails closed.
type sessionStore struct {
	mu          sync.Mutex
	slots       map[string]*slot
	liveCount   int
	retiredCap  int
	grace       time.Duration // < 0: no time limit
	now         func() time.Time
	sweep       *time.Timer                     // pending sweep of the oldest retired session, or nil
	retiredLRU  *list.List                      // of *retiredEntry, most recent first
	retired     map[string]*list.Element        // rollout id → LRU element
	evictedInfo map[string]protocol.SessionInfo // retired sessions whose receipts were dropped
	forgetAfter time.Duration                   // < 0: never forget
	forgetSweep *time.Timer                     // pending sweep forgetting finished rollouts, or nil
	// pending says whether a retirement of the rollout is pending at the
	// admission gate (nil: never); such a rollout is not forgotten.
	pending func(id string) bool
}

type retiredEntry struct {
	id   string
	sess *session
	used time.Time // retired, or last answered from
}

// newSessionStore bounds retired sessions by count (retiredCap, 0: the
// default) and by time since their last use (grace, 0: the default,
// negative: none), and forgets a finished rollout unchanged for forgetAfter
// (0: the default, negative: never), measured on now (nil: time.Now).
func newSessionStore(retiredCap int, grace, forgetAfter time.Duration, now func() time.Time) *sessionStore {
	if retiredCap <= 0 {
		retiredCap = DefaultRetiredSessions
	}
	if grace == 0 {
		grace = DefaultRetiredGrace
	}
	if forgetAfter == 0 {
		forgetAfter = DefaultForgetAfter
	}
	if now == nil {
		now = time.Now
	}
	return &sessionStore{
		slots:       map[string]*slot{},
		retiredCap:  retiredCap,
		grace:       grace,
		now:         now,
		retiredLRU:  list.New(),
		retired:     map[string]*list.Element{},
		evictedInfo: map[string]protocol.SessionInfo{},
		forgetAfter: forgetAfter,
	}
}

// lookup returns the slot of id, or nil.
func (st *sessionStore) lookup(id string) *slot {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.slots[id]
}

// slotFor returns the slot of id, creating it.
func (st *sessionStore) slotFor(id string) *slot {
	st.mu.Lock()
	defer st.mu.Unlock()
	sl, ok := st.slots[id]
	if !ok {
		sl = &slot{id: id, touched: st.now()}
		st.slots[id] = sl
		st.armForgetLocked()
	}
	return sl
}

// lockSlot returns the slot of id locked, creating it when create is set;
// nil when there is none. It never returns a forgotten slot.
func (st *sessionStore) lockSlot(id string, create bool) *slot {
	for {
		var sl *slot
		if create {
			sl = st.slotFor(id)
		} else if sl = st.lookup(id); sl == nil {
			return nil
		}
		sl.mu.Lock()
		if !sl.gone {
			return sl
		}
		sl.mu.Unlock()
	}
}

// touchLocked records that sl changed now. Callers hold sl.mu and st.mu.
func (st *sessionStore) touchLocked(sl *slot) {
	sl.touched = st.now()
	st.armForgetLocked()
}

// touch records that sl changed now (its fence rose). Callers hold sl.mu.
func (st *sessionStore) touch(sl *slot) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.touchLocked(sl)
}

// forgetIfIdle forgets the rollout of sl when nothing of it is worth
// keeping any more: no live session, no retired session with its
// receipts, no pending retirement, and no change for the retention. Its
// slot, fence and evicted info go; a later request finds a rollout never
// seen. It reports whether sl is forgotten (now or before). Callers hold
// sl.mu.
func (st *sessionStore) forgetIfIdle(sl *slot) bool {
	if sl.gone {
		return true
	}
	if st.forgetAfter < 0 || sl.live != nil || (st.pending != nil && st.pending(sl.id)) {
		return false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.expireLocked()
	if _, kept := st.retired[sl.id]; kept || st.now().Sub(sl.touched) < st.forgetAfter {
		return false
	}
	delete(st.slots, sl.id)
	delete(st.evictedInfo, sl.id)
	sl.gone = true
	return true
}

// armForgetLocked schedules a sweep of finished rollouts unless one is
// pending. Callers hold st.mu.
func (st *sessionStore) armForgetLocked() {
	if st.forgetAfter < 0 || st.forgetSweep != nil {
		return
	}
	st.forgetSweep = time.AfterFunc(min(max(st.forgetAfter/4, minForgetSweep), maxForgetSweep), st.sweepForgotten)
}

// sweepForgotten forgets every idle finished rollout whose lock is free
// (a busy one is not idle), then schedules the next sweep while any
// rollout without a live session is left, so an idle server forgets too.
func (st *sessionStore) sweepForgotten() {
	st.mu.Lock()
	st.forgetSweep = nil
	slots := make([]*slot, 0, len(st.slots))
	for _, sl := range st.slots {
		slots = append(slots, sl)
	}
	st.mu.Unlock()
	left := false
	for _, sl := range slots {
		if !sl.mu.TryLock() {
			left = true
			continue
		}
		if !st.forgetIfIdle(sl) && sl.live == nil {
			left = true
		}
		sl.mu.Unlock()
	}
	if left {
		st.mu.Lock()
		st.armForgetLocked()
		st.mu.Unlock()
	}
}

// current returns the rollout's session, live or retired; when the retired
// session's receipts were evicted, it returns the evicted session's info
// instead. It is for a data-plane request, which uses the session: a
// retired session's grace starts over. Callers hold sl.mu. A retired
// session is never modified, so reading it after this returns is safe.
func (st *sessionStore) current(sl *slot) (*session, *protocol.SessionInfo) {
	return st.find(sl, true)
}

// peek is current without using the session: for checkpoint exports, the
// control plane and session info, which read a retired session but must
// not keep its receipts alive (a checkpoint every 30 s would keep every
// one forever).
func (st *sessionStore) peek(sl *slot) (*session, *protocol.SessionInfo) {
	return st.find(sl, false)
}

// idleSince is when the retired session of id was retired or last
// answered from; zero when it holds none with receipts.
func (st *sessionStore) idleSince(id string) time.Time {
	st.mu.Lock()
	defer st.mu.Unlock()
	if el, ok := st.retired[id]; ok {
		return el.Value.(*retiredEntry).used
	}
	return time.Time{}
}

func (st *sessionStore) find(sl *slot, use bool) (*session, *protocol.SessionInfo) {
	if sl.live != nil {
		return sl.live, nil
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.expireLocked()
	if el, ok := st.retired[sl.id]; ok {
		e := el.Value.(*retiredEntry)
		if use {
			st.retiredLRU.MoveToFront(el)
			e.used = st.now()
		}
		return e.sess, nil
	}
	if info, ok := st.evictedInfo[sl.id]; ok {
		return nil, &info
	}
	return nil, nil
}

// retire moves the live session of sl to the retired LRU, evicting the
// oldest retired sessions beyond the bound. Callers hold sl.mu and have
// closed the environment session.
func (st *sessionStore) retire(sl *slot) {
	sess := sl.live
	sess.Retired = true
	sess.live = nil
	sl.live = nil
	st.mu.Lock()
	defer st.mu.Unlock()
	st.liveCount--
	st.pushRetiredAtLocked(sl.id, sess, st.now())
	st.touchLocked(sl)
}

// pushRetiredAtLocked keeps sess among the retired sessions as last used
// at used, in its place in the LRU (most recent first), then evicts
// beyond the bound and expires what is past the grace.
func (st *sessionStore) pushRetiredAtLocked(id string, sess *session, used time.Time) {
	if el, ok := st.retired[id]; ok {
		st.retiredLRU.Remove(el)
	}
	delete(st.evictedInfo, id)
	e := &retiredEntry{id: id, sess: sess, used: used}
	at := st.retiredLRU.Front()
	for at != nil && at.Value.(*retiredEntry).used.After(used) {
		at = at.Next()
	}
	if at == nil {
		st.retired[id] = st.retiredLRU.PushBack(e)
	} else {
		st.retired[id] = st.retiredLRU.InsertBefore(e, at)
	}
	for st.retiredLRU.Len() > st.retiredCap {
		st.evictLocked(st.retiredLRU.Back())
	}
	st.expireLocked()
	st.armSweepLocked()
}

// evictLocked drops a retired session's receipts, keeping its info so that
// a request it would have answered is refused, never applied again.
func (st *sessionStore) evictLocked(el *list.Element) {
	e := el.Value.(*retiredEntry)
	st.retiredLRU.Remove(el)
	delete(st.retired, e.id)
	st.evictedInfo[e.id] = e.sess.info(e.id)
	st.armForgetLocked()
}

// expireLocked evicts the retired sessions unused for the grace period,
// oldest first (the back of the LRU is the least recently used).
func (st *sessionStore) expireLocked() {
	if st.grace < 0 {
		return
	}
	now := st.now()
	for el := st.retiredLRU.Back(); el != nil && now.Sub(el.Value.(*retiredEntry).used) >= st.grace; el = st.retiredLRU.Back() {
		st.evictLocked(el)
	}
}

// armSweepLocked schedules one sweep for when the least recently used
// retired session's grace ends, so that an idle server (a drained run)
// lets go of receipts too, not only one that keeps retiring sessions.
func (st *sessionStore) armSweepLocked() {
	if st.grace < 0 || st.sweep != nil || st.retiredLRU.Len() == 0 {
		return
	}
	wait := st.grace - st.now().Sub(st.retiredLRU.Back().Value.(*retiredEntry).used)
	st.sweep = time.AfterFunc(max(wait, 0), func() {
		st.mu.Lock()
		defer st.mu.Unlock()
		st.sweep = nil
		st.expireLocked()
		st.armSweepLocked()
	})
}

// install makes sess the rollout's session (live or retired), dropping any
// previous one. It returns the previous live environment session for the
// caller to close. Callers hold sl.mu.
func (st *sessionStore) install(sl *slot, sess *session) envs.Session {
	var old envs.Session
	st.mu.Lock()
	defer st.mu.Unlock()
	if sl.live != nil {
		old = sl.live.live
		sl.live = nil
		st.liveCount--
	}
	if el, ok := st.retired[sl.id]; ok {
		st.retiredLRU.Remove(el)
		delete(st.retired, sl.id)
	}
	delete(st.evictedInfo, sl.id)
	st.touchLocked(sl)
	if sess.Retired {
		// A retired session from a checkpoint keeps its retention clock:
		// a recovery installing it afresh would otherwise keep it, and
		// every checkpoint carrying it, for another grace period, and a
		// server restored again and again would never let go of it.
		used := st.now()
		if !sess.idleSince.IsZero() && sess.idleSince.Before(used) {
			used = sess.idleSince
			sl.touched = used
		}
		sess.idleSince = time.Time{}
		st.pushRetiredAtLocked(sl.id, sess, used)
	} else {
		sl.live = sess
		st.liveCount++
	}
	return old
}

// drop removes the rollout's session (live, retired or evicted) when its
// attempt is below floor, and returns the environment session to close.
// Callers hold sl.mu.
func (st *sessionStore) drop(sl *slot, floor int) envs.Session {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.touchLocked(sl)
	if sl.live != nil {
		if sl.live.Attempt >= floor {
			return nil
		}
		old := sl.live.live
		sl.live = nil
		st.liveCount--
		return old
	}
	if el, ok := st.retired[sl.id]; ok && el.Value.(*retiredEntry).sess.Attempt < floor {
		st.retiredLRU.Remove(el)
		delete(st.retired, sl.id)
	}
	if info, ok := st.evictedInfo[sl.id]; ok && info.Attempt < floor {
		delete(st.evictedInfo, sl.id)
	}
	return nil
}

func (st *sessionStore) live() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.liveCount
}

// sortedSlots returns every slot, ordered by rollout id.
func (st *sessionStore) sortedSlots() []*slot {
	st.mu.Lock()
	out := make([]*slot, 0, len(st.slots))
	for _, sl := range st.slots {
		out = append(out, sl)
	}
	st.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// sessionRecord is one rollout's session as the checkpoint control protocol
// saves it: the server's bookkeeping plus the environment's exported state.
type sessionRecord struct {
	RolloutID string             `json:"rollout_id"`
	Env       string             `json:"env"`
	Attempt   int                `json:"attempt"`
	Revision  int64              `json:"revision"`
	Retired   bool               `json:"retired"`
	Receipts  map[string]receipt `json:"receipts"`
	// State is the environment's Export; empty for retired sessions and for
	// environments that are not export_restore (those rollouts start over).
	State json.RawMessage `json:"state,omitempty"`
	// IdleSince is when a retired session was retired or last answered
	// from; zero for a live one.
	IdleSince time.Time `json:"idle_since,omitzero"`
}

// serverState is everything the data plane holds, in a deterministic shape.
type serverState struct {
	Sessions []sessionRecord `json:"sessions"` // ordered by rollout id
	Fences   map[string]int  `json:"fences"`   // highest attempt per rollout, for every rollout seen
}

// exportState captures all sessions (live and retired with receipts), their
// environment state and the fence of every rollout the server still
// remembers; a finished rollout past its retention is forgotten here, not
// exported. Call it with admission closed and waitIdle done, so the cut is
// consistent.
func (s *Server) exportState() (serverState, error) {
	out := serverState{Sessions: []sessionRecord{}, Fences: map[string]int{}}
	for _, sl := range s.store.sortedSlots() {
		rec, ok, err := s.exportSlot(sl, out.Fences)
		if err != nil {
			return serverState{}, err
		}
		if ok {
			out.Sessions = append(out.Sessions, rec)
		}
	}
	return out, nil
}

func (s *Server) exportSlot(sl *slot, fences map[string]int) (sessionRecord, bool, error) {
	if f, pending := s.gate.floor(sl.id); pending {
		// A retirement not yet applied: after a drain, whoever holds the
		// lock is a mutation of the retired attempt that may never return.
		// Its session is being dropped, so the cut holds only the fence.
		if !sl.mu.TryLock() {
			fences[sl.id] = f
			return sessionRecord{}, false, nil
		}
	} else {
		sl.mu.Lock()
	}
	defer sl.mu.Unlock()
	s.settle(sl)
	if s.store.forgetIfIdle(sl) {
		// Finished and unchanged for the retention: the cut, like the
		// server from now on, no longer holds it.
		return sessionRecord{}, false, nil
	}
	fences[sl.id] = sl.installed()
	sess, _ := s.store.peek(sl)
	if sess == nil {
		return sessionRecord{}, false, nil
	}
	rec := sessionRecord{
		RolloutID: sl.id, Env: sess.Env, Attempt: sess.Attempt, Revision: sess.Revision,
		Retired: sess.Retired, Receipts: make(map[string]receipt, len(sess.Receipts)),
	}
	if sess.Retired {
		rec.IdleSince = s.store.idleSince(sl.id)
	}
	for k, v := range sess.Receipts {
		rec.Receipts[k] = v
	}
	// A stateless session is cut with its (small) state too: the coordinator
	// continues such a rollout at its boundary, so the restored server must
	// hold the session. Restart-only sessions are cut as a fence alone, and
	// replay sessions as their receipts (the replay log) alone.
	if m := s.modes[sess.Env]; sess.live != nil && (m == envs.ModeExportRestore || m == envs.ModeStateless) {
		state, err := sess.live.Export()
		if err != nil {
			return sessionRecord{}, false, fmt.Errorf("export session %q (env %s): %w", sl.id, sess.Env, err)
		}
		rec.State = state
	}
	return rec, true, nil
}

// installState installs sessions and fences, all or nothing: every record is
// validated and every environment session restored before anything is
// replaced. Rollouts absent from st are left as they are. Live records
// without state install only their fence, and such rollouts start over,
// unless their environment is served in replay mode: then the session is
// rebuilt by re-applying its receipts (replaySession), and a replay that
// diverges installs only the fence, named in the answer with why. The
// caller sets each record's Attempt (e.g. N+1 on a restore); fences are
// raised to at least it. Call it with admission closed and waitIdle done.
func (s *Server) installState(st serverState) (map[string]string, error) {
	return s.installStateThen(st, nil, nil)
}

// installStateThen is installState with two hooks: validated is called after
// every record is validated and restored and before anything is installed
// (the restore.after-validate failpoint), installed after each session is
// installed (env.restore-mid-install: a crash leaves a half-installed
// server, which only a fresh process and a retried restore may replace).
func (s *Server) installStateThen(st serverState, validated, installed func()) (map[string]string, error) {
	type prepared struct {
		rec  sessionRecord
		sess *session // nil: fence only
	}
	var todo []prepared
	diverged := map[string]string{}
	closeAll := func() {
		for _, p := range todo {
			if p.sess != nil && p.sess.live != nil {
				_ = p.sess.live.Close()
			}
		}
	}
	seen := map[string]bool{}
	for i, rec := range st.Sessions {
		sess, err := s.prepareRecord(rec, seen)
		var div *divergence
		if errors.As(err, &div) {
			diverged[rec.RolloutID], err = div.reason, nil
		}
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("install sessions: record %d: %w", i, err)
		}
		todo = append(todo, prepared{rec: rec, sess: sess})
	}
	for id, f := range st.Fences {
		if id == "" || f < 0 {
			closeAll()
			return nil, fmt.Errorf("install sessions: bad fence %q=%d", id, f)
		}
	}
	if validated != nil {
		validated()
	}
	for _, p := range todo {
		sl := s.store.lockSlot(p.rec.RolloutID, true)
		s.settle(sl)
		sl.raise(max(p.rec.Attempt, st.Fences[p.rec.RolloutID]))
		if p.sess != nil {
			if old := s.store.install(sl, p.sess); old != nil {
				if err := old.Close(); err != nil {
					s.log.Warn("close replaced session", zap.String("rollout_id", p.rec.RolloutID), zap.Error(err))
				}
			}
		}
		sl.mu.Unlock()
		if installed != nil {
			installed()
		}
	}
	for id, f := range st.Fences {
		sl := s.store.lockSlot(id, true)
		s.settle(sl)
		if f > sl.installed() {
			// Only a fence that rises is a change: an installed retired
			// session keeps the clock it came with.
			sl.raise(f)
			s.store.touch(sl)
		}
		sl.mu.Unlock()
	}
	return diverged, nil
}

// prepareRecord validates one record and restores its environment session.
// It returns nil for a record that installs only a fence.
func (s *Server) prepareRecord(rec sessionRecord, seen map[string]bool) (*session, error) {
	if rec.RolloutID == "" {
		return nil, errors.New("rollout_id is empty")
	}
	if seen[rec.RolloutID] {
		return nil, fmt.Errorf("rollout %q appears twice", rec.RolloutID)
	}
	seen[rec.RolloutID] = true
	env, ok := s.envs[rec.Env]
	if !ok {
		return nil, fmt.Errorf("rollout %q: unknown env %q", rec.RolloutID, rec.Env)
	}
	if rec.Attempt < 0 || rec.Revision < 0 {
		return nil, fmt.Errorf("rollout %q: negative attempt %d or revision %d", rec.RolloutID, rec.Attempt, rec.Revision)
	}
	receipts := make(map[string]receipt, len(rec.Receipts))
	for id, r := range rec.Receipts {
		switch {
		case id == "":
			return nil, fmt.Errorf("rollout %q: receipt with empty request id", rec.RolloutID)
		case r.Kind != kindStart && r.Kind != kindOperate && r.Kind != kindVerify:
			return nil, fmt.Errorf("rollout %q: receipt %q has unknown kind %q", rec.RolloutID, id, r.Kind)
		case r.Digest == "" || !json.Valid(r.Response):
			return nil, fmt.Errorf("rollout %q: receipt %q has no digest or an invalid response", rec.RolloutID, id)
		}
		receipts[id] = r
	}
	sess := &session{Env: rec.Env, Attempt: rec.Attempt, Revision: rec.Revision, Retired: rec.Retired, Receipts: receipts}
	if rec.Retired {
		sess.idleSince = rec.IdleSince
		return sess, nil
	}
	if len(rec.State) == 0 {
		if s.modes[rec.Env] == envs.ModeReplay {
			return s.replaySession(rec, sess)
		}
		return nil, nil
	}
	live, err := env.Restore(rec.State)
	if err != nil {
		return nil, fmt.Errorf("rollout %q: restore env %s: %w", rec.RolloutID, rec.Env, err)
	}
	sess.live = live
	return sess, nil
}
