package envserver

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// gateEnv is the counter whose tool "block" waits until released, so a test
// can hold a mutation in flight.
type gateEnv struct {
	entered chan struct{}
	release chan struct{}
}

func (g *gateEnv) Spec() envs.Spec {
	sp := counter.New().Spec()
	sp.Name = "gate"
	return sp
}

func (g *gateEnv) Start(seed int64, task json.RawMessage) (envs.Session, envs.Start, error) {
	s, st, err := counter.New().Start(seed, task)
	if err != nil {
		return nil, st, err
	}
	return &gateSession{Session: s, g: g}, st, nil
}

func (g *gateEnv) Restore(state json.RawMessage) (envs.Session, error) {
	return counter.New().Restore(state)
}

type gateSession struct {
	envs.Session
	g *gateEnv
}

func (s *gateSession) Apply(tool string, args json.RawMessage) (envs.Outcome, error) {
	if tool == "block" {
		s.g.entered <- struct{}{}
		<-s.g.release
		return envs.Outcome{Observation: "released"}, nil
	}
	return s.Session.Apply(tool, args)
}

func newInternal(t *testing.T, environments ...envs.Environment) (*Server, *protocol.Client) {
	t.Helper()
	srv, err := NewServer(ServerConfig{Envs: append([]envs.Environment{counter.New()}, environments...), InsecureNoDataAuth: true})
	require.NoError(t, err)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return srv, protocol.NewClient(hs.URL, hs.Client())
}

func wantCode(t *testing.T, err error, status int, code string) {
	t.Helper()
	var re *protocol.RemoteError
	require.ErrorAs(t, err, &re, "error %v, want %d %s", err, status, code)
	require.Equal(t, status, re.Status, "error %v, want %d %s", err, status, code)
	require.Equal(t, code, re.Code, "error %v, want %d %s", err, status, code)
}

func incr(rollout string, attempt int, req string, rev int64) protocol.OperateRequest {
	return protocol.OperateRequest{Identity: protocol.Identity{RolloutID: rollout, Attempt: attempt, RequestID: req},
		ExpectedRevision: rev, Tool: counter.ToolIncrement, Arguments: json.RawMessage(`{"amount":1}`)}
}

func startReq(rollout string, attempt int) protocol.StartRequest {
	return protocol.StartRequest{Identity: protocol.Identity{RolloutID: rollout, Attempt: attempt, RequestID: protocol.SeedRequestID(rollout)},
		Env: counter.Name, Task: json.RawMessage(`{"target":3}`)}
}

func TestAdmissionParksMutations(t *testing.T) {
	srv, c := newInternal(t)
	ctx := context.Background()
	_, err := c.Start(ctx, startReq("r1", 0))
	require.NoError(t, err)
	srv.closeAdmission()
	require.True(t, srv.admissionClosed(), "admission still open")
	_, err = c.Start(ctx, startReq("r2", 0))
	wantCode(t, err, http.StatusServiceUnavailable, protocol.CodeParked)
	_, err = c.Operate(ctx, incr("r1", 0, "a", 0))
	wantCode(t, err, http.StatusServiceUnavailable, protocol.CodeParked)
	_, err = c.Verify(ctx, protocol.VerifyRequest{Identity: protocol.Identity{RolloutID: "r1", Attempt: 0, RequestID: "v"}})
	wantCode(t, err, http.StatusServiceUnavailable, protocol.CodeParked)
	// Reads still work while parked.
	info, err := c.Session(ctx, "r1")
	require.NoError(t, err, "session while parked = %+v, %v", info, err)
	require.Equal(t, int64(0), info.Revision, "session while parked = %+v, %v", info, err)
	st, _ := c.Stats(ctx)
	require.Equal(t, int64(3), st.Parked, "stats = %+v", st)
	require.Equal(t, int64(1), st.Applied, "stats = %+v", st)
	require.Equal(t, int64(0), st.Refused, "stats = %+v", st)
	require.Equal(t, 1, st.Sessions, "stats = %+v", st)
	srv.openAdmission()
	// The same request, retried, now applies.
	r, err := c.Operate(ctx, incr("r1", 0, "a", 0))
	require.NoError(t, err, "operate after reopening = %+v, %v", r, err)
	require.False(t, r.Replayed, "operate after reopening = %+v, %v", r, err)
	require.Equal(t, int64(1), r.Revision, "operate after reopening = %+v, %v", r, err)
}

func TestWaitIdleWaitsForInFlightMutations(t *testing.T) {
	g := &gateEnv{entered: make(chan struct{}), release: make(chan struct{})}
	srv, c := newInternal(t, g)
	ctx := context.Background()
	_, err := c.Start(ctx, protocol.StartRequest{Identity: protocol.Identity{RolloutID: "g", RequestID: "g/seed"}, Env: "gate", Task: json.RawMessage(`{"target":1}`)})
	require.NoError(t, err)
	require.NoError(t, srv.waitIdle(ctx), "idle server")
	done := make(chan error, 1)
	go func() {
		_, err := c.Operate(ctx, protocol.OperateRequest{Identity: protocol.Identity{RolloutID: "g", RequestID: "b"}, Tool: "block"})
		done <- err
	}()
	<-g.entered
	srv.closeAdmission()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	err = srv.waitIdle(cancelled)
	require.ErrorIs(t, err, context.Canceled, "waitIdle with a mutation in flight = %v, want context.Canceled", err)
	idle := make(chan error, 1)
	go func() { idle <- srv.waitIdle(ctx) }()
	close(g.release)
	require.NoError(t, <-done, "in-flight mutation")
	require.NoError(t, <-idle, "waitIdle")
	info, _ := c.Session(ctx, "g")
	require.Equal(t, int64(1), info.Revision, "the admitted mutation did not complete: %+v", info)
}

func TestExportInstallRoundTrip(t *testing.T) {
	a, ca := newInternal(t)
	ctx := context.Background()
	for _, r := range []string{"live", "done"} {
		_, err := ca.Start(ctx, startReq(r, 0))
		require.NoError(t, err)
		_, err = ca.Operate(ctx, incr(r, 0, r+"/t0/c0", 0))
		require.NoError(t, err)
	}
	verdict, err := ca.Verify(ctx, protocol.VerifyRequest{Identity: protocol.Identity{RolloutID: "done", RequestID: "done/verify"}, ExpectedRevision: 1})
	require.NoError(t, err)
	a.closeAdmission()
	require.NoError(t, a.waitIdle(ctx))
	st, err := a.exportState()
	require.NoError(t, err)
	raw, err := json.Marshal(st)
	require.NoError(t, err)
	again, _ := a.exportState()
	raw2, _ := json.Marshal(again)
	require.Equal(t, string(raw), string(raw2), "export is not deterministic:\n%s\n%s", raw, raw2)

	// Install into a fresh server as attempt 1.
	var loaded serverState
	require.NoError(t, json.Unmarshal(raw, &loaded))
	for i := range loaded.Sessions {
		loaded.Sessions[i].Attempt = 1
	}
	b, cb := newInternal(t)
	diverged, err := b.installState(loaded)
	require.NoError(t, err, "install")
	require.Empty(t, diverged, "no replay session")
	installed, _ := cb.Stats(ctx)
	require.Equal(t, 1, installed.Sessions, "stats after install = %+v", installed)
	// Attempt 0 is fenced out.
	_, err = cb.Operate(ctx, incr("live", 0, "live/t1/c0", 1))
	wantCode(t, err, http.StatusConflict, protocol.CodeStaleAttempt)
	// Attempt 1 re-sending a mutation applied before the cut gets the stored response.
	r, err := cb.Operate(ctx, incr("live", 1, "live/t0/c0", 0))
	require.NoError(t, err, "replay after install = %+v, %v", r, err)
	require.True(t, r.Replayed, "replay after install = %+v, %v", r, err)
	require.Equal(t, "counter=1", r.Outcome.Observation, "replay after install = %+v, %v", r, err)
	// And the next one continues the restored state.
	r, err = cb.Operate(ctx, incr("live", 1, "live/t1/c0", 1))
	require.NoError(t, err, "operate after install = %+v, %v", r, err)
	require.False(t, r.Replayed, "operate after install = %+v, %v", r, err)
	require.Equal(t, int64(2), r.Revision, "operate after install = %+v, %v", r, err)
	require.Equal(t, "counter=2", r.Outcome.Observation, "operate after install = %+v, %v", r, err)
	v, err := cb.Verify(ctx, protocol.VerifyRequest{Identity: protocol.Identity{RolloutID: "done", Attempt: 1, RequestID: "done/verify"}, ExpectedRevision: 1})
	require.NoError(t, err, "verdict replay after install = %+v, %v", v, err)
	require.True(t, v.Replayed, "verdict replay after install = %+v, %v", v, err)
	require.Equal(t, string(verdict.Verdict.Details), string(v.Verdict.Details), "verdict replay after install = %+v, %v", v, err)
}

func TestInstallIsAllOrNothing(t *testing.T) {
	good := sessionRecord{RolloutID: "ok", Env: counter.Name, Attempt: 1, Revision: 0, Receipts: map[string]receipt{},
		State: json.RawMessage(`{"start":0,"target":1,"padding":0,"value":0,"ops":0}`)}
	for name, bad := range map[string]sessionRecord{
		"bad state":   {RolloutID: "x", Env: counter.Name, Attempt: 1, State: json.RawMessage(`{"start":-1}`)},
		"unknown env": {RolloutID: "x", Env: "nope", Attempt: 1, State: json.RawMessage(`{}`)},
		"no rollout":  {Env: counter.Name, Attempt: 1},
		"duplicate":   good,
		"bad receipt": {RolloutID: "x", Env: counter.Name, Attempt: 1, Retired: true, Receipts: map[string]receipt{"v": {Kind: "nope", Digest: "d", Response: json.RawMessage(`{}`)}}},
	} {
		t.Run(name, func(t *testing.T) {
			srv, c := newInternal(t)
			_, err := srv.installState(serverState{Sessions: []sessionRecord{good, bad}, Fences: map[string]int{"ok": 1}})
			require.Error(t, err, "install accepted a bad record")
			assert.ErrorContains(t, err, "record 1", "error %q does not name the record", err)
			_, err = c.Session(context.Background(), "ok")
			wantCode(t, err, http.StatusNotFound, protocol.CodeUnknownSession)
			// The fence was not installed either.
			_, err = c.Start(context.Background(), startReq("ok", 0))
			require.NoError(t, err, "start after a failed install")
		})
	}
}
