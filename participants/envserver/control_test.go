package envserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/internal/testsupport"
	"github.com/turnstile-rl/turnstile/internal/testsupport/envtest"
	"github.com/turnstile-rl/turnstile/participants/envserver"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

const (
	testToken     = "test-control-token"
	testDataToken = "test-data-token"
)

// blockEnv is the counter under the name "block" whose tool "block" waits
// until the test releases it, so a test can hold a mutation in flight (or
// leave it stuck for good).
type blockEnv struct {
	wrappedCounter
	entered chan string // receives the tool name when a "block" call starts
	release chan struct{}
}

func newBlockEnv() *blockEnv {
	b := &blockEnv{entered: make(chan string, 16), release: make(chan struct{})}
	b.wrappedCounter = wrappedCounter{name: "block", wrap: func(s envs.Session) envs.Session {
		return &blockSession{Session: s, env: b}
	}}
	return b
}

type blockSession struct {
	envs.Session
	env *blockEnv
}

func (s *blockSession) Apply(tool string, args json.RawMessage) (envs.Outcome, error) {
	if tool == "block" {
		s.env.entered <- tool
		<-s.env.release
		return s.Session.Apply(counter.ToolIncrement, json.RawMessage(`{"amount":1}`))
	}
	return s.Session.Apply(tool, args)
}

// restartEnv is the counter declared restart_only under the name "restart".
type restartEnv struct{}

func (restartEnv) Spec() envs.Spec {
	sp := counter.New().Spec()
	sp.Name = "restart"
	sp.Mode = envs.ModeRestartOnly
	return sp
}

func (restartEnv) Start(seed int64, task json.RawMessage) (envs.Session, envs.Start, error) {
	return counter.New().Start(seed, task)
}

func (restartEnv) Restore(json.RawMessage) (envs.Session, error) {
	return nil, envs.Errorf(envs.CodeNotExportable, "restart env cannot restore")
}

// exportFailEnv is the counter under the name "exportfail" whose sessions
// cannot export their state.
type exportFailEnv struct{}

func (exportFailEnv) Spec() envs.Spec {
	sp := counter.New().Spec()
	sp.Name = "exportfail"
	return sp
}

func (exportFailEnv) Start(seed int64, task json.RawMessage) (envs.Session, envs.Start, error) {
	s, st, err := counter.New().Start(seed, task)
	return exportFailSession{s}, st, err
}

func (exportFailEnv) Restore(state json.RawMessage) (envs.Session, error) {
	return counter.New().Restore(state)
}

type exportFailSession struct{ envs.Session }

func (exportFailSession) Export() (json.RawMessage, error) { return nil, errors.New("disk on fire") }

// ctlFixture is a server with a control token; the data-plane helpers of
// fixture work on it.
type ctlFixture struct {
	*fixture
	block *blockEnv
}

func newCtlFixture(t *testing.T, mod ...func(*envserver.ServerConfig)) *ctlFixture {
	t.Helper()
	block := newBlockEnv()
	cfg := envserver.ServerConfig{
		Envs:         []envs.Environment{counter.New(), block, restartEnv{}, exportFailEnv{}},
		Name:         "env-a",
		ControlToken: testToken,
		DataToken:    testDataToken,
	}
	for _, m := range mod {
		m(&cfg)
	}
	srv, err := envserver.NewServer(cfg)
	require.NoError(t, err, "NewServer")
	hs := testsupport.QuietServer(srv)
	t.Cleanup(func() {
		// A test may leave a mutation stuck for good; let it return so the
		// server can close.
		select {
		case <-block.release:
		default:
			close(block.release)
		}
		hs.Close()
	})
	return &ctlFixture{
		fixture: &fixture{srv: srv, c: protocol.NewDataClient(hs.URL, testDataToken, hs.Client()), url: hs.URL,
			cc: protocol.NewControlClient(hs.URL, testToken, hs.Client())},
		block: block,
	}
}

func (f *ctlFixture) startEnv(t *testing.T, env, rollout string, attempt int) {
	t.Helper()
	f.authorise(t, rollout, attempt)
	_, err := f.c.Start(context.Background(), protocol.StartRequest{
		Identity: envtest.ID(rollout, attempt, protocol.SeedRequestID(rollout)), Env: env, Seed: 1, Task: json.RawMessage(`{"target":9}`),
	})
	require.NoError(t, err, "start %s/%s attempt %d", env, rollout, attempt)
}

func (f *ctlFixture) status(t *testing.T) protocol.ControlStatus {
	t.Helper()
	st, err := f.cc.Status(context.Background())
	require.NoError(t, err, "status")
	return st
}

// waitStatus polls status until ok accepts it.
func (f *ctlFixture) waitStatus(t *testing.T, what string, ok func(protocol.ControlStatus) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		st := f.status(t)
		if ok(st) {
			return
		}
		select {
		case <-ctx.Done():
			require.Failf(t, "timed out", "status never showed %s; last %+v", what, st)
		case <-tick.C:
		}
	}
}

// blockOp sends the blocking tool for rollout in the background; the result
// arrives on the returned channel.
func (f *ctlFixture) blockOp(t *testing.T, rollout string, attempt int, req string, rev int64) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := f.c.Operate(context.Background(), protocol.OperateRequest{
			Identity: envtest.ID(rollout, attempt, req), ExpectedRevision: rev, Tool: "block", Arguments: json.RawMessage(`{}`),
		})
		done <- err
	}()
	<-f.block.entered
	return done
}

func future() time.Time { return time.Now().Add(time.Minute) }

func (f *ctlFixture) prepare(t *testing.T, ckpt string) protocol.PrepareResponse {
	t.Helper()
	resp, err := f.cc.Prepare(context.Background(), protocol.PrepareRequest{CheckpointID: ckpt, Deadline: future()})
	require.NoError(t, err, "prepare %s", ckpt)
	return resp
}

func (f *ctlFixture) resume(t *testing.T, ckpt string) {
	t.Helper()
	_, err := f.cc.Resume(context.Background(), ckpt)
	require.NoError(t, err, "resume %s", ckpt)
}

func members(resp protocol.PrepareResponse) []string {
	out := []string{}
	for _, s := range resp.Sessions {
		out = append(out, s.RolloutID)
	}
	return out
}

func TestControlAuth(t *testing.T) {
	ctx := context.Background()
	on := newCtlFixture(t)
	off := newCtlFixture(t, func(c *envserver.ServerConfig) { c.ControlToken = "" })
	routes := []struct{ method, path, body string }{
		{http.MethodGet, "/v1/control/capabilities", ""},
		{http.MethodGet, "/v1/control/status", ""},
		{http.MethodPost, "/v1/control/prepare", `{"checkpoint_id":"c","deadline":"2030-01-01T00:00:00Z"}`},
		{http.MethodPost, "/v1/control/commit", `{"checkpoint_id":"c","location":"/tmp/x"}`},
		{http.MethodPost, "/v1/control/restore", `{"checkpoint_id":"c","location":"/tmp/x","attempts":{}}`},
		{http.MethodPost, "/v1/control/resume", `{"checkpoint_id":"c"}`},
		{http.MethodPost, "/v1/control/retire", `{"rollout_id":"r","attempt":0}`},
		{http.MethodGet, "/v1/control/nope", ""},
	}
	cases := []struct {
		name   string
		f      *ctlFixture
		header string
		status int
		code   string
	}{
		{"no token configured", off, "Bearer " + testToken, http.StatusNotFound, protocol.CodeControlDisabled},
		{"no token configured, no header", off, "", http.StatusNotFound, protocol.CodeControlDisabled},
		{"no header", on, "", http.StatusUnauthorized, protocol.CodeUnauthorized},
		{"wrong token", on, "Bearer " + testToken + "x", http.StatusUnauthorized, protocol.CodeUnauthorized},
		{"token prefix", on, "Bearer " + testToken[:4], http.StatusUnauthorized, protocol.CodeUnauthorized},
		{"not bearer", on, "Basic " + testToken, http.StatusUnauthorized, protocol.CodeUnauthorized},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, rt := range routes {
				req, err := http.NewRequestWithContext(ctx, rt.method, tc.f.url+rt.path, strings.NewReader(rt.body))
				require.NoError(t, err)
				if tc.header != "" {
					req.Header.Set("Authorization", tc.header)
				}
				resp, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				var eb protocol.ErrorBody
				err = json.NewDecoder(resp.Body).Decode(&eb)
				resp.Body.Close()
				require.NoError(t, err, "%s %s: %d %+v (%v), want %d %s", rt.method, rt.path, resp.StatusCode, eb, err, tc.status, tc.code)
				require.Equal(t, tc.status, resp.StatusCode, "%s %s: %d %+v (%v), want %d %s", rt.method, rt.path, resp.StatusCode, eb, err, tc.status, tc.code)
				require.Equal(t, tc.code, eb.Error.Code, "%s %s: %d %+v (%v), want %d %s", rt.method, rt.path, resp.StatusCode, eb, err, tc.status, tc.code)
			}
		})
	}
	// Nothing above changed anything: the right token sees an idle server.
	st := on.status(t)
	require.Equal(t, protocol.PhaseIdle, st.Phase, "status after refused calls = %+v", st)
	require.Equal(t, protocol.AdmissionOpen, st.Admission, "status after refused calls = %+v", st)
	// The data plane needs no token, with or without a control plane.
	on.startEnv(t, counter.Name, "r", 0)
	off.startEnv(t, counter.Name, "r", 0)
	// The client of a server without a token gets the same refusal.
	_, err := protocol.NewControlClient(off.url, testToken, nil).Status(ctx)
	wantRemote(t, err, http.StatusNotFound, protocol.CodeControlDisabled, protocol.ControlTokenEnvVar)
}

func TestCapabilities(t *testing.T) {
	f := newCtlFixture(t)
	caps, err := f.cc.Capabilities(context.Background())
	require.NoError(t, err)
	require.Equal(t, protocol.ComponentEnvironmentServer, caps.Component, "capabilities = %+v", caps)
	require.Equal(t, "env-a", caps.Name, "capabilities = %+v", caps)
	require.Equal(t, protocol.ControlSchemaVersion, caps.SchemaVersion, "capabilities = %+v", caps)
	require.Equal(t, protocol.PhaseIdle, caps.Phase, "capabilities = %+v", caps)
	require.True(t, slices.Contains(caps.Features, protocol.FeatureRestoreSessions), "capabilities = %+v", caps)
	want := []protocol.EnvCapability{
		{Name: "block", Mode: envs.ModeExportRestore, Style: envs.StyleTools},
		{Name: counter.Name, Mode: envs.ModeExportRestore, Style: envs.StyleTools},
		{Name: "exportfail", Mode: envs.ModeExportRestore, Style: envs.StyleTools},
		{Name: "restart", Mode: envs.ModeRestartOnly, Style: envs.StyleTools},
	}
	got, _ := json.Marshal(caps.Envs)
	require.Equal(t, string(must(json.Marshal(want))), string(got), "envs = %s", got)
	// Capabilities stay observable while a checkpoint is active.
	f.prepare(t, "c1")
	caps, err = f.cc.Capabilities(context.Background())
	require.NoError(t, err, "capabilities while prepared = %+v, %v", caps, err)
	require.Equal(t, protocol.PhasePrepared, caps.Phase, "capabilities while prepared = %+v, %v", caps, err)
	require.Equal(t, "c1", caps.CheckpointID, "capabilities while prepared = %+v, %v", caps, err)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestPrepareTimeoutRetireRetry: a mutation that never returns makes prepare
// time out naming it; the server is open again; retiring the straggler lets
// the same prepare succeed without it; its late result is discarded.
func TestPrepareTimeoutRetireRetry(t *testing.T) {
	ctx := context.Background()
	f := newCtlFixture(t)
	f.startEnv(t, "block", "slow", 0)
	f.startEnv(t, counter.Name, "fast", 0)
	stuck := f.blockOp(t, "slow", 0, "slow/t0/c0", 0)

	// A deadline already past: prepare looks once and gives up at once.
	_, err := f.cc.Prepare(ctx, protocol.PrepareRequest{CheckpointID: "c1", Deadline: time.Now().Add(-time.Second)})
	wantRemote(t, err, http.StatusConflict, protocol.CodePrepareTimeout, "slow (attempt 0)")
	st := f.status(t)
	require.Equal(t, protocol.PhaseIdle, st.Phase, "status after the failed prepare = %+v", st)
	require.Equal(t, "", st.CheckpointID, "status after the failed prepare = %+v", st)
	require.Equal(t, protocol.AdmissionOpen, st.Admission, "status after the failed prepare = %+v", st)
	require.Len(t, st.InFlight, 1, "status after the failed prepare = %+v", st)
	require.Equal(t, protocol.InFlight{RolloutID: "slow", Attempt: 0, Count: 1}, st.InFlight[0], "status after the failed prepare = %+v", st)
	// Admission is open again: other rollouts go on.
	f.operate(t, inc("fast", 0, "fast/t0/c0", 0, 1))

	ret, err := f.cc.Retire(ctx, "slow", 0)
	require.NoError(t, err, "retire = %+v, %v", ret, err)
	require.True(t, ret.Pending, "retire = %+v, %v", ret, err)
	require.Equal(t, 1, ret.Fence, "retire = %+v, %v", ret, err)
	st = f.status(t)
	require.Len(t, st.InFlight, 1, "status after retire = %+v", st)
	require.True(t, st.InFlight[0].Retired, "status after retire = %+v", st)
	// The same checkpoint id, tried again, now succeeds without the straggler.
	prep := f.prepare(t, "c1")
	require.Equal(t, "fast", strings.Join(members(prep), ","), "cut = %+v", prep)
	require.Equal(t, int64(1), prep.Sessions[0].Revision, "cut = %+v", prep)
	// The straggler returns: its result is discarded, never recorded.
	close(f.block.release)
	wantRemote(t, <-stuck, http.StatusConflict, protocol.CodeStaleAttempt, "retired")
	_, err = f.c.Session(ctx, "slow")
	wantRemote(t, err, http.StatusNotFound, protocol.CodeUnknownSession)

	dir := t.TempDir()
	com, err := f.cc.Commit(ctx, protocol.CommitRequest{CheckpointID: "c1", Location: dir})
	require.NoError(t, err, "commit = %+v, %v", com, err)
	require.Equal(t, 1, com.Sessions, "commit = %+v, %v", com, err)
	f.resume(t, "c1")
	// Attempt 0 of the straggler is fenced out; attempt 1 starts over.
	_, err = f.c.Operate(ctx, inc("slow", 0, "slow/t0/c0", 0, 1))
	wantRemote(t, err, http.StatusConflict, protocol.CodeStaleAttempt)
	f.startEnv(t, "block", "slow", 1)
	info := f.info(t, "slow")
	require.Equal(t, 1, info.Attempt, "restarted straggler = %+v", info)
	require.Equal(t, int64(0), info.Revision, "restarted straggler = %+v", info)
}

func TestRetireDropsSessionAtOnce(t *testing.T) {
	ctx := context.Background()
	f := newCtlFixture(t)
	f.startEnv(t, counter.Name, "r", 2)
	f.operate(t, inc("r", 2, "r/t0/c0", 0, 1))
	// Retiring an older attempt leaves the newer session alone.
	ret, err := f.cc.Retire(ctx, "r", 1)
	require.NoError(t, err, "retire of an older attempt = %+v, %v", ret, err)
	require.False(t, ret.Discarded, "retire of an older attempt = %+v, %v", ret, err)
	require.False(t, ret.Pending, "retire of an older attempt = %+v, %v", ret, err)
	require.Equal(t, 2, ret.Fence, "retire of an older attempt = %+v, %v", ret, err)
	info := f.info(t, "r")
	require.Equal(t, 2, info.Attempt, "session after retiring attempt 1 = %+v", info)
	require.Equal(t, int64(1), info.Revision, "session after retiring attempt 1 = %+v", info)
	ret, err = f.cc.Retire(ctx, "r", 2)
	require.NoError(t, err, "retire = %+v, %v", ret, err)
	require.True(t, ret.Discarded, "retire = %+v, %v", ret, err)
	require.False(t, ret.Pending, "retire = %+v, %v", ret, err)
	require.Equal(t, 3, ret.Fence, "retire = %+v, %v", ret, err)
	_, err = f.c.Operate(ctx, inc("r", 2, "r/t1/c0", 1, 1))
	wantRemote(t, err, http.StatusConflict, protocol.CodeStaleAttempt)
	st := f.stats(t)
	require.Equal(t, 0, st.Sessions, "stats after retire = %+v", st)
	for _, body := range []protocol.RetireRequest{{RolloutID: "", Attempt: 0}, {RolloutID: "r", Attempt: -1}} {
		_, err := f.cc.Retire(ctx, body.RolloutID, body.Attempt)
		wantRemote(t, err, http.StatusBadRequest, protocol.CodeMalformed)
	}
}

// TestRetireAfterPrepareLeavesTheCut: a session retired while prepared is not
// committed; after commit, retire is refused.
func TestRetireAfterPrepareLeavesTheCut(t *testing.T) {
	ctx := context.Background()
	f := newCtlFixture(t)
	f.startEnv(t, counter.Name, "a", 0)
	f.startEnv(t, counter.Name, "b", 0)
	require.Equal(t, "a,b", strings.Join(members(f.prepare(t, "c1")), ","), "cut")
	_, err := f.cc.Retire(ctx, "b", 0)
	require.NoError(t, err)
	st := f.status(t)
	require.Equal(t, 1, st.CutSessions, "status after retire = %+v", st)
	// A replayed prepare reports the cut as it is now.
	got := members(f.prepare(t, "c1"))
	require.Equal(t, "a", strings.Join(got, ","), "replayed cut = %v", got)
	com, err := f.cc.Commit(ctx, protocol.CommitRequest{CheckpointID: "c1", Location: t.TempDir()})
	require.NoError(t, err, "commit = %+v, %v", com, err)
	require.Equal(t, 1, com.Sessions, "commit = %+v, %v", com, err)
	_, err = f.cc.Retire(ctx, "a", 0)
	wantRemote(t, err, http.StatusConflict, protocol.CodeInvalidPhase, "committed")
	info := f.info(t, "a")
	require.Equal(t, 0, info.Attempt, "a after the refused retire = %+v", info)
}

// TestPhaseFence drives the fence through its refusals; each case starts
// from a fresh server.
func TestPhaseFence(t *testing.T) {
	ctx := context.Background()
	type step struct {
		name   string
		call   func(f *ctlFixture, dir string) error
		status int
		code   string
	}
	prepare := func(id string) func(*ctlFixture, string) error {
		return func(f *ctlFixture, _ string) error {
			_, err := f.cc.Prepare(ctx, protocol.PrepareRequest{CheckpointID: id, Deadline: future()})
			return err
		}
	}
	commit := func(id string) func(*ctlFixture, string) error {
		return func(f *ctlFixture, dir string) error {
			_, err := f.cc.Commit(ctx, protocol.CommitRequest{CheckpointID: id, Location: dir})
			return err
		}
	}
	restore := func(id string) func(*ctlFixture, string) error {
		return func(f *ctlFixture, dir string) error {
			_, err := f.cc.Restore(ctx, protocol.RestoreRequest{CheckpointID: id, Location: dir, Attempts: map[string]int{"x": 1}})
			return err
		}
	}
	restoreAs := func(restoreID, ckpt string) func(*ctlFixture, string) error {
		return func(f *ctlFixture, dir string) error {
			_, err := f.cc.Restore(ctx, protocol.RestoreRequest{CheckpointID: ckpt, RestoreID: restoreID, Location: dir, Attempts: map[string]int{"x": 1}})
			return err
		}
	}
	resume := func(id string) func(*ctlFixture, string) error {
		return func(f *ctlFixture, _ string) error {
			_, err := f.cc.Resume(ctx, id)
			return err
		}
	}
	ok := func(name string, call func(*ctlFixture, string) error) step { return step{name: name, call: call} }
	bad := func(name string, call func(*ctlFixture, string) error, status int, code string) step {
		return step{name, call, status, code}
	}
	cases := []struct {
		name      string
		steps     []step
		wantPhase protocol.Phase
		wantOpen  bool
	}{
		{"stale checkpoint after resume", []step{
			ok("prepare", prepare("c1")),
			ok("resume", resume("c1")),
			bad("prepare again", prepare("c1"), http.StatusConflict, protocol.CodeStaleCheckpoint),
			bad("commit", commit("c1"), http.StatusConflict, protocol.CodeStaleCheckpoint),
			// Only a restore of c1 itself may reuse its id (and fails
			// here on the empty location, recording nothing).
			bad("restore of another checkpoint under its id", restoreAs("c1", "c0"), http.StatusConflict, protocol.CodeStaleCheckpoint),
			bad("restore of c1 under its id", restore("c1"), http.StatusUnprocessableEntity, protocol.CodeInvalidCheckpoint),
			ok("resume replays", resume("c1")),
		}, protocol.PhaseIdle, true},
		{"resume of an unknown id retires it", []step{
			ok("resume", resume("c9")),
			bad("a delayed prepare", prepare("c9"), http.StatusConflict, protocol.CodeStaleCheckpoint),
			bad("a delayed restore", restore("c9"), http.StatusConflict, protocol.CodeStaleCheckpoint),
			bad("a delayed restore session", restoreAs("c9", "c1"), http.StatusConflict, protocol.CodeStaleCheckpoint),
		}, protocol.PhaseIdle, true},
		{"conflicting checkpoint id", []step{
			ok("prepare", prepare("c1")),
			bad("prepare other", prepare("c2"), http.StatusConflict, protocol.CodeCheckpointConflict),
			bad("commit other", commit("c2"), http.StatusConflict, protocol.CodeCheckpointConflict),
			bad("resume other", resume("c2"), http.StatusConflict, protocol.CodeCheckpointConflict),
			bad("restore other", restore("c2"), http.StatusConflict, protocol.CodeCheckpointConflict),
			bad("restore of it under a restore id", restoreAs("r1", "c1"), http.StatusConflict, protocol.CodeCheckpointConflict),
			ok("prepare replays", prepare("c1")),
		}, protocol.PhasePrepared, false},
		{"invalid phases", []step{
			bad("commit before prepare", commit("c1"), http.StatusConflict, protocol.CodeInvalidPhase),
			ok("prepare", prepare("c1")),
			bad("restore while prepared", restore("c1"), http.StatusConflict, protocol.CodeInvalidPhase),
			ok("commit", commit("c1")),
			ok("commit replays", commit("c1")),
			ok("prepare replays", prepare("c1")),
		}, protocol.PhaseCommitted, false},
		{"a new checkpoint after resume", []step{
			ok("prepare", prepare("c1")),
			ok("resume", resume("c1")),
			ok("prepare next", prepare("c2")),
		}, protocol.PhasePrepared, false},
		{"failed prepare records nothing", []step{
			bad("prepare", func(f *ctlFixture, _ string) error {
				f.startEnv(t, "exportfail", "x", 0)
				_, err := f.cc.Prepare(ctx, protocol.PrepareRequest{CheckpointID: "c1", Deadline: future()})
				return err
			}, http.StatusInternalServerError, protocol.CodeInternal),
			bad("commit", commit("c1"), http.StatusConflict, protocol.CodeInvalidPhase),
			ok("another id may start", func(f *ctlFixture, _ string) error {
				if _, err := f.cc.Retire(ctx, "x", 0); err != nil {
					return err
				}
				return prepare("c2")(f, "")
			}),
		}, protocol.PhasePrepared, false},
		{"malformed", []step{
			bad("prepare without deadline", func(f *ctlFixture, _ string) error {
				return f.cc.Do(ctx, http.MethodPost, "/v1/control/prepare", map[string]string{"checkpoint_id": "c1"}, nil)
			}, http.StatusBadRequest, protocol.CodeMalformed),
			bad("prepare with an unknown field", func(f *ctlFixture, _ string) error {
				return f.cc.Do(ctx, http.MethodPost, "/v1/control/prepare", map[string]string{"checkpoint_id": "c1", "deadline": "2030-01-01T00:00:00Z", "x": "y"}, nil)
			}, http.StatusBadRequest, protocol.CodeMalformed),
			bad("prepare without id", prepare(""), http.StatusBadRequest, protocol.CodeMalformed),
			bad("commit to a relative path", func(f *ctlFixture, _ string) error {
				_, err := f.cc.Commit(ctx, protocol.CommitRequest{CheckpointID: "c1", Location: "rel/dir"})
				return err
			}, http.StatusBadRequest, protocol.CodeMalformed),
		}, protocol.PhaseIdle, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newCtlFixture(t)
			dir := t.TempDir()
			for _, s := range tc.steps {
				err := s.call(f, dir)
				if s.code == "" {
					require.NoError(t, err, "%s", s.name)
					continue
				}
				var re *protocol.RemoteError
				require.ErrorAs(t, err, &re, "%s: got %v, want %d %s", s.name, err, s.status, s.code)
				require.Equal(t, s.status, re.Status, "%s: got %v, want %d %s", s.name, err, s.status, s.code)
				require.Equal(t, s.code, re.Code, "%s: got %v, want %d %s", s.name, err, s.status, s.code)
			}
			st := f.status(t)
			require.Equal(t, tc.wantPhase, st.Phase, "status = %+v, want phase %s, open %v", st, tc.wantPhase, tc.wantOpen)
			require.Equal(t, tc.wantOpen, st.Admission == protocol.AdmissionOpen, "status = %+v, want phase %s, open %v", st, tc.wantPhase, tc.wantOpen)
			// Admission as reported is admission as enforced.
			_, err := f.c.Start(ctx, protocol.StartRequest{Identity: envtest.ID("probe", 0, "probe/seed"), Env: counter.Name, Task: json.RawMessage(`{"target":1}`)})
			if tc.wantOpen {
				require.NoError(t, err, "start with admission open")
			}
			if !tc.wantOpen {
				wantRemote(t, err, http.StatusServiceUnavailable, protocol.CodeParked)
			}
		})
	}
}

// TestQueuedMutationParkedBehindPrepare: mutation 1 runs, mutation 2 of the
// same rollout waits for its lock, prepare closes admission: 1 completes, 2
// is parked (not applied), and the cut holds exactly 1.
func TestQueuedMutationParkedBehindPrepare(t *testing.T) {
	ctx := context.Background()
	f := newCtlFixture(t)
	f.startEnv(t, "block", "q", 0)
	first := f.blockOp(t, "q", 0, "q/t0/c0", 0)
	second := make(chan error, 1)
	go func() {
		_, err := f.c.Operate(ctx, inc("q", 0, "q/t1/c0", 1, 1))
		second <- err
	}()
	f.waitStatus(t, "two mutations of q in flight", func(st protocol.ControlStatus) bool {
		return len(st.InFlight) == 1 && st.InFlight[0].Count == 2
	})
	prepared := make(chan protocol.PrepareResponse, 1)
	prepErr := make(chan error, 1)
	go func() {
		resp, err := f.cc.Prepare(ctx, protocol.PrepareRequest{CheckpointID: "c1", Deadline: future()})
		prepared <- resp
		prepErr <- err
	}()
	f.waitStatus(t, "preparing", func(st protocol.ControlStatus) bool { return st.Phase == protocol.PhasePreparing })
	close(f.block.release)
	require.NoError(t, <-first, "the admitted mutation")
	wantRemote(t, <-second, http.StatusServiceUnavailable, protocol.CodeParked)
	resp := <-prepared
	require.NoError(t, <-prepErr, "prepare")
	require.Len(t, resp.Sessions, 1, "cut = %+v", resp)
	require.Equal(t, int64(1), resp.Sessions[0].Revision, "cut = %+v", resp)
	info := f.info(t, "q")
	require.Equal(t, int64(1), info.Revision, "the parked mutation changed the session: %+v", info)
	f.resume(t, "c1")
	// The parked request, sent again, applies now.
	r := f.operate(t, inc("q", 0, "q/t1/c0", 1, 1))
	require.Equal(t, int64(2), r.Revision, "retried parked mutation = %+v", r)
	require.False(t, r.Replayed, "retried parked mutation = %+v", r)
}

// TestResumeAbortsPrepare: resume during a prepare that waits for a stuck
// mutation aborts it, reopens admission and retires the id.
func TestResumeAbortsPrepare(t *testing.T) {
	ctx := context.Background()
	f := newCtlFixture(t)
	f.startEnv(t, "block", "slow", 0)
	stuck := f.blockOp(t, "slow", 0, "slow/t0/c0", 0)
	prepErr := make(chan error, 1)
	go func() {
		_, err := f.cc.Prepare(ctx, protocol.PrepareRequest{CheckpointID: "c1", Deadline: future()})
		prepErr <- err
	}()
	f.waitStatus(t, "preparing", func(st protocol.ControlStatus) bool { return st.Phase == protocol.PhasePreparing })
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, err := f.cc.Resume(ctx, "c1")
		assert.NoError(t, err, "resume")
	}()
	wantRemote(t, <-prepErr, http.StatusConflict, protocol.CodePrepareAborted)
	wg.Wait()
	st := f.status(t)
	require.Equal(t, protocol.PhaseIdle, st.Phase, "status after abort = %+v", st)
	require.Equal(t, protocol.AdmissionOpen, st.Admission, "status after abort = %+v", st)
	_, err := f.cc.Prepare(ctx, protocol.PrepareRequest{CheckpointID: "c1", Deadline: future()})
	wantRemote(t, err, http.StatusConflict, protocol.CodeStaleCheckpoint)
	close(f.block.release)
	require.NoError(t, <-stuck, "the mutation after the abort")
}
