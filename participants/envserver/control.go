package envserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/internal/artifact"
	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/internal/httpserver"
	"github.com/turnstile-rl/turnstile/internal/location"
	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// DefaultServerName is the participant name of a server configured without
// one.
const DefaultServerName = "envserver"

// control is the checkpoint control plane of one server.
type control struct {
	token bearer
	name  string
	fence *phaseFence
	// storage opens object-store locations; nil: directories only.
	storage *storage.Opener
	// checkpoints bounds checkpoint reads and signs and checks manifests.
	checkpoints artifact.Settings
	// writeTimeout is the HTTP server's write timeout (0: none).
	writeTimeout time.Duration
}

func newControl(cfg ServerConfig) *control {
	c := &control{name: cfg.Name, fence: newPhaseFence(), token: newBearer(cfg.ControlToken), storage: cfg.Storage,
		checkpoints: cfg.Checkpoints, writeTimeout: cfg.WriteTimeout}
	if c.name == "" {
		c.name = DefaultServerName
	}
	return c
}

// authorize checks the bearer token of a control request.
func (c *control) authorize(r *http.Request) error {
	if !c.token.set {
		return refuse(protocol.CodeControlDisabled,
			"the checkpoint control plane is off: no control token is configured (--control-token or $%s)", protocol.ControlTokenEnvVar)
	}
	if !c.token.matches(r) {
		return refuse(protocol.CodeUnauthorized, "missing or wrong bearer token for the control plane")
	}
	return nil
}

// installControl registers the control routes.
func (s *Server) installControl() {
	s.ctl.fence.mu.Lock()
	s.ctl.fence.lease.expire = s.expireLease
	s.ctl.fence.mu.Unlock()
	s.handle(protocol.RouteControlCapabilities, s.controlRoute(s.handleCapabilities))
	s.handle(protocol.RouteControlStatus, s.controlRoute(s.handleStatus))
	s.handle(protocol.RouteControlPrepare, s.controlRoute(s.handlePrepare))
	s.handle(protocol.RouteControlCommit, s.controlRoute(s.handleCommit))
	s.handle(protocol.RouteControlRestore, s.controlRoute(s.handleRestore))
	s.handle(protocol.RouteControlResume, s.controlRoute(s.handleResume))
	s.handle(protocol.RouteControlRetire, s.controlRoute(s.handleRetire))
	s.handle(protocol.RouteControlAuthorise, s.controlRoute(s.handleAuthorise))
	s.mux.HandleFunc(protocol.ControlPrefix, s.controlRoute(func(r *http.Request, _ []byte) (any, error) {
		return nil, refuse(protocol.CodeNotFound, "no control route %s %s", r.Method, r.URL.Path)
	}))
}

// controlRoute wraps a control handler: authorization, body, JSON answer.
// Control answers do not count in the data plane's Stats.
func (s *Server) controlRoute(h func(r *http.Request, body []byte) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if aerr := s.ctl.authorize(r); aerr != nil {
			if isRefusal(aerr, protocol.CodeUnauthorized) {
				w.Header().Set("WWW-Authenticate", realmControl)
			}
			s.writeControlError(w, r, aerr)
			return
		}
		body, aerr := readBody(w, r)
		if aerr != nil {
			s.writeControlError(w, r, aerr)
			return
		}
		s.ctl.extendWrite(w, body)
		out, aerr := h(r, body)
		if aerr != nil {
			s.writeControlError(w, r, aerr)
			return
		}
		b, err := json.Marshal(out)
		if err != nil {
			s.writeControlError(w, r, refuse(protocol.CodeInternal, "encode answer: %v", err))
			return
		}
		writeJSON(w, http.StatusOK, b)
	}
}

// extendWrite moves the write deadline of a control request that names an
// absolute deadline (prepare, restore) to that deadline plus the server's
// write timeout: such a request may legitimately wait until then.
func (c *control) extendWrite(w http.ResponseWriter, body []byte) {
	if c.writeTimeout <= 0 {
		return
	}
	var d struct {
		Deadline *time.Time `json:"deadline"`
	}
	if json.Unmarshal(body, &d) != nil || d.Deadline == nil || time.Until(*d.Deadline) <= 0 {
		return
	}
	httpserver.ExtendWrite(w, d.Deadline.Add(c.writeTimeout))
}

// writeControlError answers a control request with err. Control answers do
// not count in Stats; the failures an operator must look at are logged.
func (s *Server) writeControlError(w http.ResponseWriter, r *http.Request, err error) {
	status, detail := httpError(err)
	if status >= 500 || detail.Code == protocol.CodePrepareTimeout || detail.Code == protocol.CodeInvalidCheckpoint {
		s.log.Warn("control request failed", zap.String("route", r.Method+" "+r.URL.Path),
			zap.String("code", detail.Code), zap.String("message", detail.Message))
	}
	writeErrorBody(w, status, detail)
}

func (s *Server) envCapabilities() []protocol.EnvCapability {
	out := make([]protocol.EnvCapability, 0, len(s.specs))
	for _, sp := range s.specs {
		out = append(out, protocol.EnvCapability{Name: sp.Name, Mode: s.modeOf(sp.Name), Style: sp.Style})
	}
	return out
}

func (s *Server) modeOf(env string) envs.Mode {
	if m, ok := s.modes[env]; ok {
		return m
	}
	return envs.ModeRestartOnly
}

func (s *Server) handleCapabilities(_ *http.Request, _ []byte) (any, error) {
	v := s.ctl.fence.snapshot()
	return protocol.Capabilities{
		Component:     protocol.ComponentEnvironmentServer,
		Name:          s.ctl.name,
		SchemaVersion: protocol.ControlSchemaVersion,
		Envs:          s.envCapabilities(),
		Features:      protocol.Features(),
		Phase:         v.phase,
		CheckpointID:  v.checkpoint,
		RestoreID:     v.restoreID,
	}, nil
}

func (s *Server) handleStatus(_ *http.Request, _ []byte) (any, error) {
	v := s.ctl.fence.snapshot()
	_, inflight := s.gate.drained()
	st := protocol.ControlStatus{
		Phase: v.phase, CheckpointID: v.checkpoint, RestoreID: v.restoreID, Admission: protocol.AdmissionOpen,
		Sessions: s.store.live(), CutSessions: v.cut, InFlight: inflight,
	}
	if s.admissionClosed() {
		st.Admission = protocol.AdmissionClosed
	}
	return st, nil
}

// --- prepare ---

func (s *Server) handlePrepare(r *http.Request, body []byte) (any, error) {
	var req protocol.PrepareRequest
	if aerr := decodeRequest(body, &req, "checkpoint_id", "deadline"); aerr != nil {
		return nil, aerr
	}
	if req.Deadline.IsZero() {
		return nil, refuse(protocol.CodeMalformed, "deadline is the zero time")
	}
	if req.LeaseMillis < 0 || req.LeaseMillis > protocol.MaxLeaseMillis {
		return nil, refuse(protocol.CodeMalformed, "lease_ms %d is outside 0..%d", req.LeaseMillis, protocol.MaxLeaseMillis)
	}
	run, replay, aerr := s.ctl.fence.begin(r.Context(), opSpec{
		op: opPrepare, id: req.CheckpointID, checkpoint: req.CheckpointID, allowed: []protocol.Phase{protocol.PhaseIdle}, during: protocol.PhasePreparing,
		lease: req.Lease(),
	})
	if aerr != nil || replay != nil {
		return replay, aerr
	}
	wasClosed := s.admissionClosed()
	s.closeAdmission()
	failed := func(aerr error) (any, error) {
		if !wasClosed {
			s.openAdmission()
		}
		s.ctl.fence.fail(run)
		return nil, aerr
	}

	ctx, cancel := context.WithDeadline(run.ctx, req.Deadline)
	defer cancel()
	stragglers, err := s.waitDrained(ctx)
	if err != nil {
		if !errors.Is(err, context.DeadlineExceeded) {
			return failed(refuse(protocol.CodePrepareAborted,
				"prepare of checkpoint %q aborted before the cut was frozen: %v", req.CheckpointID, err))
		}
		return failed(refuse(protocol.CodePrepareTimeout,
			"prepare of checkpoint %q: mutations still running at the deadline %s: %s; retire them (%s) or retry; admission is open again",
			req.CheckpointID, req.Deadline.Format("2006-01-02T15:04:05.000Z07:00"), describeStragglers(stragglers), protocol.RouteControlRetire))
	}
	st, err := s.exportState()
	if err != nil {
		return failed(refuse(protocol.CodeInternal, "prepare of checkpoint %q: %v", req.CheckpointID, err))
	}
	return s.ctl.fence.freeze(run, st, s.summaries(st.Sessions)), nil
}

// describeStragglers names the rollouts whose mutations did not finish; a
// prepare does not wait for those of retired attempts.
func describeStragglers(list []protocol.InFlight) string {
	return describeInFlight(slices.DeleteFunc(slices.Clone(list), func(f protocol.InFlight) bool { return f.Retired }))
}

func (s *Server) summaries(recs []sessionRecord) []protocol.SessionSummary {
	out := make([]protocol.SessionSummary, 0, len(recs))
	for _, r := range recs {
		out = append(out, protocol.SessionSummary{RolloutID: r.RolloutID, Attempt: r.Attempt, Revision: r.Revision,
			Env: r.Env, Mode: s.modeOf(r.Env), Retired: r.Retired})
	}
	return out
}

// freeze ends a successful prepare: the cut (with the retirements made
// while it was taken) becomes the frozen export.
func (f *phaseFence) freeze(run *opRun, st serverState, members []protocol.SessionSummary) protocol.PrepareResponse {
	f.mu.Lock()
	defer f.mu.Unlock()
	ids := make([]string, 0, len(f.cutRetires))
	for id := range f.cutRetires {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		st, members = retireFromCut(st, members, id, f.cutRetires[id])
	}
	// One critical section from the cut to the prepared phase, so a retire
	// sees either the cut being taken or the frozen one.
	f.frozen = &st
	ans := protocol.PrepareResponse{Phase: protocol.PhasePrepared, CheckpointID: run.spec.id, Sessions: members}
	f.phase = protocol.PhasePrepared
	f.results[opPrepare] = recorded{key: run.spec.key, answer: ans}
	f.endLocked(run)
	return ans
}

// retireFromCut removes the sessions of attempts below floor from a cut and
// raises the rollout's fence.
func retireFromCut(st serverState, members []protocol.SessionSummary, id string, floor int) (serverState, []protocol.SessionSummary) {
	st.Sessions = deleteFunc(st.Sessions, func(r sessionRecord) bool { return r.RolloutID == id && r.Attempt < floor })
	members = deleteFunc(members, func(m protocol.SessionSummary) bool { return m.RolloutID == id && m.Attempt < floor })
	if st.Fences == nil {
		st.Fences = map[string]int{}
	}
	st.Fences[id] = max(st.Fences[id], floor)
	return st, members
}

// deleteFunc is slices.DeleteFunc on a copy, so recorded answers already
// handed out are never modified.
func deleteFunc[T any](in []T, del func(T) bool) []T {
	out := make([]T, 0, len(in))
	for _, v := range in {
		if !del(v) {
			out = append(out, v)
		}
	}
	return out
}

// --- retire ---

func (s *Server) handleRetire(_ *http.Request, body []byte) (any, error) {
	var req protocol.RetireRequest
	if aerr := decodeRequest(body, &req, "rollout_id", "attempt"); aerr != nil {
		return nil, aerr
	}
	if req.RolloutID == "" || req.Attempt < 0 {
		return nil, refuse(protocol.CodeMalformed, "retire needs a rollout_id and an attempt ≥ 0")
	}
	f := s.ctl.fence
	f.mu.Lock()
	defer f.mu.Unlock()
	return s.raiseFenceLocked("retire", req.RolloutID, req.Attempt+1)
}

// raiseFenceLocked retires every attempt of rollout id below floor (the
// fence rises to floor, older sessions are dropped) for a retire or an
// authorise, and takes the retirement out of a cut being taken or frozen.
// Callers hold the phase fence's lock.
func (s *Server) raiseFenceLocked(op, id string, floor int) (protocol.RetireResponse, error) {
	f := s.ctl.fence
	switch f.phase {
	case protocol.PhaseIdle, protocol.PhasePreparing, protocol.PhasePrepared:
	default:
		// A committed cut is on disk: retiring now would make the server
		// and the checkpoint disagree about the execution.
		return protocol.RetireResponse{}, refuse(protocol.CodeInvalidPhase,
			"%s of rollout %q is not allowed in phase %s (allowed: idle, preparing, prepared)", op, id, f.phase)
	}
	ans := s.retireExecution(id, floor)
	switch f.phase {
	case protocol.PhasePreparing:
		if f.cutRetires == nil {
			f.cutRetires = map[string]int{}
		}
		f.cutRetires[id] = max(f.cutRetires[id], floor)
	case protocol.PhasePrepared:
		prep := f.results[opPrepare]
		pr := prep.answer.(protocol.PrepareResponse)
		*f.frozen, pr.Sessions = retireFromCut(*f.frozen, pr.Sessions, id, floor)
		prep.answer = pr
		f.results[opPrepare] = prep
	}
	return ans, nil
}

// --- authorise ---

// handleAuthorise installs an attempt for a fresh start (RULES.md R8): the
// only way besides a restore and a retire that a rollout's fence rises.
// Authorising the installed attempt changes nothing, in any phase.
func (s *Server) handleAuthorise(r *http.Request, body []byte) (any, error) {
	id := r.PathValue("rollout_id")
	var req protocol.AuthoriseRequest
	if aerr := decodeRequest(body, &req, "attempt"); aerr != nil {
		return nil, aerr
	}
	if id == "" || req.Attempt < 0 {
		return nil, refuse(protocol.CodeMalformed, "authorise needs a rollout id in the path and an attempt ≥ 0")
	}
	f := s.ctl.fence
	f.mu.Lock()
	defer f.mu.Unlock()
	cur, seen := s.currentFence(id)
	switch {
	case seen && req.Attempt < cur:
		return nil, refuse(protocol.CodeStaleAttempt,
			"authorise of rollout %q: attempt %d is below attempt %d already installed", id, req.Attempt, cur)
	case req.Attempt == cur:
		return protocol.AuthoriseResponse{RolloutID: id, Attempt: req.Attempt, Fence: cur}, nil
	}
	ret, aerr := s.raiseFenceLocked("authorise", id, req.Attempt)
	if aerr != nil {
		return nil, aerr
	}
	s.log.Info("authorised attempt", zap.String("rollout_id", id), zap.Int("attempt", req.Attempt))
	return protocol.AuthoriseResponse{RolloutID: id, Attempt: req.Attempt, Fence: ret.Fence, Changed: true,
		Dropped: ret.Discarded, Pending: ret.Pending}, nil
}

// retireExecution fences every attempt below floor out of rollout id and
// drops its session. It never waits for the rollout's lock: a mutation that
// may never return can hold it. Then the retirement stays pending, and the
// mutation's result is discarded when it returns.
func (s *Server) retireExecution(id string, floor int) protocol.RetireResponse {
	s.gate.raiseFloor(id, floor)
	sl := s.store.slotFor(id)
	for {
		if !sl.mu.TryLock() {
			return protocol.RetireResponse{RolloutID: id, Fence: floor, Pending: true}
		}
		if !sl.gone {
			break
		}
		sl.mu.Unlock()
		sl = s.store.slotFor(id) // forgotten meanwhile: the floor applies to a new slot
	}
	defer sl.mu.Unlock()
	sess, evicted := s.store.peek(sl)
	discarded := (sess != nil && sess.Attempt < floor) || (evicted != nil && evicted.Attempt < floor)
	s.settle(sl)
	s.log.Info("retired execution", zap.String("rollout_id", id), zap.Int("below_attempt", floor), zap.Bool("discarded", discarded))
	return protocol.RetireResponse{RolloutID: id, Fence: sl.installed(), Discarded: discarded}
}

// --- commit ---

// cleanLocation checks a commit or restore location, an absolute path or
// a storage URL, and returns its canonical form.
func cleanLocation(loc string) (string, error) {
	if loc == "" {
		return "", refuse(protocol.CodeMalformed, "missing field location")
	}
	if !location.IsURL(loc) {
		if !filepath.IsAbs(loc) {
			return "", refuse(protocol.CodeMalformed, "location %q is not an absolute path", loc)
		}
		return filepath.Clean(loc), nil
	}
	l, err := location.Parse(loc)
	if err != nil {
		return "", refuse(protocol.CodeMalformed, "location: %v", err)
	}
	return l.String(), nil
}

// openLocation opens a cleaned location: a directory, or an object store
// through the server's opener (none configured: refused).
func (s *Server) openLocation(ctx context.Context, loc string) (storage.Store, error) {
	st, err := s.ctl.storage.Open(ctx, loc)
	if err != nil {
		return nil, refuse(protocol.CodeMalformed, "location %s: %v", loc, err)
	}
	return st, nil
}

func (s *Server) handleCommit(r *http.Request, body []byte) (any, error) {
	var req protocol.CommitRequest
	if aerr := decodeRequest(body, &req, "checkpoint_id", "location"); aerr != nil {
		return nil, aerr
	}
	loc, aerr := cleanLocation(req.Location)
	if aerr != nil {
		return nil, aerr
	}
	run, replay, aerr := s.ctl.fence.begin(r.Context(), opSpec{
		op: opCommit, id: req.CheckpointID, checkpoint: req.CheckpointID, key: "location " + loc,
		allowed: []protocol.Phase{protocol.PhasePrepared}, during: protocol.PhaseCommitting,
	})
	if aerr != nil {
		return nil, aerr
	}
	if replay != nil {
		// A retried commit validates what is on disk before it answers.
		ans := replay.(protocol.CommitResponse)
		st, aerr := s.openLocation(r.Context(), loc)
		if aerr != nil {
			return nil, aerr
		}
		cp, err := artifact.OpenStoreWith(r.Context(), st, req.CheckpointID, s.ctl.checkpoints)
		if err != nil {
			return nil, refuse(protocol.CodeInvalidCheckpoint, "committed checkpoint no longer validates: %v", err)
		}
		if d := cp.Manifest().Digest; d != ans.ManifestDigest {
			return nil, refuse(protocol.CodeInvalidCheckpoint,
				"checkpoint at %s has manifest digest %s, the commit wrote %s", loc, d, ans.ManifestDigest)
		}
		return ans, nil
	}
	s.ctl.fence.mu.Lock()
	frozen := s.ctl.fence.frozen
	s.ctl.fence.mu.Unlock()
	if frozen == nil {
		s.ctl.fence.fail(run)
		return nil, refuse(protocol.CodeInternal, "commit of checkpoint %q: no frozen cut", req.CheckpointID)
	}
	sections, err := s.checkpointSections(*frozen)
	if err != nil {
		s.ctl.fence.fail(run)
		return nil, refuse(protocol.CodeInternal, "commit of checkpoint %q: %v", req.CheckpointID, err)
	}
	st, aerr := s.openLocation(run.ctx, loc)
	if aerr != nil {
		s.ctl.fence.fail(run)
		return nil, aerr
	}
	m, err := artifact.WriteTo(run.ctx, st, artifact.Meta{
		CheckpointID: req.CheckpointID,
		Labels:       map[string]string{"component": protocol.ComponentEnvironmentServer, "name": s.ctl.name},
	}, sections, artifact.Options{BetweenFiles: func() { s.fp.Hit(failpoint.CheckpointBetweenFiles) }, Key: s.ctl.checkpoints.Key})
	if err != nil {
		s.ctl.fence.fail(run)
		if errors.Is(err, artifact.ErrConflict) || errors.Is(err, artifact.ErrInvalid) {
			return nil, refuse(protocol.CodeLocationConflict, "commit of checkpoint %q: %v", req.CheckpointID, err)
		}
		return nil, refuse(protocol.CodeInternal, "commit of checkpoint %q: %v", req.CheckpointID, err)
	}
	size, err := artifact.SizeIn(run.ctx, st, m)
	if err != nil {
		s.ctl.fence.fail(run)
		return nil, refuse(protocol.CodeInternal, "commit of checkpoint %q: %v", req.CheckpointID, err)
	}
	ans := protocol.CommitResponse{Phase: protocol.PhaseCommitted, CheckpointID: req.CheckpointID, Location: loc,
		ManifestDigest: m.Digest, Sessions: len(frozen.Sessions), Records: m.Records, Bytes: size}
	s.ctl.fence.succeed(run, protocol.PhaseCommitted, ans)
	return ans, nil
}

// checkpointSections lays a cut out as artifact sections.
func (s *Server) checkpointSections(st serverState) ([]artifact.Section, error) {
	server, err := json.Marshal(checkpointServerRecord{Schema: protocol.ControlSchemaVersion, Component: protocol.ComponentEnvironmentServer,
		Name: s.ctl.name, Envs: s.envCapabilities()})
	if err != nil {
		return nil, fmt.Errorf("encode server record: %w", err)
	}
	sessions := artifact.Section{Name: protocol.SectionSessions, Records: []artifact.Record{}}
	receipts := artifact.Section{Name: protocol.SectionReceipts, Records: []artifact.Record{}}
	fences := artifact.Section{Name: protocol.SectionFences, Records: []artifact.Record{}}
	for _, rec := range st.Sessions {
		b, err := json.Marshal(checkpointSession{RolloutID: rec.RolloutID, Env: rec.Env, Attempt: rec.Attempt,
			Revision: rec.Revision, Retired: rec.Retired, State: rec.State, IdleSince: rec.IdleSince})
		if err != nil {
			return nil, fmt.Errorf("encode session %q: %w", rec.RolloutID, err)
		}
		sessions.Records = append(sessions.Records, artifact.Record{Key: rec.RolloutID, Data: b})
		for reqID, rc := range rec.Receipts {
			key, err := receiptKey(rec.RolloutID, reqID)
			if err != nil {
				return nil, err
			}
			b, err := json.Marshal(checkpointReceipt{RolloutID: rec.RolloutID, RequestID: reqID, receipt: rc})
			if err != nil {
				return nil, fmt.Errorf("encode receipt %s: %w", key, err)
			}
			receipts.Records = append(receipts.Records, artifact.Record{Key: key, Data: b})
		}
	}
	for id, f := range st.Fences {
		b, err := json.Marshal(checkpointFence{RolloutID: id, Fence: f})
		if err != nil {
			return nil, fmt.Errorf("encode fence %q: %w", id, err)
		}
		fences.Records = append(fences.Records, artifact.Record{Key: id, Data: b})
	}
	return []artifact.Section{
		{Name: protocol.SectionServer, Records: []artifact.Record{{Key: protocol.ServerRecordKey, Data: server}}},
		sessions, receipts, fences,
	}, nil
}

// receiptKey is the record key of a receipt: unambiguous whatever the ids
// hold.
func receiptKey(rolloutID, requestID string) (string, error) {
	b, err := json.Marshal([]string{rolloutID, requestID})
	if err != nil {
		return "", fmt.Errorf("receipt key of %q/%q: %w", rolloutID, requestID, err)
	}
	return string(b), nil
}

// --- restore ---

func (s *Server) handleRestore(r *http.Request, body []byte) (any, error) {
	var req protocol.RestoreRequest
	if aerr := decodeRequest(body, &req, "checkpoint_id", "location", "attempts"); aerr != nil {
		return nil, aerr
	}
	loc, aerr := cleanLocation(req.Location)
	if aerr != nil {
		return nil, aerr
	}
	if req.CheckpointID == "" {
		return nil, refuse(protocol.CodeMalformed, "missing field checkpoint_id")
	}
	if req.RestoreID == "" {
		req.RestoreID = req.CheckpointID
	}
	if len(req.Attempts) == 0 {
		// Only the rollouts named are touched: an empty map would restore
		// nothing and still retire the restore id.
		return nil, refuse(protocol.CodeMalformed, "attempts names no rollout: a restore touches only the rollouts it names")
	}
	for id, a := range req.Attempts {
		if id == "" || a < 0 {
			return nil, refuse(protocol.CodeMalformed, "attempts: bad entry %q: %d", id, a)
		}
	}
	attemptsJSON, _ := json.Marshal(req.Attempts) // sorted keys: a canonical key
	run, replay, aerr := s.ctl.fence.begin(r.Context(), opSpec{
		op: opRestore, id: req.RestoreID, checkpoint: req.CheckpointID,
		key: "checkpoint " + req.CheckpointID + " location " + loc + " attempts " + string(attemptsJSON),
		// committed: a checkpoint left paused (stay-paused), taken over.
		allowed: []protocol.Phase{protocol.PhaseIdle, protocol.PhaseCommitted}, during: protocol.PhaseRestoring,
	})
	if aerr != nil || replay != nil {
		return replay, aerr
	}
	wasClosed := s.admissionClosed()
	s.closeAdmission()
	ans, aerr := s.restore(run.ctx, req, loc)
	if aerr != nil {
		if !wasClosed {
			s.openAdmission()
		}
		s.ctl.fence.fail(run)
		return nil, aerr
	}
	// Admission stays closed: the coordinator resumes once every participant
	// is installed.
	s.ctl.fence.succeed(run, protocol.PhaseRestored, ans)
	return ans, nil
}

func (s *Server) restore(ctx context.Context, req protocol.RestoreRequest, loc string) (protocol.RestoreResponse, error) {
	if req.Deadline != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, *req.Deadline)
		defer cancel()
	}
	// Installing takes every rollout's lock, so it needs every mutation to
	// have ended, retired ones included.
	if err := s.waitIdle(ctx); err != nil {
		_, list := s.gate.drained()
		return protocol.RestoreResponse{}, refuse(protocol.CodePrepareTimeout,
			"restore of checkpoint %q: mutations still running: %s: %v", req.CheckpointID, describeInFlight(list), err)
	}
	where, aerr := s.openLocation(ctx, loc)
	if aerr != nil {
		return protocol.RestoreResponse{}, aerr
	}
	cp, err := artifact.OpenStoreWith(ctx, where, req.CheckpointID, s.ctl.checkpoints)
	if errors.Is(err, storage.ErrUnavailable) {
		return protocol.RestoreResponse{}, refuse(protocol.CodeInternal, "restore of checkpoint %q: %v", req.CheckpointID, err)
	}
	if err != nil {
		return protocol.RestoreResponse{}, refuse(protocol.CodeInvalidCheckpoint, "restore of checkpoint %q: %v", req.CheckpointID, err)
	}
	st, ans, aerr := s.loadCheckpoint(ctx, cp, req.Attempts)
	if aerr != nil {
		return protocol.RestoreResponse{}, aerr
	}
	diverged, err := s.installStateThen(st, func() { s.fp.Hit(failpoint.RestoreAfterValidate) }, func() { s.fp.Hit(failpoint.EnvRestoreMidInstall) })
	if err != nil {
		return protocol.RestoreResponse{}, refuse(protocol.CodeInvalidCheckpoint,
			"restore of checkpoint %q: nothing installed: %v", req.CheckpointID, err)
	}
	ans = divertDiverged(ans, diverged)
	// Rollouts that start over or are only fenced hold no session in the
	// restored world: a live server drops what they hold now (a session of
	// the old attempt, or one started after the cut).
	for _, sum := range ans.Restarted {
		s.dropBelow(sum.RolloutID, sum.Attempt)
	}
	for i, f := range ans.Fenced {
		ans.Fenced[i].Dropped = s.dropBelow(f.RolloutID, f.Attempt)
	}
	ans.Phase = protocol.PhaseRestored
	ans.CheckpointID = req.CheckpointID
	ans.RestoreID = req.RestoreID
	ans.ManifestDigest = cp.Manifest().Digest
	s.log.Info("restored checkpoint", zap.String("checkpoint_id", req.CheckpointID), zap.String("restore_id", req.RestoreID),
		zap.Int("restored", len(ans.Restored)), zap.Int("restarted", len(ans.Restarted)), zap.Int("replay_diverged", len(diverged)),
		zap.Int("fenced", len(ans.Fenced)), zap.Int("untouched", len(ans.Untouched)))
	return ans, nil
}

func describeInFlight(list []protocol.InFlight) string {
	names := make([]string, 0, len(list))
	for _, f := range list {
		names = append(names, fmt.Sprintf("%s (attempt %d)", f.RolloutID, f.Attempt))
	}
	if len(names) == 0 {
		return "requests whose identity is not read yet"
	}
	return strings.Join(names, ", ")
}

// invalidCheckpoint refuses a restore, naming what is wrong with the
// checkpoint.
func invalidCheckpoint(id, format string, args ...any) error {
	return refuse(protocol.CodeInvalidCheckpoint, "restore of checkpoint %q: %s", id, fmt.Sprintf(format, args...))
}

// knows says whether this server has seen rollout id (it has a slot or a
// pending retirement for it). It changes nothing.
func (s *Server) knows(id string) bool {
	if s.store.lookup(id) != nil {
		return true
	}
	_, pending := s.gate.floor(id)
	return pending
}

// dropBelow raises the fence of rollout id to floor and drops any session
// of an older attempt (live, verified or evicted), as a restore leaves a
// rollout that starts over or was only fenced. It says whether a session
// was dropped. Call it with admission closed and waitIdle done.
func (s *Server) dropBelow(id string, floor int) bool {
	sl := s.store.lockSlot(id, true)
	s.settle(sl)
	sl.raise(floor)
	sess, evicted := s.store.peek(sl)
	dropped := (sess != nil && sess.Attempt < floor) || (evicted != nil && evicted.Attempt < floor)
	old := s.store.drop(sl, floor)
	sl.mu.Unlock()
	if old != nil {
		if err := old.Close(); err != nil {
			s.log.Warn("close dropped session", zap.String("rollout_id", id), zap.Error(err))
		}
	}
	return dropped
}

// currentFence is the highest attempt this server has installed for id,
// pending retirements included. It changes nothing and never waits for the
// rollout's lock.
func (s *Server) currentFence(id string) (int, bool) {
	sl := s.store.lookup(id)
	if sl == nil {
		return 0, false
	}
	f := sl.installed()
	if p, ok := s.gate.floor(id); ok {
		f = max(f, p)
	}
	return f, true
}

// decodeStrictJSON decodes exactly one JSON value with no unknown fields.
func decodeStrictJSON(b []byte, v any) error {
	if err := decodeRequest(b, v); err != nil {
		// The caller names the record; the refusal's code would be noise.
		var r *Refusal
		if errors.As(err, &r) {
			return errors.New(r.Msg)
		}
		return err
	}
	return nil
}

// --- resume ---

func (s *Server) handleResume(r *http.Request, body []byte) (any, error) {
	var req protocol.ResumeRequest
	if aerr := decodeRequest(body, &req, "checkpoint_id"); aerr != nil {
		return nil, aerr
	}
	spec := opSpec{op: opResume, id: req.CheckpointID}
	if req.RestoreID != "" {
		// A restore's resume names its session and the checkpoint it
		// restores, which must agree.
		spec.id, spec.checkpoint = req.RestoreID, req.CheckpointID
	}
	run, replay, aerr := s.ctl.fence.begin(r.Context(), spec)
	if aerr != nil || replay != nil {
		return replay, aerr
	}
	s.openAdmission()
	ans := protocol.ResumeResponse{Phase: protocol.PhaseIdle, CheckpointID: req.CheckpointID, RestoreID: req.RestoreID}
	s.ctl.fence.succeed(run, protocol.PhaseIdle, ans)
	s.log.Info("resumed", zap.String("checkpoint_id", req.CheckpointID), zap.String("restore_id", req.RestoreID))
	return ans, nil
}
