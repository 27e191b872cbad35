package envserver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/internal/artifact"
	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// maxRequestBytes bounds a request body; tasks and tool arguments are small.
const maxRequestBytes = 16 << 20

// ServerConfig configures an environment server.
type ServerConfig struct {
	// Envs are the environments the server hosts, by Spec().Name.
	Envs []envs.Environment
	// Failpoints arms crash points; nil arms nothing.
	Failpoints *failpoint.Set
	// Logger receives the server's logs; nil discards them.
	Logger *zap.Logger
	// RetiredSessions bounds how many retired sessions keep their receipts;
	// 0 means DefaultRetiredSessions.
	RetiredSessions int
	// RetiredGrace is how long a retired session keeps its receipts after
	// its last use; 0 means DefaultRetiredGrace, negative no time limit.
	// Past either bound only the session's info is kept: a request its
	// receipts would have answered is refused with session_retired, never
	// applied again.
	RetiredGrace time.Duration
	// ForgetAfter is how long a finished rollout whose receipts were dropped
	// (past RetiredGrace or RetiredSessions) is remembered after its last
	// change (its retirement, or a fence raised): then its session info,
	// its slot and its fence are forgotten, and a checkpoint no longer
	// exports them. A request of a forgotten rollout is answered as for one
	// never seen. 0 means DefaultForgetAfter, negative never forget.
	ForgetAfter time.Duration
	// Now is the clock RetiredGrace and ForgetAfter are measured on; nil
	// means time.Now.
	Now func() time.Time
	// Name is the participant's name in its capabilities and checkpoints;
	// empty means DefaultServerName.
	Name string
	// ControlToken is the bearer token of the checkpoint control plane;
	// empty turns the control plane off.
	ControlToken string
	// DataToken is the bearer token of the data plane (every route but
	// /healthz and the control plane). It must differ from ControlToken.
	// NewServer refuses an empty one unless InsecureNoDataAuth is set.
	DataToken string
	// InsecureNoDataAuth leaves the data plane unauthenticated, on purpose
	// (local development, tests of the data plane alone).
	InsecureNoDataAuth bool
	// Storage opens checkpoint locations that are object-store URLs
	// (s3://…), with this process's credentials; nil accepts local
	// directories only.
	Storage *storage.Opener
	// RestartOnly names environments served as restart_only whatever mode
	// they declare: their sessions are cut without state or a replay log,
	// and a restore starts their rollouts over (an operator's way to turn
	// replay off, or export, for one environment).
	RestartOnly []string
	// Checkpoints bounds what a restore reads of a checkpoint before it
	// trusts it, and carries the key checkpoints are signed and checked
	// with (artifact.SettingsFromLookup reads them from the environment);
	// the zero value means the default bounds and no key.
	Checkpoints artifact.Settings
	// WriteTimeout is the HTTP server's write timeout (0: none). A control
	// request that may wait until an absolute deadline (prepare, restore)
	// gets its write deadline moved to that deadline plus WriteTimeout, so
	// its answer is not cut off by a timeout meant for quick answers.
	WriteTimeout time.Duration
}

// Server is the environment server's data plane: it hosts sessions of the
// configured environments, applies each mutation at most once per request id,
// and fences out attempts older than the newest it has accepted.
type Server struct {
	envs  map[string]envs.Environment
	specs []envs.Spec // ordered by name, with the mode the server serves
	// modes is the effective mode the server serves each environment in.
	modes map[string]envs.Mode
	fp    *failpoint.Set
	log   *zap.Logger
	mux   *http.ServeMux
	store *sessionStore
	gate  admission
	ctl   *control
	// dataToken guards the data plane unless dataOpen.
	dataToken bearer
	dataOpen  bool
	// routes are the patterns registered on mux, in order (the drift test
	// compares them with docs/protocol/openapi.json).
	routes []string

	applied, replayed, refused, parked atomic.Int64
	// reapplied counts the mutations a restore re-applied to rebuild a
	// replay session (never counted as applied).
	reapplied atomic.Int64
}

// NewServer builds a server for cfg's environments.
func NewServer(cfg ServerConfig) (*Server, error) {
	if err := checkTokens(cfg); err != nil {
		return nil, fmt.Errorf("new env server: %w", err)
	}
	s := &Server{
		envs:      map[string]envs.Environment{},
		modes:     map[string]envs.Mode{},
		fp:        cfg.Failpoints,
		log:       cfg.Logger,
		mux:       http.NewServeMux(),
		store:     newSessionStore(cfg.RetiredSessions, cfg.RetiredGrace, cfg.ForgetAfter, cfg.Now),
		dataToken: newBearer(cfg.DataToken),
		dataOpen:  cfg.InsecureNoDataAuth,
	}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	s.store.pending = func(id string) bool {
		_, ok := s.gate.floor(id)
		return ok
	}
	for i, env := range cfg.Envs {
		if env == nil {
			return nil, fmt.Errorf("new env server: environment %d is nil", i)
		}
		spec := env.Spec()
		if spec.Name == "" {
			return nil, fmt.Errorf("new env server: environment %d has no name", i)
		}
		if _, dup := s.envs[spec.Name]; dup {
			return nil, fmt.Errorf("new env server: environment %q configured twice", spec.Name)
		}
		s.envs[spec.Name] = env
		s.modes[spec.Name] = envs.EffectiveMode(spec.Mode)
	}
	for _, name := range cfg.RestartOnly {
		if _, ok := s.envs[name]; !ok {
			return nil, fmt.Errorf("new env server: restart-only environment %q is not hosted", name)
		}
		s.modes[name] = envs.ModeRestartOnly
	}
	for name := range s.envs {
		s.specs = append(s.specs, s.specOf(name))
	}
	sort.Slice(s.specs, func(i, j int) bool { return s.specs[i].Name < s.specs[j].Name })
	s.ctl = newControl(cfg)
	s.installControl()

	s.handle(protocol.RouteHealth, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, []byte(`{"ok":true}`))
	})
	s.handle(protocol.RouteEnvs, func(w http.ResponseWriter, _ *http.Request) { s.writeValue(w, s.specs) })
	s.handle(protocol.RouteStats, func(w http.ResponseWriter, _ *http.Request) { s.writeValue(w, s.Stats()) })
	s.handle(protocol.RouteSessions, s.handleSession)
	s.handle(protocol.RouteStart, s.mutation(kindStart))
	s.handle(protocol.RouteOperate, s.mutation(kindOperate))
	s.handle(protocol.RouteVerify, s.mutation(kindVerify))
	// A request no route takes is answered 404 not_found and, having
	// passed authentication, counted under refused like every other 4xx
	// (R21); an unauthenticated one was answered 401 before it got here
	// and changes nothing (R1).
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, refuse(protocol.CodeNotFound, "no route %s %s", r.Method, r.URL.EscapedPath()))
	})
	return s, nil
}

// specOf is the spec of hosted environment name, with the mode the server
// serves it in.
func (s *Server) specOf(name string) envs.Spec {
	sp := s.envs[name].Spec()
	if m := s.modes[name]; m != envs.EffectiveMode(sp.Mode) {
		sp.Mode = m
	}
	return sp
}

// handle registers a route and remembers its pattern.
func (s *Server) handle(pattern string, h http.HandlerFunc) {
	s.routes = append(s.routes, pattern)
	s.mux.HandleFunc(pattern, h)
}

// Routes returns the patterns the server registered ("METHOD /path", the
// protocol package's Route* spelling), in registration order.
func (s *Server) Routes() []string { return slices.Clone(s.routes) }

// ServeHTTP authenticates a data-plane request, then routes it; the control
// plane checks its own token (controlRoute).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.authorizeData(w, r) {
		return
	}
	s.mux.ServeHTTP(w, r)
}

// Stats returns the server's counters.
func (s *Server) Stats() protocol.Stats {
	return protocol.Stats{
		Applied:   s.applied.Load(),
		Replayed:  s.replayed.Load(),
		Refused:   s.refused.Load(),
		Parked:    s.parked.Load(),
		Reapplied: s.reapplied.Load(),
		Sessions:  s.store.live(),
	}
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func (s *Server) writeValue(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		s.writeError(w, refuse(protocol.CodeInternal, "encode answer: %v", err))
		return
	}
	writeJSON(w, http.StatusOK, b)
}

// writeError answers a data-plane request with err, counting it as parked
// or refused in Stats.
func (s *Server) writeError(w http.ResponseWriter, err error) {
	status, detail := httpError(err)
	switch {
	case detail.Code == protocol.CodeParked:
		s.parked.Add(1)
	case status >= 400 && status < 500:
		s.refused.Add(1)
	}
	if status >= 500 && detail.Code != protocol.CodeParked {
		s.log.Error("request failed", zap.String("code", detail.Code), zap.String("message", detail.Message))
	}
	writeErrorBody(w, status, detail)
}

// handleSession answers GET /v1/sessions/{rollout_id}.
func (s *Server) handleSession(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("rollout_id")
	sl := s.store.lockSlot(id, false)
	if sl == nil {
		s.writeError(w, refuse(protocol.CodeUnknownSession, "no session for rollout %q", id))
		return
	}
	s.settle(sl)
	sess, evicted := s.store.peek(sl)
	if s.store.forgetIfIdle(sl) {
		sess, evicted = nil, nil
	}
	var info protocol.SessionInfo
	switch {
	case sess != nil:
		info = sess.info(id)
	case evicted != nil:
		info = *evicted
	}
	sl.mu.Unlock()
	if sess == nil && evicted == nil {
		s.writeError(w, refuse(protocol.CodeUnknownSession, "no session for rollout %q", id))
		return
	}
	s.writeValue(w, info)
}

// mutation returns the handler of one mutation kind: admission, decoding,
// then the kind's rules under the rollout's lock.
func (s *Server) mutation(kind string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.gate.enter() {
			s.writeError(w, refuse(protocol.CodeParked, "admission is closed for a checkpoint; retry the same request later"))
			return
		}
		defer s.gate.leave()
		body, aerr := readBody(w, r)
		if aerr != nil {
			s.writeError(w, aerr)
			return
		}
		var out []byte
		switch kind {
		case kindStart:
			out, aerr = s.start(r.Context(), body)
		case kindOperate:
			out, aerr = s.operate(r.Context(), r.PathValue("rollout_id"), body)
		case kindVerify:
			out, aerr = s.verify(r.Context(), r.PathValue("rollout_id"), body)
		}
		if aerr != nil {
			s.writeError(w, aerr)
			return
		}
		writeJSON(w, http.StatusOK, out)
	}
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBytes))
	if err != nil {
		return nil, refuse(protocol.CodeMalformed, "read request body: %v", err)
	}
	return body, nil
}

// decodeRequest decodes body strictly into v and checks that every field in
// required is present: a missing attempt must not silently mean attempt 0.
func decodeRequest(body []byte, v any, required ...string) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return refuse(protocol.CodeMalformed, "decode request: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return refuse(protocol.CodeMalformed, "decode request: trailing data after the JSON object")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return refuse(protocol.CodeMalformed, "decode request: %v", err)
	}
	for _, f := range required {
		if raw, ok := fields[f]; !ok || string(raw) == "null" {
			return refuse(protocol.CodeMalformed, "missing field %s", f)
		}
	}
	return nil
}

// checkIdentity validates the fencing identity; pathID is the rollout id of
// the URL ("" for a start, whose URL has none).
func checkIdentity(id protocol.Identity, pathID string) error {
	switch {
	case id.RolloutID == "":
		return refuse(protocol.CodeMalformed, "missing field rollout_id")
	case id.RequestID == "":
		return refuse(protocol.CodeMalformed, "missing field request_id")
	case id.Attempt < 0:
		return refuse(protocol.CodeMalformed, "attempt %d is negative", id.Attempt)
	case pathID != "" && pathID != id.RolloutID:
		return refuse(protocol.CodeMalformed, "rollout_id %q in the body differs from %q in the path", id.RolloutID, pathID)
	}
	return nil
}

var identityFields = []string{"rollout_id", "attempt", "request_id"}

// digest is the sha256 of the canonical request without its attempt: the
// kind, then the request re-encoded with Attempt zeroed and its free-form
// JSON (task, arguments) canonicalised, so formatting and key order do not
// matter but every value does.
func digest(kind string, req any) (string, []byte, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return "", nil, fmt.Errorf("digest %s request: %w", kind, err)
	}
	return digestOf(kind, b), b, nil
}

// digestOf is the digest of a canonical request's bytes.
func digestOf(kind string, canonical []byte) string {
	h := sha256.New()
	h.Write([]byte(kind))
	h.Write([]byte{'\n'})
	h.Write(canonical)
	return hex.EncodeToString(h.Sum(nil))
}

// newReceipt is the receipt of an applied mutation. A session of a replay
// environment keeps the canonical request too: the replay log a restore
// re-applies.
func (s *Server) newReceipt(env, kind, dg string, canonical, response []byte) receipt {
	r := receipt{Kind: kind, Digest: dg, Response: response}
	if s.modes[env] == envs.ModeReplay {
		r.Request = canonical
	}
	return r
}

// canonical re-encodes free-form JSON with sorted keys and numbers kept as
// written; empty means null.
func canonical(raw json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return json.RawMessage("null"), nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// replay returns a stored response with Replayed set.
func (s *Server) replay(r receipt) ([]byte, error) {
	var (
		out []byte
		err error
	)
	switch r.Kind {
	case kindStart:
		var v protocol.StartResponse
		if err = json.Unmarshal(r.Response, &v); err == nil {
			v.Replayed = true
			out, err = json.Marshal(v)
		}
	case kindOperate:
		var v protocol.OperateResponse
		if err = json.Unmarshal(r.Response, &v); err == nil {
			v.Replayed = true
			out, err = json.Marshal(v)
		}
	case kindVerify:
		var v protocol.VerifyResponse
		if err = json.Unmarshal(r.Response, &v); err == nil {
			v.Replayed = true
			out, err = json.Marshal(v)
		}
	default:
		err = fmt.Errorf("unknown receipt kind %q", r.Kind)
	}
	if err != nil {
		return nil, refuse(protocol.CodeInternal, "replay stored response: %v", err)
	}
	s.replayed.Add(1)
	return out, nil
}

// lookupReceipt decides a request that has a receipt: the same digest
// replays, a different one conflicts. ok is false when there is no receipt.
// Callers hold sl.mu and have checked the fence.
func (s *Server) lookupReceipt(sess *session, id protocol.Identity, dg string) (out []byte, ok bool, aerr error) {
	r, found := sess.Receipts[id.RequestID]
	if !found {
		return nil, false, nil
	}
	if r.Digest != dg {
		return nil, true, refuse(protocol.CodeRequestConflict,
			"request id %q was already used for a different %s request", id.RequestID, r.Kind)
	}
	out, aerr = s.replay(r)
	return out, true, aerr
}

// checkFence admits only the installed attempt: an older one is stale, and
// a newer one was never installed by the control plane (a data-plane
// request never moves the fence: RULES.md R6, R7). Callers hold sl.mu.
func checkFence(sl *slot, attempt int) error {
	switch f := sl.installed(); {
	case attempt < f:
		return refuse(protocol.CodeStaleAttempt,
			"rollout %q: attempt %d is below attempt %d already installed", sl.id, attempt, f)
	case attempt > f:
		return notInstalled(sl.id, attempt, f)
	}
	return nil
}

func notInstalled(id string, attempt, fence int) error {
	return refuse(protocol.CodeAttemptNotInstalled,
		"rollout %q: attempt %d is above attempt %d installed; only the control plane installs an attempt (restore, or %s)",
		id, attempt, fence, protocol.RouteControlAuthorise)
}

// lockSlotForStart returns the slot a start addresses, locked, creating it
// only for attempt 0 of a rollout never seen (or forgotten): a new rollout.
// A refused start must not leave a slot behind.
func (s *Server) lockSlotForStart(id string, attempt int) (*slot, error) {
	sl := s.store.lockSlot(id, false)
	if sl != nil {
		s.settle(sl)
		if !s.store.forgetIfIdle(sl) {
			return sl, nil
		}
		sl.mu.Unlock()
	}
	if attempt > 0 {
		return nil, notInstalled(id, attempt, 0)
	}
	return s.store.lockSlot(id, true), nil
}

// applied records that a mutation was applied and its receipt stored, and
// passes the failpoint that crash tests use to lose the reply.
func (s *Server) recordApplied(kind string, id protocol.Identity) {
	s.applied.Add(1)
	s.log.Debug("applied", zap.String("kind", kind), zap.String("rollout_id", id.RolloutID),
		zap.Int("attempt", id.Attempt), zap.String("request_id", id.RequestID))
	s.fp.Hit(failpoint.EnvAfterApplyBeforeReply)
}

// decodedStart is a checked start: the request, its environment, and its
// digest and canonical bytes.
type decodedStart struct {
	req       protocol.StartRequest
	env       envs.Environment
	dg        string
	canonical []byte
}

// decodeStart decodes and checks a start and returns its digest.
func (s *Server) decodeStart(body []byte) (decodedStart, error) {
	var req protocol.StartRequest
	if aerr := decodeRequest(body, &req, append(identityFields, "env")...); aerr != nil {
		return decodedStart{}, aerr
	}
	if aerr := checkIdentity(req.Identity, ""); aerr != nil {
		return decodedStart{}, aerr
	}
	env, ok := s.envs[req.Env]
	if !ok {
		return decodedStart{}, refuse(protocol.CodeUnknownEnv, "no environment %q on this server", req.Env)
	}
	canon := req
	canon.Attempt = 0
	task, err := canonical(req.Task)
	if err != nil {
		return decodedStart{}, refuse(protocol.CodeMalformed, "task: %v", err)
	}
	canon.Task = task
	dg, b, err := digest(kindStart, canon)
	if err != nil {
		return decodedStart{}, refuse(protocol.CodeInternal, "%v", err)
	}
	return decodedStart{req: req, env: env, dg: dg, canonical: b}, nil
}

func (s *Server) start(_ context.Context, body []byte) ([]byte, error) {
	ds, aerr := s.decodeStart(body)
	req, env, dg := ds.req, ds.env, ds.dg
	if aerr != nil {
		return nil, aerr
	}

	defer s.gate.hold(req.RolloutID, req.Attempt)()
	sl, aerr := s.lockSlotForStart(req.RolloutID, req.Attempt)
	if aerr != nil {
		return nil, aerr
	}
	defer sl.mu.Unlock()
	if aerr := s.lockedChecks(sl); aerr != nil {
		return nil, aerr
	}
	if aerr := checkFence(sl, req.Attempt); aerr != nil {
		return nil, aerr
	}
	sess, evicted := s.store.current(sl)
	switch {
	case sess != nil && req.Attempt <= sess.Attempt:
		if out, ok, aerr := s.lookupReceipt(sess, req.Identity, dg); ok {
			return out, aerr
		}
		if sess.Retired {
			return nil, refuse(protocol.CodeSessionRetired,
				"rollout %q: the session of attempt %d was verified and retired", req.RolloutID, sess.Attempt)
		}
		return nil, refuse(protocol.CodeRequestConflict,
			"rollout %q: attempt %d already started its session with another request id", req.RolloutID, sess.Attempt)
	case sess == nil && evicted != nil && req.Attempt <= evicted.Attempt:
		return nil, refuse(protocol.CodeSessionRetired,
			"rollout %q: the session of attempt %d was retired and its receipts dropped", req.RolloutID, evicted.Attempt)
	}

	// A first start, or a start-over of an attempt the control plane
	// installed: a fresh episode.
	live, st, err := env.Start(req.Seed, req.Task)
	if err != nil {
		return nil, envRefusal("start "+req.Env, err)
	}
	if aerr := s.retiredWhileRunning(sl, req.Attempt); aerr != nil {
		_ = live.Close()
		return nil, aerr
	}
	out, err := json.Marshal(protocol.StartResponse{Revision: 0, Spec: s.specOf(req.Env), Start: st})
	if err != nil {
		_ = live.Close()
		return nil, refuse(protocol.CodeInternal, "encode start response: %v", err)
	}
	fresh := &session{
		Env: req.Env, Attempt: req.Attempt,
		Receipts: map[string]receipt{req.RequestID: s.newReceipt(req.Env, kindStart, dg, ds.canonical, out)},
		live:     live,
	}
	if old := s.store.install(sl, fresh); old != nil {
		if err := old.Close(); err != nil {
			s.log.Warn("close replaced session", zap.String("rollout_id", req.RolloutID), zap.Error(err))
		}
	}
	s.recordApplied(kindStart, req.Identity)
	return out, nil
}

// liveSession finds the session an operate or verify addresses, after the
// fence check. Callers hold sl.mu.
func (s *Server) liveSession(sl *slot, id protocol.Identity) (*session, error) {
	if aerr := checkFence(sl, id.Attempt); aerr != nil {
		return nil, aerr
	}
	sess, evicted := s.store.current(sl)
	if sess != nil {
		return sess, nil
	}
	if evicted != nil {
		return nil, refuse(protocol.CodeSessionRetired,
			"rollout %q: the session was retired and its receipts dropped", id.RolloutID)
	}
	return nil, refuse(protocol.CodeUnknownSession, "no session for rollout %q", id.RolloutID)
}

// unseen refuses an operate or verify of a rollout the server does not know
// (never seen, or forgotten): an attempt above 0 was never installed here.
func unseen(id protocol.Identity) error {
	if id.Attempt > 0 {
		return notInstalled(id.RolloutID, id.Attempt, 0)
	}
	return refuse(protocol.CodeUnknownSession, "no session for rollout %q", id.RolloutID)
}

func checkMutable(sess *session, id protocol.Identity, expected int64) error {
	if sess.Retired {
		return refuse(protocol.CodeSessionRetired, "rollout %q: the session was verified and retired", id.RolloutID)
	}
	if expected != sess.Revision {
		return refuse(protocol.CodeRevisionMismatch,
			"rollout %q: expected revision %d, the session is at revision %d", id.RolloutID, expected, sess.Revision)
	}
	return nil
}

// mutateSession runs apply on the live session an operate or verify request
// addresses, holding the request's admission hold and the slot lock for the
// whole of it. Before apply runs it does what both mutations share: the
// phase and fence checks, answering a request that has a receipt from it
// (apply does not run), and refusing a retired session or a stale expected
// revision.
func (s *Server) mutateSession(id protocol.Identity, expected int64, dg string,
	apply func(sl *slot, sess *session) ([]byte, error)) ([]byte, error) {
	defer s.gate.hold(id.RolloutID, id.Attempt)()
	sl := s.store.lockSlot(id.RolloutID, false)
	if sl == nil {
		return nil, unseen(id)
	}
	defer sl.mu.Unlock()
	if aerr := s.lockedChecks(sl); aerr != nil {
		return nil, aerr
	}
	if s.store.forgetIfIdle(sl) {
		return nil, unseen(id)
	}
	sess, aerr := s.liveSession(sl, id)
	if aerr != nil {
		return nil, aerr
	}
	if out, ok, aerr := s.lookupReceipt(sess, id, dg); ok {
		return out, aerr
	}
	if aerr := checkMutable(sess, id, expected); aerr != nil {
		return nil, aerr
	}
	return apply(sl, sess)
}

func (s *Server) operate(_ context.Context, pathID string, body []byte) ([]byte, error) {
	var req protocol.OperateRequest
	if aerr := decodeRequest(body, &req, append(identityFields, "expected_revision", "tool")...); aerr != nil {
		return nil, aerr
	}
	if aerr := checkIdentity(req.Identity, pathID); aerr != nil {
		return nil, aerr
	}
	if req.Tool == "" {
		return nil, refuse(protocol.CodeMalformed, "missing field tool")
	}
	canon := req
	canon.Attempt = 0
	args, err := canonical(req.Arguments)
	if err != nil {
		return nil, refuse(protocol.CodeMalformed, "arguments: %v", err)
	}
	canon.Arguments = args
	dg, canonBytes, err := digest(kindOperate, canon)
	if err != nil {
		return nil, refuse(protocol.CodeInternal, "%v", err)
	}

	return s.mutateSession(req.Identity, req.ExpectedRevision, dg, func(sl *slot, sess *session) ([]byte, error) {
		outcome, err := sess.live.Apply(req.Tool, req.Arguments)
		if aerr := s.retiredWhileRunning(sl, req.Attempt); aerr != nil {
			return nil, aerr
		}
		if err != nil {
			return nil, envRefusal("apply "+req.Tool, err)
		}
		out, err := json.Marshal(protocol.OperateResponse{Revision: sess.Revision + 1, Outcome: outcome})
		if err != nil {
			// The environment has applied the operation but it cannot be
			// answered: fail closed rather than pretend it did not happen.
			return nil, refuse(protocol.CodeInternal, "encode operate response: %v", err)
		}
		sess.Revision++
		sess.Receipts[req.RequestID] = s.newReceipt(sess.Env, kindOperate, dg, canonBytes, out)
		s.recordApplied(kindOperate, req.Identity)
		return out, nil
	})
}

func (s *Server) verify(_ context.Context, pathID string, body []byte) ([]byte, error) {
	var req protocol.VerifyRequest
	if aerr := decodeRequest(body, &req, append(identityFields, "expected_revision")...); aerr != nil {
		return nil, aerr
	}
	if aerr := checkIdentity(req.Identity, pathID); aerr != nil {
		return nil, aerr
	}
	canon := req
	canon.Attempt = 0
	dg, _, err := digest(kindVerify, canon)
	if err != nil {
		return nil, refuse(protocol.CodeInternal, "%v", err)
	}

	return s.mutateSession(req.Identity, req.ExpectedRevision, dg, func(sl *slot, sess *session) ([]byte, error) {
		verdict, err := sess.live.Verify()
		if aerr := s.retiredWhileRunning(sl, req.Attempt); aerr != nil {
			return nil, aerr
		}
		if err != nil {
			return nil, envRefusal("verify", err)
		}
		out, err := json.Marshal(protocol.VerifyResponse{Revision: sess.Revision, Verdict: verdict})
		if err != nil {
			return nil, refuse(protocol.CodeInternal, "encode verify response: %v", err)
		}
		sess.Receipts[req.RequestID] = receipt{Kind: kindVerify, Digest: dg, Response: out}
		if err := sess.live.Close(); err != nil {
			s.log.Warn("close verified session", zap.String("rollout_id", req.RolloutID), zap.Error(err))
		}
		s.store.retire(sl)
		s.recordApplied(kindVerify, req.Identity)
		return out, nil
	})
}
