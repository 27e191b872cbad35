package envserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/internal/failpoint"
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
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	hs := httptest.NewUnstartedServer(srv)
	hs.Config.ErrorLog = log.New(io.Discard, "", 0)
	hs.Start()
	t.Cleanup(hs.Close)
	return &fixture{srv: srv, c: protocol.NewDataClient(hs.URL, testDataToken, hs.Client()), url: hs.URL, probe: probe,
		cc: protocol.NewControlClient(hs.URL, testToken, hs.Client())}
}

func id(rollout string, attempt int, req string) protocol.Identity {
	return protocol.Identity{RolloutID: rollout, Attempt: attempt, RequestID: req}
}

// start starts attempt of rollout, authorising the attempt through the
// control plane first when it is above 0 (a start-over).
func (f *fixture) start(t *testing.T, rollout string, attempt int, task string) protocol.StartResponse {
	t.Helper()
	f.authorise(t, rollout, attempt)
	resp, err := f.c.Start(context.Background(), protocol.StartRequest{
		Identity: id(rollout, attempt, protocol.SeedRequestID(rollout)), Env: counter.Name, Seed: 1, Task: json.RawMessage(task),
	})
	if err != nil {
		t.Fatalf("start %s attempt %d: %v", rollout, attempt, err)
	}
	return resp
}

func inc(rollout string, attempt int, req string, rev int64, amount int) protocol.OperateRequest {
	return protocol.OperateRequest{
		Identity: id(rollout, attempt, req), ExpectedRevision: rev, Tool: counter.ToolIncrement,
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
	if _, err := f.cc.Authorise(context.Background(), rollout, attempt); err != nil {
		t.Fatalf("authorise %s attempt %d: %v", rollout, attempt, err)
	}
}

func (f *fixture) operate(t *testing.T, req protocol.OperateRequest) protocol.OperateResponse {
	t.Helper()
	resp, err := f.c.Operate(context.Background(), req)
	if err != nil {
		t.Fatalf("operate %+v: %v", req.Identity, err)
	}
	return resp
}

func (f *fixture) stats(t *testing.T) protocol.Stats {
	t.Helper()
	st, err := f.c.Stats(context.Background())
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	return st
}

func (f *fixture) info(t *testing.T, rollout string) protocol.SessionInfo {
	t.Helper()
	info, err := f.c.Session(context.Background(), rollout)
	if err != nil {
		t.Fatalf("session %s: %v", rollout, err)
	}
	return info
}

// wantRemote checks err is a *RemoteError with status and code, and that
// its message contains every one of contains.
func wantRemote(t *testing.T, err error, status int, code string, contains ...string) {
	t.Helper()
	var re *protocol.RemoteError
	if !errors.As(err, &re) {
		t.Fatalf("error %v is not a RemoteError (want %d %s)", err, status, code)
	}
	if re.Status != status || re.Code != code {
		t.Fatalf("got %d %s (%s), want %d %s", re.Status, re.Code, re.Message, status, code)
	}
	for _, c := range contains {
		if !strings.Contains(re.Message, c) {
			t.Fatalf("message %q does not contain %q", re.Message, c)
		}
	}
}

func TestNewServerRefusesBadConfig(t *testing.T) {
	for name, cfg := range map[string]envserver.ServerConfig{
		"nil env":   {Envs: []envs.Environment{nil}},
		"duplicate": {Envs: []envs.Environment{counter.New(), counter.New()}},
	} {
		if _, err := envserver.NewServer(cfg); err == nil {
			t.Errorf("%s: NewServer accepted it", name)
		}
	}
}

func TestHealthEnvsAndUnknownRoute(t *testing.T) {
	f := newFixture(t)
	var health map[string]bool
	if err := f.c.Do(context.Background(), http.MethodGet, "/healthz", nil, &health); err != nil || !health["ok"] {
		t.Fatalf("healthz = %v, %v", health, err)
	}
	var specs []envs.Spec
	if err := f.c.Do(context.Background(), http.MethodGet, "/v1/envs", nil, &specs); err != nil {
		t.Fatal(err)
	}
	if len(specs) != 2 || specs[0].Name != "counter" || specs[1].Name != "probe" || specs[0].Mode != envs.ModeExportRestore {
		t.Fatalf("specs = %+v", specs)
	}
	err := f.c.Do(context.Background(), http.MethodGet, "/v1/nothing", nil, nil)
	wantRemote(t, err, http.StatusNotFound, protocol.CodeNotFound, "/v1/nothing")
	if st := f.stats(t); st.Refused != 1 {
		t.Fatalf("refused = %d, want 1", st.Refused)
	}
}

func TestEpisode(t *testing.T) {
	f := newFixture(t)
	st := f.start(t, "r1", 0, `{"target":5,"start":1}`)
	if st.Revision != 0 || st.Spec.Name != counter.Name || !strings.Contains(st.Start.Observation, `TASK {"start":1,"target":5}`) || st.Replayed {
		t.Fatalf("start = %+v", st)
	}
	if info := f.info(t, "r1"); info != (protocol.SessionInfo{RolloutID: "r1", Env: "counter", Attempt: 0, Revision: 0}) {
		t.Fatalf("info = %+v", info)
	}
	r := f.operate(t, inc("r1", 0, "r1/t0/c0", 0, 3))
	if r.Revision != 1 || r.Outcome.Observation != "counter=4" || r.Replayed {
		t.Fatalf("operate = %+v", r)
	}
	r = f.operate(t, inc("r1", 0, "r1/t1/c0", 1, 1))
	if r.Revision != 2 || r.Outcome.Observation != "counter=5" {
		t.Fatalf("operate = %+v", r)
	}
	v, err := f.c.Verify(context.Background(), protocol.VerifyRequest{Identity: id("r1", 0, "r1/verify"), ExpectedRevision: 2})
	if err != nil || v.Verdict.Reward != 1 || v.Revision != 2 || string(v.Verdict.Details) != `{"value":5,"target":5}` {
		t.Fatalf("verify = %+v, %v", v, err)
	}
	if got, want := f.stats(t), (protocol.Stats{Applied: 4}); got != want {
		t.Fatalf("stats = %+v, want %+v", got, want)
	}
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
			if after.Refused != before.Refused+1 || after.Applied != before.Applied {
				t.Fatalf("stats %+v -> %+v", before, after)
			}
		})
	}
	if info := f.info(t, "r1"); info.Revision != 0 || info.Retired {
		t.Fatalf("malformed requests changed the session: %+v", info)
	}
	if _, err := f.c.Session(context.Background(), "r2"); err == nil {
		t.Fatal("a malformed start created a session")
	}
}

func TestReceiptsReplayAndConflict(t *testing.T) {
	f := newFixture(t)
	f.start(t, "r1", 0, `{"target":9}`)
	first := f.operate(t, inc("r1", 0, "r1/t0/c0", 0, 2))

	// The start replays too (from the session's attempt: a start from a
	// higher attempt is a start-over, see TestStartOverAndSameAttemptConflict).
	sr, err := f.c.Start(context.Background(), protocol.StartRequest{
		Identity: id("r1", 0, "r1/seed"), Env: counter.Name, Seed: 1, Task: json.RawMessage(`{"target":9}`),
	})
	if err != nil || !sr.Replayed || sr.Revision != 0 {
		t.Fatalf("start replay = %+v, %v", sr, err)
	}
	if info := f.info(t, "r1"); info.Revision != 1 {
		t.Fatalf("start replay reset the session: %+v", info)
	}

	// The same request again, even with differently formatted arguments,
	// replays the stored response (a higher attempt replays too once it is
	// installed: TestRestore…, where receipts travel with the checkpoint).
	again := inc("r1", 0, "r1/t0/c0", 0, 2)
	again.Arguments = json.RawMessage(`{ "amount" : 2 }`)
	for range 2 {
		r := f.operate(t, again)
		if !r.Replayed || r.Revision != first.Revision || r.Outcome != first.Outcome {
			t.Fatalf("replay = %+v, first = %+v", r, first)
		}
	}
	st := f.stats(t)
	if st.Applied != 2 || st.Replayed != 3 {
		t.Fatalf("stats = %+v, want 2 applied (start, op) and 3 replayed", st)
	}
	if info := f.info(t, "r1"); info.Revision != 1 {
		t.Fatalf("replays advanced the revision: %+v", info)
	}

	// Same request id, different body: conflict, nothing applied.
	_, err = f.c.Operate(context.Background(), inc("r1", 0, "r1/t0/c0", 0, 3))
	wantRemote(t, err, http.StatusConflict, protocol.CodeRequestConflict, "r1/t0/c0")
	// A request id used for a start cannot be reused for an operate.
	_, err = f.c.Operate(context.Background(), inc("r1", 0, protocol.SeedRequestID("r1"), 1, 1))
	wantRemote(t, err, http.StatusConflict, protocol.CodeRequestConflict)
	if st := f.stats(t); st.Applied != 2 || st.Replayed != 3 || st.Refused != 2 {
		t.Fatalf("stats after conflicts = %+v", st)
	}
}

func TestRevisionMismatch(t *testing.T) {
	f := newFixture(t)
	f.start(t, "r1", 0, `{"target":9}`)
	f.operate(t, inc("r1", 0, "a", 0, 1))
	_, err := f.c.Operate(context.Background(), inc("r1", 0, "b", 5, 1))
	wantRemote(t, err, http.StatusConflict, protocol.CodeRevisionMismatch, "expected revision 5", "revision 1")
	_, err = f.c.Verify(context.Background(), protocol.VerifyRequest{Identity: id("r1", 0, "v"), ExpectedRevision: 0})
	wantRemote(t, err, http.StatusConflict, protocol.CodeRevisionMismatch)
	// Not stored: the same request id with the right revision now applies.
	r := f.operate(t, inc("r1", 0, "b", 1, 1))
	if r.Replayed || r.Revision != 2 || r.Outcome.Observation != "counter=2" {
		t.Fatalf("operate after mismatch = %+v", r)
	}
}

func TestFencing(t *testing.T) {
	f := newFixture(t)
	f.start(t, "r1", 0, `{"target":9}`)
	f.operate(t, inc("r1", 0, "r1/t0/c0", 0, 1))

	// The control plane installs attempt 1 (a start-over): attempt 0's
	// session is dropped and attempt 0 is fenced out.
	if a, err := f.cc.Authorise(context.Background(), "r1", 1); err != nil || !a.Changed || !a.Dropped || a.Fence != 1 {
		t.Fatalf("authorise = %+v, %v", a, err)
	}
	before := f.stats(t)
	_, err := f.c.Operate(context.Background(), inc("r1", 0, "r1/t2/c0", 1, 1))
	wantRemote(t, err, http.StatusConflict, protocol.CodeStaleAttempt, "attempt 0", "attempt 1")
	// Even a replay from the stale attempt is refused.
	_, err = f.c.Operate(context.Background(), inc("r1", 0, "r1/t0/c0", 0, 1))
	wantRemote(t, err, http.StatusConflict, protocol.CodeStaleAttempt)
	_, err = f.c.Verify(context.Background(), protocol.VerifyRequest{Identity: id("r1", 0, "r1/verify"), ExpectedRevision: 1})
	wantRemote(t, err, http.StatusConflict, protocol.CodeStaleAttempt)
	_, err = f.c.Start(context.Background(), protocol.StartRequest{Identity: id("r1", 0, "r1/seed"), Env: "counter", Task: json.RawMessage(`{"target":9}`)})
	wantRemote(t, err, http.StatusConflict, protocol.CodeStaleAttempt)
	if after := f.stats(t); after.Applied != before.Applied || after.Replayed != before.Replayed || after.Refused != before.Refused+4 || after.Sessions != 0 {
		t.Fatalf("stats %+v -> %+v", before, after)
	}
	// Attempt 1 starts over: a fresh episode.
	if st := f.start(t, "r1", 1, `{"target":9}`); st.Replayed || st.Revision != 0 {
		t.Fatalf("start-over = %+v", st)
	}
}

func TestStartOverAndSameAttemptConflict(t *testing.T) {
	f := newFixture(t)
	f.start(t, "r1", 0, `{"target":9}`)
	f.operate(t, inc("r1", 0, "r1/t0/c0", 0, 4))

	_, err := f.c.Start(context.Background(), protocol.StartRequest{Identity: id("r1", 0, "another-seed"), Env: "counter", Task: json.RawMessage(`{"target":9}`)})
	wantRemote(t, err, http.StatusConflict, protocol.CodeRequestConflict)

	// Attempt 2 is not installed: the data plane cannot start it.
	_, err = f.c.Start(context.Background(), protocol.StartRequest{Identity: id("r1", 2, "r1/seed"), Env: "counter", Task: json.RawMessage(`{"target":9}`)})
	wantRemote(t, err, http.StatusConflict, protocol.CodeAttemptNotInstalled)
	if info := f.info(t, "r1"); info.Attempt != 0 || info.Revision != 1 {
		t.Fatalf("a refused start-over changed the session: %+v", info)
	}
	// Installed through the control plane, attempt 2 starts over with the
	// same seed request: a fresh episode, not a replay.
	st := f.start(t, "r1", 2, `{"target":9}`)
	if st.Replayed || st.Revision != 0 {
		t.Fatalf("start-over = %+v", st)
	}
	if info := f.info(t, "r1"); info.Attempt != 2 || info.Revision != 0 {
		t.Fatalf("after start-over: %+v", info)
	}
	// The old request ids belong to the old episode: they apply anew.
	r := f.operate(t, inc("r1", 2, "r1/t0/c0", 0, 4))
	if r.Replayed || r.Outcome.Observation != "counter=4" || r.Revision != 1 {
		t.Fatalf("operate after start-over = %+v", r)
	}
	// Attempt 1 is now fenced.
	_, err = f.c.Operate(context.Background(), inc("r1", 1, "r1/t1/c0", 1, 1))
	wantRemote(t, err, http.StatusConflict, protocol.CodeStaleAttempt)
	if st := f.stats(t); st.Sessions != 1 {
		t.Fatalf("sessions = %d, want 1", st.Sessions)
	}
}

func TestStartOverClosesOldSession(t *testing.T) {
	f := newFixture(t)
	start := func(attempt int) {
		f.authorise(t, "p", attempt)
		_, err := f.c.Start(context.Background(), protocol.StartRequest{Identity: id("p", attempt, "p/seed"), Env: "probe", Task: json.RawMessage(`{"target":1}`)})
		if err != nil {
			t.Fatal(err)
		}
	}
	start(0)
	start(1)
	if n := f.probe.closed.Load(); n != 1 {
		t.Fatalf("closed %d sessions, want 1", n)
	}
}

func TestVerifyIsTerminal(t *testing.T) {
	f := newFixture(t)
	_, err := f.c.Start(context.Background(), protocol.StartRequest{Identity: id("p", 0, "p/seed"), Env: "probe", Task: json.RawMessage(`{"target":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	f.operate(t, protocol.OperateRequest{Identity: id("p", 0, "p/t0/c0"), Tool: "increment", Arguments: json.RawMessage(`{"amount":1}`)})
	vreq := protocol.VerifyRequest{Identity: id("p", 0, "p/verify"), ExpectedRevision: 1}
	v, err := f.c.Verify(context.Background(), vreq)
	if err != nil || v.Verdict.Reward != 1 || v.Replayed {
		t.Fatalf("verify = %+v, %v", v, err)
	}
	if n := f.probe.closed.Load(); n != 1 {
		t.Fatalf("verify closed %d sessions, want 1", n)
	}
	if info := f.info(t, "p"); !info.Retired || info.Revision != 1 {
		t.Fatalf("info = %+v", info)
	}
	if st := f.stats(t); st.Sessions != 0 {
		t.Fatalf("live sessions = %d after verify", st.Sessions)
	}
	_, err = f.c.Operate(context.Background(), protocol.OperateRequest{Identity: id("p", 0, "p/t1/c0"), ExpectedRevision: 1, Tool: "increment", Arguments: json.RawMessage(`{"amount":1}`)})
	wantRemote(t, err, http.StatusConflict, protocol.CodeSessionRetired)
	// Replays still work after retirement.
	for range 2 {
		again, err := f.c.Verify(context.Background(), vreq)
		if err != nil || !again.Replayed || again.Verdict.Reward != 1 || string(again.Verdict.Details) != string(v.Verdict.Details) {
			t.Fatalf("verify replay = %+v, %v", again, err)
		}
	}
	op, err := f.c.Operate(context.Background(), protocol.OperateRequest{Identity: id("p", 0, "p/t0/c0"), Tool: "increment", Arguments: json.RawMessage(`{"amount":1}`)})
	if err != nil || !op.Replayed {
		t.Fatalf("operate replay after retirement = %+v, %v", op, err)
	}
	// A different verify request on a retired session is refused.
	_, err = f.c.Verify(context.Background(), protocol.VerifyRequest{Identity: id("p", 0, "p/verify2"), ExpectedRevision: 1})
	wantRemote(t, err, http.StatusConflict, protocol.CodeSessionRetired)
	// The fence outlives the session.
	f.authorise(t, "p", 3)
	_, err = f.c.Verify(context.Background(), protocol.VerifyRequest{Identity: id("p", 2, "p/verify"), ExpectedRevision: 1})
	wantRemote(t, err, http.StatusConflict, protocol.CodeStaleAttempt)
	if n := f.probe.closed.Load(); n != 1 {
		t.Fatalf("closed %d times, want 1", n)
	}
}

func TestUnknowns(t *testing.T) {
	f := newFixture(t)
	_, err := f.c.Start(context.Background(), protocol.StartRequest{Identity: id("r1", 0, "s"), Env: "nope", Task: json.RawMessage(`{}`)})
	wantRemote(t, err, http.StatusNotFound, protocol.CodeUnknownEnv, "nope")
	_, err = f.c.Operate(context.Background(), inc("r1", 0, "a", 0, 1))
	wantRemote(t, err, http.StatusNotFound, protocol.CodeUnknownSession, "r1")
	_, err = f.c.Verify(context.Background(), protocol.VerifyRequest{Identity: id("r1", 0, "v")})
	wantRemote(t, err, http.StatusNotFound, protocol.CodeUnknownSession)
	_, err = f.c.Session(context.Background(), "r1")
	wantRemote(t, err, http.StatusNotFound, protocol.CodeUnknownSession)
	if st := f.stats(t); st.Refused != 4 || st.Applied != 0 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestEnvironmentRefusals(t *testing.T) {
	f := newFixture(t)
	_, err := f.c.Start(context.Background(), protocol.StartRequest{Identity: id("r1", 0, "s"), Env: "counter", Task: json.RawMessage(`{"target":-1}`)})
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
	if info := f.info(t, "r1"); info.Revision != 0 {
		t.Fatalf("a refusal changed the revision: %+v", info)
	}
	// Refusals are not receipts: the same request id with a good body applies.
	r := f.operate(t, inc("r1", 0, "r1/t0/c0", 0, 2))
	if r.Replayed || r.Outcome.Observation != "counter=2" || r.Revision != 1 {
		t.Fatalf("operate after refusal = %+v", r)
	}
	if st := f.stats(t); st.Refused != 4 || st.Applied != 2 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestInternalEnvironmentFailure(t *testing.T) {
	f := newFixture(t)
	if _, err := f.c.Start(context.Background(), protocol.StartRequest{Identity: id("p", 0, "s"), Env: "probe", Task: json.RawMessage(`{"target":1}`)}); err != nil {
		t.Fatal(err)
	}
	_, err := f.c.Operate(context.Background(), protocol.OperateRequest{Identity: id("p", 0, "x"), Tool: "explode"})
	wantRemote(t, err, http.StatusInternalServerError, protocol.CodeInternal, "boom")
	if info := f.info(t, "p"); info.Revision != 0 {
		t.Fatalf("a failed operation changed the revision: %+v", info)
	}
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
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var eb protocol.ErrorBody
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if resp.StatusCode < 400 || dec.Decode(&eb) != nil || eb.Error.Code == "" || eb.Error.Message == "" {
			t.Errorf("%s %s: %d %s is not an error body", tc.method, tc.path, resp.StatusCode, data)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s %s: content type %q", tc.method, tc.path, ct)
		}
	}
}

func TestRetiredSessionsAreBounded(t *testing.T) {
	f := newFixture(t, func(c *envserver.ServerConfig) { c.RetiredSessions = 2 })
	verify := func(rollout string, attempt int) (protocol.VerifyResponse, error) {
		return f.c.Verify(context.Background(), protocol.VerifyRequest{Identity: id(rollout, attempt, rollout+"/verify")})
	}
	for _, r := range []string{"a", "b", "c"} {
		f.start(t, r, 0, `{"target":0}`)
		if _, err := verify(r, 0); err != nil {
			t.Fatal(err)
		}
	}
	// "a" was evicted: its verdict cannot be replayed, but it fails closed.
	_, err := verify("a", 0)
	wantRemote(t, err, http.StatusConflict, protocol.CodeSessionRetired, "dropped")
	_, err = f.c.Start(context.Background(), protocol.StartRequest{Identity: id("a", 0, "a/seed"), Env: "counter", Task: json.RawMessage(`{"target":0}`)})
	wantRemote(t, err, http.StatusConflict, protocol.CodeSessionRetired)
	if info := f.info(t, "a"); !info.Retired || info.Env != "counter" {
		t.Fatalf("evicted info = %+v", info)
	}
	for _, r := range []string{"b", "c"} {
		if v, err := verify(r, 0); err != nil || !v.Replayed {
			t.Fatalf("%s: verify replay = %+v, %v", r, v, err)
		}
	}
	// A higher attempt may start over.
	if st := f.start(t, "a", 1, `{"target":0}`); st.Replayed {
		t.Fatalf("start-over after eviction replayed: %+v", st)
	}
}

func TestRolloutIDWithSlash(t *testing.T) {
	f := newFixture(t)
	const rid = "set-1/rollout 7"
	f.start(t, rid, 0, `{"target":2}`)
	r := f.operate(t, inc(rid, 0, protocol.OperateRequestID(rid, 0, 0), 0, 2))
	if r.Outcome.Observation != "counter=2" {
		t.Fatalf("operate = %+v", r)
	}
	if info := f.info(t, rid); info.RolloutID != rid || info.Revision != 1 {
		t.Fatalf("info = %+v", info)
	}
}

// TestLostReplyIsReplayed kills the reply at the failpoint (the panic drops
// the connection, as a crash would) and checks the mutation was already
// applied and recorded: the retry is a replay.
func TestLostReplyIsReplayed(t *testing.T) {
	fp, err := failpoint.Parse(failpoint.EnvAfterApplyBeforeReply + "=kill@2")
	if err != nil {
		t.Fatal(err)
	}
	var fired atomic.Int64
	fp.SetKill(func() {
		fired.Add(1)
		panic(http.ErrAbortHandler)
	})
	f := newFixture(t, func(c *envserver.ServerConfig) { c.Failpoints = fp })
	f.start(t, "r1", 0, `{"target":5}`) // 1st pass
	req := inc("r1", 0, "r1/t0/c0", 0, 3)
	if _, err := f.c.Operate(context.Background(), req); err == nil { // 2nd pass: reply lost
		t.Fatal("the reply was not lost")
	}
	if fired.Load() != 1 {
		t.Fatalf("failpoint fired %d times", fired.Load())
	}
	r := f.operate(t, req)
	if !r.Replayed || r.Revision != 1 || r.Outcome.Observation != "counter=3" {
		t.Fatalf("retry = %+v", r)
	}
	if st := f.stats(t); st.Applied != 2 || st.Replayed != 1 {
		t.Fatalf("stats = %+v", st)
	}
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
				if _, err := f.c.Start(ctx, protocol.StartRequest{Identity: id(rid, 0, protocol.SeedRequestID(rid)), Env: "counter", Task: json.RawMessage(`{"target":6}`)}); err != nil {
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
				v, err := f.c.Verify(ctx, protocol.VerifyRequest{Identity: id(rid, 0, protocol.VerifyRequestID(rid)), ExpectedRevision: steps})
				if err != nil || v.Verdict.Reward != 1 {
					errs <- errors.New(rid + ": verify failed")
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st := f.stats(t)
	perRollout := int64(1 + steps + 1)
	if st.Applied != rollouts*perRollout || st.Replayed != rollouts*(racers-1)*perRollout || st.Sessions != 0 {
		t.Fatalf("stats = %+v, want %d applied and %d replayed", st, rollouts*perRollout, rollouts*(racers-1)*perRollout)
	}
}
