package envserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/internal/testsupport"
	"github.com/turnstile-rl/turnstile/participants/envserver"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// TestPhaseFenceProperty drives a real server through random sequences of
// control operations (prepare, commit, resume, retire, authorise, with checkpoint ids
// from a small pool) interleaved with data-plane mutations on a few
// rollouts, and compares every answer with a model of the phase fence and
// of the sessions. After every step the server's status, counters and
// sessions must match the model: a parked mutation changes nothing, and a
// replayed control operation answers what it answered the first time.
func TestPhaseFenceProperty(t *testing.T) {
	base := t.TempDir()
	rapid.Check(t, func(rt *rapid.T) {
		h := newFenceHarness(rt, base)
		actions := map[string]func(*rapid.T){
			"prepare":   h.prepare,
			"commit":    h.commit,
			"resume":    h.resume,
			"retire":    h.retire,
			"authorise": h.authorise,
			"start":     h.start,
			"operate":   h.operate,
			"replay":    h.replayOperate,
			"verify":    h.verify,
		}
		names := slices.Sorted(maps.Keys(actions))
		// Short sequences (rather than rt.Repeat's ~30 steps) keep the
		// 100 checks quick enough for every test run; a cut, its commit
		// and a resume still fit several times over.
		steps := rapid.IntRange(1, fenceMaxSteps).Draw(rt, "steps")
		h.check(rt)
		for range steps {
			actions[rapid.SampledFrom(names).Draw(rt, "action")](rt)
			h.check(rt)
		}
	})
}

const (
	fenceToken     = "fence-property-token"
	fenceDataToken = "fence-property-data-token"
	fenceTarget    = 3 // the counter task's target: verify rewards 1 after exactly 3 increments
	// fenceMaxSteps bounds the actions of one check.
	fenceMaxSteps = 24
)

// fenceRollouts are the rollouts the mutations address.
var fenceRollouts = []string{"r0", "r1", "r2"}

// fenceRollout is the model of one rollout's slot.
type fenceRollout struct {
	fence    int  // highest attempt accepted
	started  bool // a session exists, live or verified
	attempt  int
	revision int64 // also the counter's value: every increment adds 1
	verified bool
	nextOp   int
	last     *fenceOperate // last applied operate of the session, for replays
}

type fenceOperate struct {
	req  protocol.OperateRequest
	resp protocol.OperateResponse
}

// fenceModel is what the server should hold.
type fenceModel struct {
	phase  protocol.Phase // idle, prepared or committed
	active string         // the active checkpoint id; "" when idle
	ids    []string       // checkpoint ids drawn so far, ck0, ck1, ...
	// retired maps every resumed id to the first answer of its resume.
	retired map[string][]byte
	// The active checkpoint: its first prepare answer, the expected cut
	// (edited by retires while prepared) and its commit.
	prepareBody []byte
	cut         []protocol.SessionSummary
	cutEdited   bool
	commitLoc   string
	commitBody  []byte
	usedLocs    []string // locations holding a committed checkpoint
	applied     int64
	parked      int64
	rollouts    map[string]*fenceRollout
}

type fenceHarness struct {
	url     string
	hc      *http.Client
	dir     string // commit locations live here
	foreign string // a directory holding a file that is no checkpoint
	nloc    int
	m       fenceModel
}

func newFenceHarness(rt *rapid.T, base string) *fenceHarness {
	srv, err := envserver.NewServer(envserver.ServerConfig{
		Envs: []envs.Environment{counter.New()}, Name: "env-prop", ControlToken: fenceToken, DataToken: fenceDataToken,
	})
	require.NoError(rt, err, "NewServer")
	hs := testsupport.QuietServer(srv)
	rt.Cleanup(hs.Close)
	dir, err := os.MkdirTemp(base, "check-")
	require.NoError(rt, err, "temp dir")
	foreign := filepath.Join(dir, "foreign")
	require.NoError(rt, os.MkdirAll(foreign, 0o755), "foreign dir")
	require.NoError(rt, os.WriteFile(filepath.Join(foreign, "notes.txt"), []byte("not a checkpoint"), 0o644), "foreign file")
	h := &fenceHarness{url: hs.URL, hc: hs.Client(), dir: dir, foreign: foreign,
		m: fenceModel{phase: protocol.PhaseIdle, retired: map[string][]byte{}, rollouts: map[string]*fenceRollout{}}}
	for _, r := range fenceRollouts {
		h.m.rollouts[r] = &fenceRollout{}
	}
	return h
}

// --- HTTP ---

func routePath(route string) string {
	_, p, _ := strings.Cut(route, " ")
	return p
}

func sessionPath(route, rollout string) string {
	return strings.Replace(routePath(route), "{rollout_id}", rollout, 1)
}

func (h *fenceHarness) call(rt *rapid.T, method, path string, in any) (int, []byte) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		require.NoError(rt, err, "encode %s body", path)
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, h.url+path, body)
	require.NoError(rt, err, "request %s", path)
	if strings.HasPrefix(path, protocol.ControlPrefix) {
		req.Header.Set("Authorization", "Bearer "+fenceToken)
	} else {
		req.Header.Set("Authorization", "Bearer "+fenceDataToken)
	}
	resp, err := h.hc.Do(req)
	require.NoError(rt, err, "%s %s", method, path)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(rt, err, "%s %s: read answer", method, path)
	return resp.StatusCode, b
}

// wantOK checks a 200 and decodes its body into out (when not nil).
func wantOK(rt *rapid.T, what string, status int, body []byte, out any) {
	rt.Helper()
	require.Equal(rt, http.StatusOK, status, "%s: answered %d %s, want 200", what, status, body)
	if out != nil {
		require.NoError(rt, json.Unmarshal(body, out), "%s: decode %s", what, body)
	}
}

// wantRefusal checks an error answer's status and code.
func wantRefusal(rt *rapid.T, what string, status int, body []byte, wantStatus int, wantCode string) {
	rt.Helper()
	var eb protocol.ErrorBody
	err := json.Unmarshal(body, &eb)
	require.NoError(rt, err, "%s: answered %d %s, want %d %s (no error envelope: %v)", what, status, body, wantStatus, wantCode, err)
	require.Equal(rt, wantStatus, status, "%s: answered %d %s (%s), want %d %s", what, status, eb.Error.Code, eb.Error.Message, wantStatus, wantCode)
	require.Equal(rt, wantCode, eb.Error.Code, "%s: answered %d %s (%s), want %d %s", what, status, eb.Error.Code, eb.Error.Message, wantStatus, wantCode)
}

// --- drawing ---

// drawID draws a checkpoint id: one already used (often the active one) or
// a fresh one.
func (h *fenceHarness) drawID(rt *rapid.T) string {
	pool := slices.Clone(h.m.ids)
	pool = append(pool, fmt.Sprintf("ck%d", len(h.m.ids)))
	if h.m.active != "" {
		pool = append(pool, h.m.active, h.m.active)
	}
	id := rapid.SampledFrom(pool).Draw(rt, "checkpoint_id")
	if !slices.Contains(h.m.ids, id) {
		h.m.ids = append(h.m.ids, id)
	}
	return id
}

func (h *fenceHarness) drawRollout(rt *rapid.T) (string, *fenceRollout) {
	r := rapid.SampledFrom(fenceRollouts).Draw(rt, "rollout")
	return r, h.m.rollouts[r]
}

func (h *fenceHarness) closed() bool { return h.m.phase != protocol.PhaseIdle }

// parked checks that a mutation sent while admission is closed is parked.
// The model does not change, so the check after the step proves it changed
// nothing.
func (h *fenceHarness) parked(rt *rapid.T, what string, status int, body []byte) {
	rt.Helper()
	wantRefusal(rt, what+" while admission is closed", status, body, http.StatusServiceUnavailable, protocol.CodeParked)
	h.m.parked++
}

// --- control actions ---

func (h *fenceHarness) expectedCut() []protocol.SessionSummary {
	cut := []protocol.SessionSummary{}
	for _, id := range fenceRollouts { // already sorted
		r := h.m.rollouts[id]
		if r.started {
			cut = append(cut, protocol.SessionSummary{RolloutID: id, Attempt: r.attempt, Revision: r.revision,
				Env: counter.Name, Mode: envs.ModeExportRestore, Retired: r.verified})
		}
	}
	return cut
}

func (h *fenceHarness) prepare(rt *rapid.T) {
	id := h.drawID(rt)
	status, body := h.call(rt, http.MethodPost, routePath(protocol.RouteControlPrepare),
		protocol.PrepareRequest{CheckpointID: id, Deadline: time.Now().Add(time.Minute)})
	what := fmt.Sprintf("prepare %s in phase %s (active %q)", id, h.m.phase, h.m.active)
	switch {
	case h.m.retired[id] != nil:
		wantRefusal(rt, what, status, body, http.StatusConflict, protocol.CodeStaleCheckpoint)
	case h.m.active != "" && h.m.active != id:
		wantRefusal(rt, what, status, body, http.StatusConflict, protocol.CodeCheckpointConflict)
	case h.m.active == id:
		// A replay: the first answer, less what retires took out of the cut.
		h.checkPrepare(rt, what+" (replay)", status, body, id)
		if !h.m.cutEdited {
			require.Equal(rt, string(h.m.prepareBody), string(body), "%s: the replay answers as the first answer did", what)
		}
	default:
		h.m.cut = h.expectedCut()
		h.checkPrepare(rt, what, status, body, id)
		h.m.phase, h.m.active, h.m.prepareBody, h.m.cutEdited = protocol.PhasePrepared, id, body, false
	}
}

func (h *fenceHarness) checkPrepare(rt *rapid.T, what string, status int, body []byte, id string) {
	rt.Helper()
	var got protocol.PrepareResponse
	wantOK(rt, what, status, body, &got)
	want := protocol.PrepareResponse{Phase: protocol.PhasePrepared, CheckpointID: id, Sessions: h.m.cut}
	require.Equal(rt, want, got, "%s: answered %+v, want %+v", what, got, want)
}

// drawLocation draws a commit location and says what the server should
// make of it: "fresh" (never written), "same" (the active checkpoint's
// commit), "used" (another checkpoint's commit), "foreign" (holds a file
// that is no checkpoint) or "relative" (not an absolute path).
func (h *fenceHarness) drawLocation(rt *rapid.T) (string, string) {
	kinds := []string{"fresh", "fresh", "foreign", "relative"}
	if h.m.commitLoc != "" {
		kinds = append(kinds, "same", "same")
	}
	if len(h.m.usedLocs) > 0 {
		kinds = append(kinds, "used")
	}
	switch kind := rapid.SampledFrom(kinds).Draw(rt, "location"); kind {
	case "same":
		return h.m.commitLoc, kind
	case "used":
		return rapid.SampledFrom(h.m.usedLocs).Draw(rt, "used_location"), kind
	case "foreign":
		return h.foreign, kind
	case "relative":
		return "checkpoints/relative", kind
	default:
		h.nloc++
		return filepath.Join(h.dir, fmt.Sprintf("loc%d", h.nloc)), kind
	}
}

func (h *fenceHarness) commit(rt *rapid.T) {
	id := h.drawID(rt)
	loc, kind := h.drawLocation(rt)
	status, body := h.call(rt, http.MethodPost, routePath(protocol.RouteControlCommit),
		protocol.CommitRequest{CheckpointID: id, Location: loc})
	what := fmt.Sprintf("commit %s to a %s location in phase %s (active %q)", id, kind, h.m.phase, h.m.active)
	switch {
	case kind == "relative":
		wantRefusal(rt, what, status, body, http.StatusBadRequest, protocol.CodeMalformed)
	case h.m.retired[id] != nil:
		wantRefusal(rt, what, status, body, http.StatusConflict, protocol.CodeStaleCheckpoint)
	case h.m.active != "" && h.m.active != id:
		wantRefusal(rt, what, status, body, http.StatusConflict, protocol.CodeCheckpointConflict)
	case h.m.active == "":
		wantRefusal(rt, what, status, body, http.StatusConflict, protocol.CodeInvalidPhase)
	case h.m.phase == protocol.PhaseCommitted && kind == "same":
		wantOK(rt, what, status, body, nil)
		require.Equal(rt, string(h.m.commitBody), string(body), "%s: replay answered\n%s\nthe first answer was\n%s", what, body, h.m.commitBody)
	case h.m.phase == protocol.PhaseCommitted:
		// Committed elsewhere already: other arguments.
		wantRefusal(rt, what, status, body, http.StatusConflict, protocol.CodeCheckpointConflict)
	case kind == "used" || kind == "foreign":
		// Refused without writing; the phase stays prepared.
		wantRefusal(rt, what, status, body, http.StatusConflict, protocol.CodeLocationConflict)
	default:
		var got protocol.CommitResponse
		wantOK(rt, what, status, body, &got)
		require.Equal(rt, protocol.PhaseCommitted, got.Phase, "%s: answered %+v, want phase committed, location %s and %d sessions", what, got, loc, len(h.m.cut))
		require.Equal(rt, id, got.CheckpointID, "%s: answered %+v, want phase committed, location %s and %d sessions", what, got, loc, len(h.m.cut))
		require.Equal(rt, loc, got.Location, "%s: answered %+v, want phase committed, location %s and %d sessions", what, got, loc, len(h.m.cut))
		require.Equal(rt, len(h.m.cut), got.Sessions, "%s: answered %+v, want phase committed, location %s and %d sessions", what, got, loc, len(h.m.cut))
		require.NotEqual(rt, "", got.ManifestDigest, "%s: answered %+v, want phase committed, location %s and %d sessions", what, got, loc, len(h.m.cut))
		require.Greater(rt, got.Bytes, int64(0), "%s: answered %+v, want phase committed, location %s and %d sessions", what, got, loc, len(h.m.cut))
		h.m.phase, h.m.commitLoc, h.m.commitBody = protocol.PhaseCommitted, loc, body
	}
}

func (h *fenceHarness) resume(rt *rapid.T) {
	id := h.drawID(rt)
	status, body := h.call(rt, http.MethodPost, routePath(protocol.RouteControlResume),
		protocol.ResumeRequest{CheckpointID: id})
	what := fmt.Sprintf("resume %s in phase %s (active %q)", id, h.m.phase, h.m.active)
	switch first := h.m.retired[id]; {
	case first != nil:
		wantOK(rt, what, status, body, nil)
		require.Equal(rt, string(first), string(body), "%s: replay answered\n%s\nthe first answer was\n%s", what, body, first)
	case h.m.active != "" && h.m.active != id:
		wantRefusal(rt, what, status, body, http.StatusConflict, protocol.CodeCheckpointConflict)
	default:
		var got protocol.ResumeResponse
		wantOK(rt, what, status, body, &got)
		want := (protocol.ResumeResponse{Phase: protocol.PhaseIdle, CheckpointID: id})
		require.Equal(rt, want, got, "%s: answered %+v, want %+v", what, got, want)
		h.m.retired[id] = body
		if h.m.commitLoc != "" {
			h.m.usedLocs = append(h.m.usedLocs, h.m.commitLoc)
		}
		h.m.phase, h.m.active = protocol.PhaseIdle, ""
		h.m.prepareBody, h.m.cut, h.m.cutEdited, h.m.commitLoc, h.m.commitBody = nil, nil, false, "", nil
	}
}

func (h *fenceHarness) retire(rt *rapid.T) {
	rid, r := h.drawRollout(rt)
	attempt := rapid.IntRange(max(r.fence-1, 0), r.fence+1).Draw(rt, "attempt")
	status, body := h.call(rt, http.MethodPost, routePath(protocol.RouteControlRetire),
		protocol.RetireRequest{RolloutID: rid, Attempt: attempt})
	what := fmt.Sprintf("retire %s attempt %d in phase %s", rid, attempt, h.m.phase)
	if h.m.phase == protocol.PhaseCommitted {
		wantRefusal(rt, what, status, body, http.StatusConflict, protocol.CodeInvalidPhase)
		return
	}
	floor := attempt + 1
	want := protocol.RetireResponse{RolloutID: rid, Fence: max(r.fence, floor), Discarded: r.started && r.attempt < floor}
	var got protocol.RetireResponse
	wantOK(rt, what, status, body, &got)
	require.Equal(rt, want, got, "%s: answered %+v, want %+v", what, got, want)
	r.fence = want.Fence
	if want.Discarded {
		*r = fenceRollout{fence: r.fence, nextOp: r.nextOp}
	}
	if h.m.phase == protocol.PhasePrepared {
		cut := slices.DeleteFunc(slices.Clone(h.m.cut), func(s protocol.SessionSummary) bool {
			return s.RolloutID == rid && s.Attempt < floor
		})
		if len(cut) != len(h.m.cut) {
			h.m.cut, h.m.cutEdited = cut, true
		}
	}
}

// authorise installs an attempt for a start-over: below the fence it is
// stale, at the fence a no-op, above it raises the fence and drops the
// session (and takes it out of a frozen cut), except once a cut is
// committed.
func (h *fenceHarness) authorise(rt *rapid.T) {
	rid, r := h.drawRollout(rt)
	attempt := rapid.IntRange(max(r.fence-1, 0), r.fence+2).Draw(rt, "attempt")
	status, body := h.call(rt, http.MethodPost, sessionPath(protocol.RouteControlAuthorise, rid),
		protocol.AuthoriseRequest{Attempt: attempt})
	what := fmt.Sprintf("authorise %s attempt %d (fence %d) in phase %s", rid, attempt, r.fence, h.m.phase)
	var got protocol.AuthoriseResponse
	switch {
	case attempt < r.fence:
		wantRefusal(rt, what, status, body, http.StatusConflict, protocol.CodeStaleAttempt)
	case attempt == r.fence:
		wantOK(rt, what, status, body, &got)
		want := (protocol.AuthoriseResponse{RolloutID: rid, Attempt: attempt, Fence: attempt})
		require.Equal(rt, want, got, "%s: answered %+v, want %+v", what, got, want)
	case h.m.phase == protocol.PhaseCommitted:
		wantRefusal(rt, what, status, body, http.StatusConflict, protocol.CodeInvalidPhase)
	default:
		wantOK(rt, what, status, body, &got)
		want := protocol.AuthoriseResponse{RolloutID: rid, Attempt: attempt, Fence: attempt, Changed: true, Dropped: r.started}
		require.Equal(rt, want, got, "%s: answered %+v, want %+v", what, got, want)
		*r = fenceRollout{fence: attempt, nextOp: r.nextOp}
		if h.m.phase == protocol.PhasePrepared {
			cut := slices.DeleteFunc(slices.Clone(h.m.cut), func(s protocol.SessionSummary) bool { return s.RolloutID == rid })
			if len(cut) != len(h.m.cut) {
				h.m.cut, h.m.cutEdited = cut, true
			}
		}
	}
}

// --- data-plane actions ---

// start sends a start of the installed attempt (a first start, or the
// replay of the session's own), of an attempt above it (never installed:
// refused, nothing changes) or below it (stale).
func (h *fenceHarness) start(rt *rapid.T) {
	rid, r := h.drawRollout(rt)
	kinds := []string{"installed", "installed", "above"}
	if r.fence > 0 {
		kinds = append(kinds, "stale")
	}
	kind := rapid.SampledFrom(kinds).Draw(rt, "start_attempt")
	attempt := map[string]int{"installed": r.fence, "above": r.fence + 1, "stale": r.fence - 1}[kind]
	status, body := h.call(rt, http.MethodPost, routePath(protocol.RouteStart), protocol.StartRequest{
		Identity: protocol.Identity{RolloutID: rid, Attempt: attempt, RequestID: protocol.SeedRequestID(rid)},
		Env:      counter.Name, Seed: 1, Task: json.RawMessage(fmt.Sprintf(`{"target":%d}`, fenceTarget)),
	})
	what := fmt.Sprintf("start %s attempt %d (fence %d)", rid, attempt, r.fence)
	switch {
	case h.closed():
		h.parked(rt, what, status, body)
	case kind == "stale":
		wantRefusal(rt, what, status, body, http.StatusConflict, protocol.CodeStaleAttempt)
	case kind == "above":
		wantRefusal(rt, what, status, body, http.StatusConflict, protocol.CodeAttemptNotInstalled)
	default:
		var got protocol.StartResponse
		wantOK(rt, what, status, body, &got)
		require.Equal(rt, int64(0), got.Revision, "%s: answered %+v, want revision 0, replayed %v", what, got, r.started)
		require.Equal(rt, r.started, got.Replayed, "%s: answered %+v, want revision 0, replayed %v", what, got, r.started)
		if !r.started {
			*r = fenceRollout{fence: attempt, started: true, attempt: attempt, nextOp: r.nextOp}
			h.m.applied++
		}
	}
}

func (h *fenceHarness) operate(rt *rapid.T) {
	rid, r := h.drawRollout(rt)
	attempt := r.fence
	// Now and then from an attempt never installed: refused, nothing changes.
	above := rapid.IntRange(0, 4).Draw(rt, "above_fence") == 0
	if above {
		attempt++
	}
	req := protocol.OperateRequest{
		Identity:         protocol.Identity{RolloutID: rid, Attempt: attempt, RequestID: protocol.OperateRequestID(rid, r.nextOp, 0)},
		ExpectedRevision: r.revision, Tool: counter.ToolIncrement, Arguments: json.RawMessage(`{"amount":1}`),
	}
	r.nextOp++
	status, body := h.call(rt, http.MethodPost, sessionPath(protocol.RouteOperate, rid), req)
	what := fmt.Sprintf("operate %s attempt %d at revision %d", rid, attempt, r.revision)
	switch {
	case h.closed():
		h.parked(rt, what, status, body)
	case above:
		wantRefusal(rt, what, status, body, http.StatusConflict, protocol.CodeAttemptNotInstalled)
	case !r.started:
		wantRefusal(rt, what, status, body, http.StatusNotFound, protocol.CodeUnknownSession)
	case r.verified:
		wantRefusal(rt, what, status, body, http.StatusConflict, protocol.CodeSessionRetired)
	default:
		var got protocol.OperateResponse
		wantOK(rt, what, status, body, &got)
		want := protocol.OperateResponse{Revision: r.revision + 1,
			Outcome: envs.Outcome{Observation: fmt.Sprintf("counter=%d", r.revision+1)}}
		require.Equal(rt, want, got, "%s: answered %+v, want %+v", what, got, want)
		r.revision++
		r.last = &fenceOperate{req: req, resp: got}
		h.m.applied++
	}
}

// replayOperate re-sends the last applied operate of a session: the stored
// answer comes back marked replayed and nothing is applied.
func (h *fenceHarness) replayOperate(rt *rapid.T) {
	rid, r := h.drawRollout(rt)
	if r.last == nil {
		return // nothing applied yet in this session
	}
	status, body := h.call(rt, http.MethodPost, sessionPath(protocol.RouteOperate, rid), r.last.req)
	what := fmt.Sprintf("replay of operate %s", r.last.req.RequestID)
	if h.closed() {
		h.parked(rt, what, status, body)
		return
	}
	var got protocol.OperateResponse
	wantOK(rt, what, status, body, &got)
	want := r.last.resp
	want.Replayed = true
	require.Equal(rt, want, got, "%s: answered %+v, want %+v", what, got, want)
}

func (h *fenceHarness) verify(rt *rapid.T) {
	rid, r := h.drawRollout(rt)
	req := protocol.VerifyRequest{
		Identity:         protocol.Identity{RolloutID: rid, Attempt: r.fence, RequestID: protocol.VerifyRequestID(rid)},
		ExpectedRevision: r.revision,
	}
	status, body := h.call(rt, http.MethodPost, sessionPath(protocol.RouteVerify, rid), req)
	what := fmt.Sprintf("verify %s at revision %d", rid, r.revision)
	switch {
	case h.closed():
		h.parked(rt, what, status, body)
	case !r.started:
		wantRefusal(rt, what, status, body, http.StatusNotFound, protocol.CodeUnknownSession)
	default:
		var got protocol.VerifyResponse
		wantOK(rt, what, status, body, &got)
		reward := 0.0
		if r.revision == fenceTarget {
			reward = 1
		}
		require.Equal(rt, r.revision, got.Revision, "%s: answered %+v, want revision %d, reward %v, replayed %v", what, got, r.revision, reward, r.verified)
		require.Equal(rt, reward, got.Verdict.Reward, "%s: answered %+v, want revision %d, reward %v, replayed %v", what, got, r.revision, reward, r.verified)
		require.Equal(rt, r.verified, got.Replayed, "%s: answered %+v, want revision %d, reward %v, replayed %v", what, got, r.revision, reward, r.verified)
		if !r.verified {
			r.verified = true
			h.m.applied++
		}
	}
}

// --- invariants ---

// check compares the server's status, counters and sessions with the model.
func (h *fenceHarness) check(rt *rapid.T) {
	live := 0
	for _, r := range h.m.rollouts {
		if r.started && !r.verified {
			live++
		}
	}

	var st protocol.ControlStatus
	status, body := h.call(rt, http.MethodGet, routePath(protocol.RouteControlStatus), nil)
	wantOK(rt, "status", status, body, &st)
	admission, cut := protocol.AdmissionOpen, 0
	if h.closed() {
		admission, cut = protocol.AdmissionClosed, len(h.m.cut)
	}
	require.Equal(rt, h.m.phase, st.Phase, "status %+v, want phase %s, checkpoint %q, admission %s, %d live sessions, %d in the cut, nothing in flight", st, h.m.phase, h.m.active, admission, live, cut)
	require.Equal(rt, h.m.active, st.CheckpointID, "status %+v, want phase %s, checkpoint %q, admission %s, %d live sessions, %d in the cut, nothing in flight", st, h.m.phase, h.m.active, admission, live, cut)
	require.Equal(rt, "", st.RestoreID, "status %+v, want phase %s, checkpoint %q, admission %s, %d live sessions, %d in the cut, nothing in flight", st, h.m.phase, h.m.active, admission, live, cut)
	require.Equal(rt, admission, st.Admission, "status %+v, want phase %s, checkpoint %q, admission %s, %d live sessions, %d in the cut, nothing in flight", st, h.m.phase, h.m.active, admission, live, cut)
	require.Equal(rt, live, st.Sessions, "status %+v, want phase %s, checkpoint %q, admission %s, %d live sessions, %d in the cut, nothing in flight", st, h.m.phase, h.m.active, admission, live, cut)
	require.Equal(rt, cut, st.CutSessions, "status %+v, want phase %s, checkpoint %q, admission %s, %d live sessions, %d in the cut, nothing in flight", st, h.m.phase, h.m.active, admission, live, cut)
	require.Empty(rt, st.InFlight, "status %+v, want phase %s, checkpoint %q, admission %s, %d live sessions, %d in the cut, nothing in flight", st, h.m.phase, h.m.active, admission, live, cut)

	var stats protocol.Stats
	status, body = h.call(rt, http.MethodGet, routePath(protocol.RouteStats), nil)
	wantOK(rt, "stats", status, body, &stats)
	require.Equal(rt, h.m.applied, stats.Applied, "stats %+v, want applied %d, parked %d, %d live sessions", stats, h.m.applied, h.m.parked, live)
	require.Equal(rt, h.m.parked, stats.Parked, "stats %+v, want applied %d, parked %d, %d live sessions", stats, h.m.applied, h.m.parked, live)
	require.Equal(rt, live, stats.Sessions, "stats %+v, want applied %d, parked %d, %d live sessions", stats, h.m.applied, h.m.parked, live)

	for _, rid := range fenceRollouts {
		r := h.m.rollouts[rid]
		status, body := h.call(rt, http.MethodGet, sessionPath(protocol.RouteSessions, rid), nil)
		if !r.started {
			wantRefusal(rt, "session "+rid, status, body, http.StatusNotFound, protocol.CodeUnknownSession)
			continue
		}
		var info protocol.SessionInfo
		wantOK(rt, "session "+rid, status, body, &info)
		want := protocol.SessionInfo{RolloutID: rid, Env: counter.Name, Attempt: r.attempt, Revision: r.revision, Retired: r.verified}
		require.Equal(rt, want, info, "session %s is %+v, want %+v", rid, info, want)
	}
}
