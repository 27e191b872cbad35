package envserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/internal/testsupport"
	"github.com/turnstile-rl/turnstile/internal/testsupport/envtest"
	"github.com/turnstile-rl/turnstile/participants/envserver"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// wrappedCounter is the counter environment under another name, with every
// session, started or restored, passed through wrap: the base of the test
// environments that watch or steer what a session does.
type wrappedCounter struct {
	name string
	wrap func(envs.Session) envs.Session
}

func (w wrappedCounter) Spec() envs.Spec {
	sp := counter.New().Spec()
	sp.Name = w.name
	return sp
}

func (w wrappedCounter) Start(seed int64, task json.RawMessage) (envs.Session, envs.Start, error) {
	s, st, err := counter.New().Start(seed, task)
	if err != nil {
		return nil, st, err
	}
	return w.wrap(s), st, nil
}

func (w wrappedCounter) Restore(state json.RawMessage) (envs.Session, error) {
	s, err := counter.New().Restore(state)
	if err != nil {
		return nil, err
	}
	return w.wrap(s), nil
}

// probeEnv wraps the counter and counts Close calls; tool "explode" fails
// with a plain (non-refusal) error.
type probeEnv struct {
	wrappedCounter
	closed atomic.Int64
}

func newProbeEnv() *probeEnv {
	p := &probeEnv{}
	p.wrappedCounter = wrappedCounter{name: "probe", wrap: func(s envs.Session) envs.Session {
		return &probeSession{Session: s, env: p}
	}}
	return p
}

type probeSession struct {
	envs.Session
	env *probeEnv
}

func (s *probeSession) Apply(tool string, args json.RawMessage) (envs.Outcome, error) {
	if tool == "explode" {
		return envs.Outcome{}, errors.New("boom")
	}
	return s.Session.Apply(tool, args)
}

func (s *probeSession) Close() error {
	s.env.closed.Add(1)
	return s.Session.Close()
}

type fixture struct {
	srv   *envserver.Server
	c     *protocol.Client
	cc    *protocol.ControlClient
	url   string
	probe *probeEnv
}

func newFixture(t *testing.T, mod ...func(*envserver.ServerConfig)) *fixture {
	t.Helper()
	probe := newProbeEnv()
	cfg := envserver.ServerConfig{Envs: []envs.Environment{counter.New(), probe}, DataToken: testDataToken, ControlToken: testToken}
	for _, m := range mod {
		m(&cfg)
	}
	srv, err := envserver.NewServer(cfg)
	require.NoError(t, err, "NewServer")
	hs := testsupport.QuietServer(srv)
	t.Cleanup(hs.Close)
	return &fixture{srv: srv, c: protocol.NewDataClient(hs.URL, testDataToken, hs.Client()), url: hs.URL, probe: probe,
		cc: protocol.NewControlClient(hs.URL, testToken, hs.Client())}
}

// start starts attempt of rollout, authorising the attempt through the
// control plane first when it is above 0 (a start-over).
func (f *fixture) start(t *testing.T, rollout string, attempt int, task string) protocol.StartResponse {
	t.Helper()
	f.authorise(t, rollout, attempt)
	resp, err := f.c.Start(context.Background(), protocol.StartRequest{
		Identity: envtest.ID(rollout, attempt, protocol.SeedRequestID(rollout)), Env: counter.Name, Seed: 1, Task: json.RawMessage(task),
	})
	require.NoError(t, err, "start %s attempt %d", rollout, attempt)
	return resp
}

func inc(rollout string, attempt int, req string, rev int64, amount int) protocol.OperateRequest {
	return protocol.OperateRequest{
		Identity: envtest.ID(rollout, attempt, req), ExpectedRevision: rev, Tool: counter.ToolIncrement,
		Arguments: json.RawMessage(`{"amount":` + strconv.Itoa(amount) + `}`),
	}
}

// authorise installs attempt of rollout through the control plane (a no-op
// for attempt 0, which needs no installing).
func (f *fixture) authorise(t *testing.T, rollout string, attempt int) {
	t.Helper()
	if attempt == 0 {
		return
	}
	_, err := f.cc.Authorise(context.Background(), rollout, attempt)
	require.NoError(t, err, "authorise %s attempt %d", rollout, attempt)
}

func (f *fixture) operate(t *testing.T, req protocol.OperateRequest) protocol.OperateResponse {
	t.Helper()
	resp, err := f.c.Operate(context.Background(), req)
	require.NoError(t, err, "operate %+v", req.Identity)
	return resp
}

func (f *fixture) stats(t *testing.T) protocol.Stats {
	t.Helper()
	st, err := f.c.Stats(context.Background())
	require.NoError(t, err, "stats")
	return st
}

func (f *fixture) info(t *testing.T, rollout string) protocol.SessionInfo {
	t.Helper()
	info, err := f.c.Session(context.Background(), rollout)
	require.NoError(t, err, "session %s", rollout)
	return info
}

// wantRemote checks err is a *RemoteError with status and code, and that
// its message contains every one of contains.
func wantRemote(t *testing.T, err error, status int, code string, contains ...string) {
	t.Helper()
	var re *protocol.RemoteError
	require.ErrorAs(t, err, &re, "error %v is not a RemoteError (want %d %s)", err, status, code)
	require.Equal(t, status, re.Status, "got %d %s (%s), want %d %s", re.Status, re.Code, re.Message, status, code)
	require.Equal(t, code, re.Code, "got %d %s (%s), want %d %s", re.Status, re.Code, re.Message, status, code)
	for _, c := range contains {
		require.Contains(t, re.Message, c, "message %q does not contain %q", re.Message, c)
	}
}

func TestNewServerRefusesBadConfig(t *testing.T) {
	for name, cfg := range map[string]envserver.ServerConfig{
		"nil env":   {Envs: []envs.Environment{nil}},
		"duplicate": {Envs: []envs.Environment{counter.New(), counter.New()}},
	} {
		_, err := envserver.NewServer(cfg)
		assert.Error(t, err, "%s: NewServer accepted it", name)
	}
}

func TestHealthEnvsAndUnknownRoute(t *testing.T) {
	f := newFixture(t)
	var health map[string]bool
	require.NoError(t, f.c.Do(context.Background(), http.MethodGet, "/healthz", nil, &health), "healthz")
	require.True(t, health["ok"], "healthz = %v", health)
	var specs []envs.Spec
	require.NoError(t, f.c.Do(context.Background(), http.MethodGet, "/v1/envs", nil, &specs))
	require.Len(t, specs, 2, "specs = %+v", specs)
	require.Equal(t, "counter", specs[0].Name, "specs = %+v", specs)
	require.Equal(t, "probe", specs[1].Name, "specs = %+v", specs)
	require.Equal(t, envs.ModeExportRestore, specs[0].Mode, "specs = %+v", specs)
	err := f.c.Do(context.Background(), http.MethodGet, "/v1/nothing", nil, nil)
	wantRemote(t, err, http.StatusNotFound, protocol.CodeNotFound, "/v1/nothing")
	st := f.stats(t)
	require.EqualValues(t, 1, st.Refused, "refused = %d, want 1: an authenticated request no route takes is a refusal (R21)", st.Refused)
}

func TestEpisode(t *testing.T) {
	f := newFixture(t)
	st := f.start(t, "r1", 0, `{"target":5,"start":1}`)
	require.Equal(t, int64(0), st.Revision, "start = %+v", st)
	require.Equal(t, counter.Name, st.Spec.Name, "start = %+v", st)
	require.Contains(t, st.Start.Observation, `TASK {"start":1,"target":5}`, "start = %+v", st)
	require.False(t, st.Replayed, "start = %+v", st)
	info := f.info(t, "r1")
	require.Equal(t, protocol.SessionInfo{RolloutID: "r1", Env: "counter", Attempt: 0, Revision: 0}, info, "info")
	r := f.operate(t, inc("r1", 0, "r1/t0/c0", 0, 3))
	require.Equal(t, int64(1), r.Revision, "operate = %+v", r)
	require.Equal(t, "counter=4", r.Outcome.Observation, "operate = %+v", r)
	require.False(t, r.Replayed, "operate = %+v", r)
	r = f.operate(t, inc("r1", 0, "r1/t1/c0", 1, 1))
	require.Equal(t, int64(2), r.Revision, "operate = %+v", r)
	require.Equal(t, "counter=5", r.Outcome.Observation, "operate = %+v", r)
	v, err := f.c.Verify(context.Background(), protocol.VerifyRequest{Identity: envtest.ID("r1", 0, "r1/verify"), ExpectedRevision: 2})
	require.NoError(t, err, "verify = %+v, %v", v, err)
	require.Equal(t, float64(1), v.Verdict.Reward, "verify = %+v, %v", v, err)
	require.Equal(t, int64(2), v.Revision, "verify = %+v, %v", v, err)
	require.Equal(t, `{"value":5,"target":5}`, string(v.Verdict.Details), "verify = %+v, %v", v, err)
	got, want := f.stats(t), (protocol.Stats{Applied: 4})
	require.Equal(t, want, got, "stats = %+v, want %+v", got, want)
}

func TestMalformedRequests(t *testing.T) {
	f := newFixture(t)
	f.start(t, "r1", 0, `{"target":3}`)
	post := func(path, body string) error {
		req, err := http.NewRequest(http.MethodPost, f.url+path, strings.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+testDataToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var eb protocol.ErrorBody
		if err := json.NewDecoder(resp.Body).Decode(&eb); err != nil {
			return err
		}
		return &protocol.RemoteError{Status: resp.StatusCode, Code: eb.Error.Code, Message: eb.Error.Message}
	}
	for _, tc := range []struct {
		name, path, body, field string
	}{
		{"start no rollout", "/v1/sessions", `{"attempt":0,"request_id":"x","env":"counter","task":{"target":1}}`, "rollout_id"},
		{"start empty rollout", "/v1/sessions", `{"rollout_id":"","attempt":0,"request_id":"x","env":"counter","task":{"target":1}}`, "rollout_id"},
		{"start no attempt", "/v1/sessions", `{"rollout_id":"r2","request_id":"x","env":"counter","task":{"target":1}}`, "attempt"},
		{"start no request", "/v1/sessions", `{"rollout_id":"r2","attempt":0,"env":"counter","task":{"target":1}}`, "request_id"},
		{"start no env", "/v1/sessions", `{"rollout_id":"r2","attempt":0,"request_id":"x","task":{"target":1}}`, "env"},
		{"start negative attempt", "/v1/sessions", `{"rollout_id":"r2","attempt":-1,"request_id":"x","env":"counter"}`, "attempt"},
		{"start unknown field", "/v1/sessions", `{"rollout_id":"r2","attempt":0,"request_id":"x","env":"counter","bogus":1}`, "bogus"},
		{"start bad json", "/v1/sessions", `{"rollout_id":`, ""},
		{"start trailing", "/v1/sessions", `{"rollout_id":"r2","attempt":0,"request_id":"x","env":"counter"} {}`, "trailing"},
		{"operate no attempt", "/v1/sessions/r1/operate", `{"rollout_id":"r1","request_id":"a","expected_revision":0,"tool":"increment","arguments":{"amount":1}}`, "attempt"},
		{"operate no request", "/v1/sessions/r1/operate", `{"rollout_id":"r1","attempt":0,"expected_revision":0,"tool":"increment"}`, "request_id"},
		{"operate no revision", "/v1/sessions/r1/operate", `{"rollout_id":"r1","attempt":0,"request_id":"a","tool":"increment"}`, "expected_revision"},
		{"operate no tool", "/v1/sessions/r1/operate", `{"rollout_id":"r1","attempt":0,"request_id":"a","expected_revision":0}`, "tool"},
		{"operate path mismatch", "/v1/sessions/r1/operate", `{"rollout_id":"r9","attempt":0,"request_id":"a","expected_revision":0,"tool":"increment"}`, "r9"},
		{"operate wrong type", "/v1/sessions/r1/operate", `{"rollout_id":"r1","attempt":"0","request_id":"a","expected_revision":0,"tool":"increment"}`, "attempt"},
		{"verify no rollout", "/v1/sessions/r1/verify", `{"attempt":0,"request_id":"v","expected_revision":0}`, "rollout_id"},
		{"verify unknown field", "/v1/sessions/r1/verify", `{"rollout_id":"r1","attempt":0,"request_id":"v","expected_revision":0,"tool":"x"}`, "tool"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := f.stats(t)
			wantRemote(t, post(tc.path, tc.body), http.StatusBadRequest, protocol.CodeMalformed, tc.field)
			after := f.stats(t)
			require.Equal(t, before.Refused+1, after.Refused, "stats %+v -> %+v", before, after)
			require.Equal(t, before.Applied, after.Applied, "stats %+v -> %+v", before, after)
		})
	}
	info := f.info(t, "r1")
	require.Equal(t, int64(0), info.Revision, "malformed requests changed the session: %+v", info)
	require.False(t, info.Retired, "malformed requests changed the session: %+v", info)
	_, err := f.c.Session(context.Background(), "r2")
	require.Error(t, err, "a malformed start created a session")
}

func TestReceiptsReplayAndConflict(t *testing.T) {
	f := newFixture(t)
	f.start(t, "r1", 0, `{"target":9}`)
	first := f.operate(t, inc("r1", 0, "r1/t0/c0", 0, 2))

	// The start replays too (from the session's attempt: a start from a
	// higher attempt is a start-over, see TestStartOverAndSameAttemptConflict).
	sr, err := f.c.Start(context.Background(), protocol.StartRequest{
		Identity: envtest.ID("r1", 0, "r1/seed"), Env: counter.Name, Seed: 1, Task: json.RawMessage(`{"target":9}`),
	})
	require.NoError(t, err, "start replay = %+v, %v", sr, err)
	require.True(t, sr.Replayed, "start replay = %+v, %v", sr, err)
	require.Equal(t, int64(0), sr.Revision, "start replay = %+v, %v", sr, err)
	require.Equal(t, int64(1), f.info(t, "r1").Revision, "start replay reset the session")

	// The same request again, even with differently formatted arguments,
	// replays the stored response (a higher attempt replays too once it is
	// installed: TestRestore…, where receipts travel with the checkpoint).
	again := inc("r1", 0, "r1/t0/c0", 0, 2)
	again.Arguments = json.RawMessage(`{ "amount" : 2 }`)
	for range 2 {
		r := f.operate(t, again)
		require.True(t, r.Replayed, "replay = %+v, first = %+v", r, first)
		require.Equal(t, first.Revision, r.Revision, "replay = %+v, first = %+v", r, first)
		require.Equal(t, first.Outcome, r.Outcome, "replay = %+v, first = %+v", r, first)
	}
	st := f.stats(t)
	require.Equal(t, int64(2), st.Applied, "stats = %+v, want 2 applied (start, op) and 3 replayed", st)
	require.Equal(t, int64(3), st.Replayed, "stats = %+v, want 2 applied (start, op) and 3 replayed", st)
	info := f.info(t, "r1")
	require.Equal(t, int64(1), info.Revision, "replays advanced the revision: %+v", info)

	// Same request id, different body: conflict, nothing applied.
	_, err = f.c.Operate(context.Background(), inc("r1", 0, "r1/t0/c0", 0, 3))
	wantRemote(t, err, http.StatusConflict, protocol.CodeRequestConflict, "r1/t0/c0")
	// A request id used for a start cannot be reused for an operate.
	_, err = f.c.Operate(context.Background(), inc("r1", 0, protocol.SeedRequestID("r1"), 1, 1))
	wantRemote(t, err, http.StatusConflict, protocol.CodeRequestConflict)
	st = f.stats(t)
	require.Equal(t, int64(2), st.Applied, "stats after conflicts = %+v", st)
	require.Equal(t, int64(3), st.Replayed, "stats after conflicts = %+v", st)
	require.Equal(t, int64(2), st.Refused, "stats after conflicts = %+v", st)
}

func TestRevisionMismatch(t *testing.T) {
	f := newFixture(t)
	f.start(t, "r1", 0, `{"target":9}`)
	f.operate(t, inc("r1", 0, "a", 0, 1))
	_, err := f.c.Operate(context.Background(), inc("r1", 0, "b", 5, 1))
	wantRemote(t, err, http.StatusConflict, protocol.CodeRevisionMismatch, "expected revision 5", "revision 1")
	_, err = f.c.Verify(context.Background(), protocol.VerifyRequest{Identity: envtest.ID("r1", 0, "v"), ExpectedRevision: 0})
	wantRemote(t, err, http.StatusConflict, protocol.CodeRevisionMismatch)
	// Not stored: the same request id with the right revision now applies.
	r := f.operate(t, inc("r1", 0, "b", 1, 1))
	require.False(t, r.Replayed, "operate after mismatch = %+v", r)
	require.Equal(t, int64(2), r.Revision, "operate after mismatch = %+v", r)
	require.Equal(t, "counter=2", r.Outcome.Observation, "operate after mismatch = %+v", r)
}

func TestFencing(t *testing.T) {
	f := newFixture(t)
	f.start(t, "r1", 0, `{"target":9}`)
	f.operate(t, inc("r1", 0, "r1/t0/c0", 0, 1))

	// The control plane installs attempt 1 (a start-over): attempt 0's
	// session is dropped and attempt 0 is fenced out.
	a, err := f.cc.Authorise(context.Background(), "r1", 1)
	require.NoError(t, err, "authorise")
	require.True(t, a.Changed, "authorise = %+v", a)
	require.True(t, a.Dropped, "authorise = %+v", a)
	require.Equal(t, 1, a.Fence, "authorise = %+v", a)
	before := f.stats(t)
	_, err = f.c.Operate(context.Background(), inc("r1", 0, "r1/t2/c0", 1, 1))
	wantRemote(t, err, http.StatusConflict, protocol.CodeStaleAttempt, "attempt 0", "attempt 1")
	// Even a replay from the stale attempt is refused.
	_, err = f.c.Operate(context.Background(), inc("r1", 0, "r1/t0/c0", 0, 1))
	wantRemote(t, err, http.StatusConflict, protocol.CodeStaleAttempt)
	_, err = f.c.Verify(context.Background(), protocol.VerifyRequest{Identity: envtest.ID("r1", 0, "r1/verify"), ExpectedRevision: 1})
	wantRemote(t, err, http.StatusConflict, protocol.CodeStaleAttempt)
	_, err = f.c.Start(context.Background(), protocol.StartRequest{Identity: envtest.ID("r1", 0, "r1/seed"), Env: "counter", Task: json.RawMessage(`{"target":9}`)})
	wantRemote(t, err, http.StatusConflict, protocol.CodeStaleAttempt)
	after := f.stats(t)
	require.Equal(t, before.Applied, after.Applied, "stats %+v -> %+v", before, after)
	require.Equal(t, before.Replayed, after.Replayed, "stats %+v -> %+v", before, after)
	require.Equal(t, before.Refused+4, after.Refused, "stats %+v -> %+v", before, after)
	require.Equal(t, 0, after.Sessions, "stats %+v -> %+v", before, after)
	// Attempt 1 starts over: a fresh episode.
	st := f.start(t, "r1", 1, `{"target":9}`)
	require.False(t, st.Replayed, "start-over = %+v", st)
	require.Equal(t, int64(0), st.Revision, "start-over = %+v", st)
}

func TestStartOverAndSameAttemptConflict(t *testing.T) {
	f := newFixture(t)
	f.start(t, "r1", 0, `{"target":9}`)
	f.operate(t, inc("r1", 0, "r1/t0/c0", 0, 4))

	_, err := f.c.Start(context.Background(), protocol.StartRequest{Identity: envtest.ID("r1", 0, "another-seed"), Env: "counter", Task: json.RawMessage(`{"target":9}`)})
	wantRemote(t, err, http.StatusConflict, protocol.CodeRequestConflict)

	// Attempt 2 is not installed: the data plane cannot start it.
	_, err = f.c.Start(context.Background(), protocol.StartRequest{Identity: envtest.ID("r1", 2, "r1/seed"), Env: "counter", Task: json.RawMessage(`{"target":9}`)})
	wantRemote(t, err, http.StatusConflict, protocol.CodeAttemptNotInstalled)
	kept := f.info(t, "r1")
	require.Equal(t, 0, kept.Attempt, "a refused start-over changed the session: %+v", kept)
	require.Equal(t, int64(1), kept.Revision, "a refused start-over changed the session: %+v", kept)
	// Installed through the control plane, attempt 2 starts over with the
	// same seed request: a fresh episode, not a replay.
	st := f.start(t, "r1", 2, `{"target":9}`)
	require.False(t, st.Replayed, "start-over = %+v", st)
	require.Equal(t, int64(0), st.Revision, "start-over = %+v", st)
	info := f.info(t, "r1")
	require.Equal(t, 2, info.Attempt, "after start-over: %+v", info)
	require.Equal(t, int64(0), info.Revision, "after start-over: %+v", info)
	// The old request ids belong to the old episode: they apply anew.
	r := f.operate(t, inc("r1", 2, "r1/t0/c0", 0, 4))
	require.False(t, r.Replayed, "operate after start-over = %+v", r)
	require.Equal(t, "counter=4", r.Outcome.Observation, "operate after start-over = %+v", r)
	require.Equal(t, int64(1), r.Revision, "operate after start-over = %+v", r)
	// Attempt 1 is now fenced.
	_, err = f.c.Operate(context.Background(), inc("r1", 1, "r1/t1/c0", 1, 1))
	wantRemote(t, err, http.StatusConflict, protocol.CodeStaleAttempt)
	require.Equal(t, 1, f.stats(t).Sessions, "sessions")
}

func TestStartOverClosesOldSession(t *testing.T) {
	f := newFixture(t)
	start := func(attempt int) {
		f.authorise(t, "p", attempt)
		_, err := f.c.Start(context.Background(), protocol.StartRequest{Identity: envtest.ID("p", attempt, "p/seed"), Env: "probe", Task: json.RawMessage(`{"target":1}`)})
		require.NoError(t, err)
	}
	start(0)
	start(1)
	n := f.probe.closed.Load()
	require.Equal(t, int64(1), n, "closed %d sessions, want 1", n)
}

func TestVerifyIsTerminal(t *testing.T) {
	f := newFixture(t)
	_, err := f.c.Start(context.Background(), protocol.StartRequest{Identity: envtest.ID("p", 0, "p/seed"), Env: "probe", Task: json.RawMessage(`{"target":1}`)})
	require.NoError(t, err)
	f.operate(t, protocol.OperateRequest{Identity: envtest.ID("p", 0, "p/t0/c0"), Tool: "increment", Arguments: json.RawMessage(`{"amount":1}`)})
	vreq := protocol.VerifyRequest{Identity: envtest.ID("p", 0, "p/verify"), ExpectedRevision: 1}
	v, err := f.c.Verify(context.Background(), vreq)
	require.NoError(t, err, "verify = %+v, %v", v, err)
	require.Equal(t, float64(1), v.Verdict.Reward, "verify = %+v, %v", v, err)
	require.False(t, v.Replayed, "verify = %+v, %v", v, err)
	require.Equal(t, int64(1), f.probe.closed.Load(), "sessions verify closed")
	info := f.info(t, "p")
	require.True(t, info.Retired, "info = %+v", info)
	require.Equal(t, int64(1), info.Revision, "info = %+v", info)
	st := f.stats(t)
	require.Equal(t, 0, st.Sessions, "live sessions = %d after verify", st.Sessions)
	_, err = f.c.Operate(context.Background(), protocol.OperateRequest{Identity: envtest.ID("p", 0, "p/t1/c0"), ExpectedRevision: 1, Tool: "increment", Arguments: json.RawMessage(`{"amount":1}`)})
	wantRemote(t, err, http.StatusConflict, protocol.CodeSessionRetired)
	// Replays still work after retirement.
	for range 2 {
		again, err := f.c.Verify(context.Background(), vreq)
		require.NoError(t, err, "verify replay = %+v, %v", again, err)
		require.True(t, again.Replayed, "verify replay = %+v, %v", again, err)
		require.Equal(t, float64(1), again.Verdict.Reward, "verify replay = %+v, %v", again, err)
		require.Equal(t, string(v.Verdict.Details), string(again.Verdict.Details), "verify replay = %+v, %v", again, err)
	}
	op, err := f.c.Operate(context.Background(), protocol.OperateRequest{Identity: envtest.ID("p", 0, "p/t0/c0"), Tool: "increment", Arguments: json.RawMessage(`{"amount":1}`)})
	require.NoError(t, err, "operate replay after retirement = %+v, %v", op, err)
	require.True(t, op.Replayed, "operate replay after retirement = %+v, %v", op, err)
	// A different verify request on a retired session is refused.
	_, err = f.c.Verify(context.Background(), protocol.VerifyRequest{Identity: envtest.ID("p", 0, "p/verify2"), ExpectedRevision: 1})
	wantRemote(t, err, http.StatusConflict, protocol.CodeSessionRetired)
	// The fence outlives the session.
	f.authorise(t, "p", 3)
	_, err = f.c.Verify(context.Background(), protocol.VerifyRequest{Identity: envtest.ID("p", 2, "p/verify"), ExpectedRevision: 1})
	wantRemote(t, err, http.StatusConflict, protocol.CodeStaleAttempt)
	n := f.probe.closed.Load()
	require.Equal(t, int64(1), n, "closed %d times, want 1", n)
}

func TestUnknowns(t *testing.T) {
	f := newFixture(t)
	_, err := f.c.Start(context.Background(), protocol.StartRequest{Identity: envtest.ID("r1", 0, "s"), Env: "nope", Task: json.RawMessage(`{}`)})
	wantRemote(t, err, http.StatusNotFound, protocol.CodeUnknownEnv, "nope")
	_, err = f.c.Operate(context.Background(), inc("r1", 0, "a", 0, 1))
	wantRemote(t, err, http.StatusNotFound, protocol.CodeUnknownSession, "r1")
	_, err = f.c.Verify(context.Background(), protocol.VerifyRequest{Identity: envtest.ID("r1", 0, "v")})
	wantRemote(t, err, http.StatusNotFound, protocol.CodeUnknownSession)
	_, err = f.c.Session(context.Background(), "r1")
	wantRemote(t, err, http.StatusNotFound, protocol.CodeUnknownSession)
	st := f.stats(t)
	require.Equal(t, int64(4), st.Refused, "stats = %+v", st)
	require.Equal(t, int64(0), st.Applied, "stats = %+v", st)
}

func TestEnvironmentRefusals(t *testing.T) {
	f := newFixture(t)
	_, err := f.c.Start(context.Background(), protocol.StartRequest{Identity: envtest.ID("r1", 0, "s"), Env: "counter", Task: json.RawMessage(`{"target":-1}`)})
	wantRemote(t, err, http.StatusUnprocessableEntity, envs.CodeBadTask, "target")
	_, err = f.c.Session(context.Background(), "r1")
	wantRemote(t, err, http.StatusNotFound, protocol.CodeUnknownSession)

	f.start(t, "r1", 0, `{"target":5}`)
	bad := inc("r1", 0, "r1/t0/c0", 0, 1)
	bad.Arguments = json.RawMessage(`{"amount":50}`)
	_, err = f.c.Operate(context.Background(), bad)
	wantRemote(t, err, http.StatusUnprocessableEntity, envs.CodeBadArguments, "50")
	bad.Tool = "decrement"
	_, err = f.c.Operate(context.Background(), bad)
	wantRemote(t, err, http.StatusUnprocessableEntity, envs.CodeUnknownTool)
	info := f.info(t, "r1")
	require.Equal(t, int64(0), info.Revision, "a refusal changed the revision: %+v", info)
	// Refusals are not receipts: the same request id with a good body applies.
	r := f.operate(t, inc("r1", 0, "r1/t0/c0", 0, 2))
	require.False(t, r.Replayed, "operate after refusal = %+v", r)
	require.Equal(t, "counter=2", r.Outcome.Observation, "operate after refusal = %+v", r)
	require.Equal(t, int64(1), r.Revision, "operate after refusal = %+v", r)
	st := f.stats(t)
	require.Equal(t, int64(4), st.Refused, "stats = %+v", st)
	require.Equal(t, int64(2), st.Applied, "stats = %+v", st)
}

func TestInternalEnvironmentFailure(t *testing.T) {
	f := newFixture(t)
	_, err := f.c.Start(context.Background(), protocol.StartRequest{Identity: envtest.ID("p", 0, "s"), Env: "probe", Task: json.RawMessage(`{"target":1}`)})
	require.NoError(t, err)
	_, err = f.c.Operate(context.Background(), protocol.OperateRequest{Identity: envtest.ID("p", 0, "x"), Tool: "explode"})
	wantRemote(t, err, http.StatusInternalServerError, protocol.CodeInternal, "boom")
	info := f.info(t, "p")
	require.Equal(t, int64(0), info.Revision, "a failed operation changed the revision: %+v", info)
}

func TestErrorsAreJSON(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct{ method, path, body string }{
		{http.MethodPost, "/v1/sessions", `not json`},
		{http.MethodGet, "/v1/sessions/none", ``},
		{http.MethodDelete, "/v1/stats", ``},
	} {
		req, _ := http.NewRequest(tc.method, f.url+tc.path, strings.NewReader(tc.body))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var eb protocol.ErrorBody
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		require.GreaterOrEqual(t, resp.StatusCode, 400, "%s %s: %d %s is not an error body", tc.method, tc.path, resp.StatusCode, data)
		require.NoError(t, dec.Decode(&eb), "%s %s: %d %s is not an error body", tc.method, tc.path, resp.StatusCode, data)
		require.NotEqual(t, "", eb.Error.Code, "%s %s: %d %s is not an error body", tc.method, tc.path, resp.StatusCode, data)
		require.NotEqual(t, "", eb.Error.Message, "%s %s: %d %s is not an error body", tc.method, tc.path, resp.StatusCode, data)
		ct := resp.Header.Get("Content-Type")
		assert.Equal(t, "application/json", ct, "%s %s: content type %q", tc.method, tc.path, ct)
	}
}

func TestRetiredSessionsAreBounded(t *testing.T) {
	f := newFixture(t, func(c *envserver.ServerConfig) { c.RetiredSessions = 2 })
	verify := func(rollout string, attempt int) (protocol.VerifyResponse, error) {
		return f.c.Verify(context.Background(), protocol.VerifyRequest{Identity: envtest.ID(rollout, attempt, rollout+"/verify")})
	}
	for _, r := range []string{"a", "b", "c"} {
		f.start(t, r, 0, `{"target":0}`)
		_, err := verify(r, 0)
		require.NoError(t, err)
	}
	// "a" was evicted: its verdict cannot be replayed, but it fails closed.
	_, err := verify("a", 0)
	wantRemote(t, err, http.StatusConflict, protocol.CodeSessionRetired, "dropped")
	_, err = f.c.Start(context.Background(), protocol.StartRequest{Identity: envtest.ID("a", 0, "a/seed"), Env: "counter", Task: json.RawMessage(`{"target":0}`)})
	wantRemote(t, err, http.StatusConflict, protocol.CodeSessionRetired)
	info := f.info(t, "a")
	require.True(t, info.Retired, "evicted info = %+v", info)
	require.Equal(t, "counter", info.Env, "evicted info = %+v", info)
	for _, r := range []string{"b", "c"} {
		v, err := verify(r, 0)
		require.NoError(t, err, "%s: verify replay = %+v, %v", r, v, err)
		require.True(t, v.Replayed, "%s: verify replay = %+v, %v", r, v, err)
	}
	// A higher attempt may start over.
	st := f.start(t, "a", 1, `{"target":0}`)
	require.False(t, st.Replayed, "start-over after eviction replayed: %+v", st)
}

func TestRolloutIDWithSlash(t *testing.T) {
	f := newFixture(t)
	const rid = "set-1/rollout 7"
	f.start(t, rid, 0, `{"target":2}`)
	r := f.operate(t, inc(rid, 0, protocol.OperateRequestID(rid, 0, 0), 0, 2))
	require.Equal(t, "counter=2", r.Outcome.Observation, "operate = %+v", r)
	info := f.info(t, rid)
	require.Equal(t, rid, info.RolloutID, "info = %+v", info)
	require.Equal(t, int64(1), info.Revision, "info = %+v", info)
}

// TestLostReplyIsReplayed kills the reply at the failpoint (the panic drops
// the connection, as a crash would) and checks the mutation was already
// applied and recorded: the retry is a replay.
func TestLostReplyIsReplayed(t *testing.T) {
	fp, err := failpoint.Parse(failpoint.EnvAfterApplyBeforeReply + "=kill@2")
	require.NoError(t, err)
	var fired atomic.Int64
	fp.SetKill(func() {
		fired.Add(1)
		panic(http.ErrAbortHandler)
	})
	f := newFixture(t, func(c *envserver.ServerConfig) { c.Failpoints = fp })
	f.start(t, "r1", 0, `{"target":5}`) // 1st pass
	req := inc("r1", 0, "r1/t0/c0", 0, 3)
	_, err = f.c.Operate(context.Background(), req) // 2nd pass: reply lost
	require.Error(t, err, "the reply was not lost")
	require.Equal(t, int64(1), fired.Load(), "failpoint fired %d times", fired.Load())
	r := f.operate(t, req)
	require.True(t, r.Replayed, "retry = %+v", r)
	require.Equal(t, int64(1), r.Revision, "retry = %+v", r)
	require.Equal(t, "counter=3", r.Outcome.Observation, "retry = %+v", r)
	st := f.stats(t)
	require.Equal(t, int64(2), st.Applied, "stats = %+v", st)
	require.Equal(t, int64(1), st.Replayed, "stats = %+v", st)
}

// TestConcurrentRollouts runs many rollouts in parallel, each with several
// goroutines racing the same requests; every request id must be applied
// exactly once.
func TestConcurrentRollouts(t *testing.T) {
	f := newFixture(t)
	const rollouts, racers, steps = 8, 4, 6
	var wg sync.WaitGroup
	errs := make(chan error, rollouts*racers)
	for r := 0; r < rollouts; r++ {
		rid := "r" + strconv.Itoa(r)
		for g := 0; g < racers; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx := context.Background()
				if _, err := f.c.Start(ctx, protocol.StartRequest{Identity: envtest.ID(rid, 0, protocol.SeedRequestID(rid)), Env: "counter", Task: json.RawMessage(`{"target":6}`)}); err != nil {
					errs <- err
					return
				}
				for s := 0; s < steps; s++ {
					resp, err := f.c.Operate(ctx, inc(rid, 0, protocol.OperateRequestID(rid, s, 0), int64(s), 1))
					if err != nil {
						errs <- err
						return
					}
					if want := "counter=" + strconv.Itoa(s+1); resp.Outcome.Observation != want || resp.Revision != int64(s+1) {
						errs <- errors.New(rid + ": got " + resp.Outcome.Observation + ", want " + want)
						return
					}
				}
				v, err := f.c.Verify(ctx, protocol.VerifyRequest{Identity: envtest.ID(rid, 0, protocol.VerifyRequestID(rid)), ExpectedRevision: steps})
				if err != nil || v.Verdict.Reward != 1 {
					errs <- errors.New(rid + ": verify failed")
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err)
	}
	st := f.stats(t)
	perRollout := int64(1 + steps + 1)
	require.Equal(t, rollouts*perRollout, st.Applied, "stats = %+v, want %d applied and %d replayed", st, rollouts*perRollout, rollouts*(racers-1)*perRollout)
	require.Equal(t, rollouts*(racers-1)*perRollout, st.Replayed, "stats = %+v, want %d applied and %d replayed", st, rollouts*perRollout, rollouts*(racers-1)*perRollout)
	require.Equal(t, 0, st.Sessions, "stats = %+v, want %d applied and %d replayed", st, rollouts*perRollout, rollouts*(racers-1)*perRollout)
}
