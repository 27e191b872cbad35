package envserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/internal/testsupport"
	"github.com/turnstile-rl/turnstile/internal/testsupport/envtest"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

const (
	forgetTestGrace  = time.Minute
	forgetTestRetain = 5 * time.Minute
	forgetDataToken  = "data-token-forget"
	forgetCtlToken   = "control-token-forget"
)

// forgetFixture is a server whose clock the test moves, with clients of
// both planes.
type forgetFixture struct {
	srv   *Server
	clock *testsupport.Clock
	data  *protocol.Client
	ctl   *protocol.ControlClient
}

func newForgetFixture(t *testing.T, mod ...func(*ServerConfig)) *forgetFixture {
	t.Helper()
	clock := testsupport.NewClock(time.Unix(1_000_000, 0))
	cfg := ServerConfig{Envs: []envs.Environment{counter.New()}, DataToken: forgetDataToken, ControlToken: forgetCtlToken,
		RetiredGrace: forgetTestGrace, ForgetAfter: forgetTestRetain, Now: clock.Now}
	for _, m := range mod {
		m(&cfg)
	}
	srv, err := NewServer(cfg)
	require.NoError(t, err)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return &forgetFixture{srv: srv, clock: clock, data: protocol.NewDataClient(hs.URL, forgetDataToken, hs.Client()),
		ctl: protocol.NewControlClient(hs.URL, forgetCtlToken, hs.Client())}
}

func (f *forgetFixture) start(t *testing.T, rollout string, attempt int) {
	t.Helper()
	if attempt > 0 {
		_, err := f.ctl.Authorise(context.Background(), rollout, attempt)
		require.NoError(t, err, "authorise %s attempt %d", rollout, attempt)
	}
	_, err := f.data.Start(context.Background(), protocol.StartRequest{Identity: envtest.ID(rollout, attempt, protocol.SeedRequestID(rollout)),
		Env: counter.Name, Seed: 1, Task: json.RawMessage(`{"target":3}`)})
	require.NoError(t, err, "start %s attempt %d", rollout, attempt)
}

func (f *forgetFixture) operate(rollout string, attempt int, req string, rev int64) error {
	_, err := f.data.Operate(context.Background(), protocol.OperateRequest{Identity: envtest.ID(rollout, attempt, req),
		ExpectedRevision: rev, Tool: counter.ToolIncrement, Arguments: json.RawMessage(`{"amount":1}`)})
	return err
}

// finish starts attempt of rollout, operates once and verifies: the
// session is retired with its receipts.
func (f *forgetFixture) finish(t *testing.T, rollout string, attempt int) {
	t.Helper()
	f.start(t, rollout, attempt)
	require.NoError(t, f.operate(rollout, attempt, rollout+"/t0", 0))
	_, err := f.data.Verify(context.Background(), protocol.VerifyRequest{Identity: envtest.ID(rollout, attempt, rollout+"/verify"), ExpectedRevision: 1})
	require.NoError(t, err, "verify %s", rollout)
}

// exported is what a checkpoint cut now holds: the rollouts with a session
// record and those with a fence.
func (f *forgetFixture) exported(t *testing.T) (sessions []string, fences map[string]int) {
	t.Helper()
	st, err := f.srv.exportState()
	require.NoError(t, err)
	for _, r := range st.Sessions {
		sessions = append(sessions, r.RolloutID)
	}
	return sessions, st.Fences
}

// remembers says whether the server still holds a slot for rollout.
func (f *forgetFixture) remembers(rollout string) bool { return f.srv.store.lookup(rollout) != nil }

func requireRemote(t *testing.T, err error, status int, code string) {
	t.Helper()
	var re *protocol.RemoteError
	require.True(t, errors.As(err, &re), "error %v is not a RemoteError (want %d %s)", err, status, code)
	require.Equal(t, status, re.Status, "got %d %s (%s), want %d %s", re.Status, re.Code, re.Message, status, code)
	require.Equal(t, code, re.Code, "got %d %s (%s), want %d %s", re.Status, re.Code, re.Message, status, code)
}

// A finished rollout whose receipts were dropped is forgotten once it has
// been retired for longer than ForgetAfter: a checkpoint no longer exports
// its fence, its slot is gone, and its requests are answered as for a
// rollout never seen. One retired less long is kept.
func TestFinishedRolloutForgottenAfterRetention(t *testing.T) {
	f := newForgetFixture(t)
	f.finish(t, "old", 0)
	f.clock.Advance(2 * time.Minute)
	f.finish(t, "young", 0)
	f.clock.Advance(2 * time.Minute) // old: 4 min, young: 2 min; both past the grace

	sessions, fences := f.exported(t)
	require.Empty(t, sessions, "exported sessions %v; want none (both past the grace, receipts dropped)", sessions)
	require.Equal(t, map[string]int{"old": 0, "young": 0}, fences, "within the retention both fences are kept")

	f.clock.Advance(90 * time.Second) // old: 5.5 min, young: 3.5 min
	sessions, fences = f.exported(t)
	require.Empty(t, sessions)
	require.Equal(t, map[string]int{"young": 0}, fences, "old, retired for longer than the retention, is forgotten; young is kept")
	require.False(t, f.remembers("old"), "the forgotten rollout's slot is still in memory")
	require.True(t, f.remembers("young"), "the rollout retired less long was forgotten")

	_, err := f.data.Session(context.Background(), "old")
	requireRemote(t, err, http.StatusNotFound, protocol.CodeUnknownSession)
	requireRemote(t, f.operate("old", 0, "old/t1", 1), http.StatusNotFound, protocol.CodeUnknownSession)
	requireRemote(t, f.operate("old", 1, "old/t1", 1), http.StatusConflict, protocol.CodeAttemptNotInstalled)
	require.False(t, f.remembers("old"), "a refused request of a forgotten rollout left a slot behind")
	info, err := f.data.Session(context.Background(), "young")
	require.NoError(t, err)
	require.True(t, info.Retired, "young's info = %+v; want it retired", info)
}

// The sweep forgets, not only a checkpoint: a request of a rollout past its
// retention finds it unknown even when no checkpoint was taken.
func TestForgottenWithoutCheckpoint(t *testing.T) {
	f := newForgetFixture(t)
	f.finish(t, "a", 0)
	f.clock.Advance(forgetTestRetain + time.Second)
	requireRemote(t, f.operate("a", 0, "a/t1", 1), http.StatusNotFound, protocol.CodeUnknownSession)
	require.False(t, f.remembers("a"))
}

// A live session is never forgotten, however long it has gone unused.
func TestLiveSessionNeverForgotten(t *testing.T) {
	f := newForgetFixture(t)
	f.start(t, "live", 0)
	f.clock.Advance(1000 * time.Hour)
	sessions, fences := f.exported(t)
	require.Equal(t, []string{"live"}, sessions)
	require.Equal(t, map[string]int{"live": 0}, fences)
	require.NoError(t, f.operate("live", 0, "live/t0", 0), "the old live session still takes its next operation")
}

// A retired session keeps its receipts for the grace, and is not forgotten
// while it keeps them, even past the retention.
func TestRetiredWithReceiptsNotForgotten(t *testing.T) {
	f := newForgetFixture(t, func(c *ServerConfig) { c.RetiredGrace = -1 })
	f.finish(t, "a", 0)
	f.clock.Advance(100 * forgetTestRetain)
	sessions, fences := f.exported(t)
	require.Equal(t, []string{"a"}, sessions)
	require.Equal(t, map[string]int{"a": 0}, fences)
	v, err := f.data.Verify(context.Background(), protocol.VerifyRequest{Identity: envtest.ID("a", 0, "a/verify"), ExpectedRevision: 1})
	require.NoError(t, err)
	require.True(t, v.Replayed, "the retried verify = %+v; want its stored verdict", v)
}

// Within the retention the fence still refuses a stale attempt's request,
// after the session's receipts were dropped; past it, the rollout is
// forgotten and the old attempt's request finds no session (404), and
// nothing is applied either way.
func TestStaleAttemptRefusedWithinRetention(t *testing.T) {
	f := newForgetFixture(t)
	f.start(t, "r", 0)
	f.finish(t, "r", 1) // attempt 1 replaced attempt 0, and finished
	f.clock.Advance(forgetTestRetain - time.Second)
	applied := f.srv.Stats().Applied
	requireRemote(t, f.operate("r", 0, "r/t0", 0), http.StatusConflict, protocol.CodeStaleAttempt)
	_, err := f.data.Start(context.Background(), protocol.StartRequest{Identity: envtest.ID("r", 0, protocol.SeedRequestID("r")),
		Env: counter.Name, Seed: 1, Task: json.RawMessage(`{"target":3}`)})
	requireRemote(t, err, http.StatusConflict, protocol.CodeStaleAttempt)
	require.Equal(t, applied, f.srv.Stats().Applied, "a stale request applied something")

	f.clock.Advance(2 * time.Second)
	requireRemote(t, f.operate("r", 0, "r/t0", 0), http.StatusNotFound, protocol.CodeUnknownSession)
	require.Equal(t, applied, f.srv.Stats().Applied)
}

// A fence without a session (an attempt authorised that never started) is
// forgotten after the retention too; a fence raised again starts it over.
func TestFenceOnlyRolloutForgotten(t *testing.T) {
	f := newForgetFixture(t)
	_, err := f.ctl.Authorise(context.Background(), "f", 2)
	require.NoError(t, err)
	f.clock.Advance(forgetTestRetain - time.Second)
	_, fences := f.exported(t)
	require.Equal(t, map[string]int{"f": 2}, fences)
	f.clock.Advance(2 * time.Second)
	_, fences = f.exported(t)
	require.Empty(t, fences)
	require.False(t, f.remembers("f"))
}

// A negative ForgetAfter keeps every rollout, as before.
func TestForgetAfterNegativeKeepsAll(t *testing.T) {
	f := newForgetFixture(t, func(c *ServerConfig) { c.ForgetAfter = -1 })
	f.finish(t, "a", 0)
	f.clock.Advance(1000 * time.Hour)
	_, fences := f.exported(t)
	require.Equal(t, map[string]int{"a": 0}, fences)
	_, err := f.data.Session(context.Background(), "a")
	require.NoError(t, err)
}

// An idle server forgets too: the sweep timer lets go of finished rollouts
// with no request or checkpoint arriving.
func TestIdleStoreForgetsFinishedRollouts(t *testing.T) {
	st := newSessionStore(0, time.Millisecond, 50*time.Millisecond, nil)
	for _, id := range []string{"a", "b"} {
		sl := st.slotFor(id)
		sl.mu.Lock()
		st.install(sl, &session{Env: counter.Name, Retired: true, Receipts: map[string]receipt{}})
		sl.mu.Unlock()
	}
	live := st.slotFor("live")
	live.mu.Lock()
	st.install(live, &session{Env: counter.Name, Receipts: map[string]receipt{}})
	live.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st.mu.Lock()
		slots, evicted, pending := len(st.slots), len(st.evictedInfo), st.forgetSweep != nil
		st.mu.Unlock()
		if slots == 1 && evicted == 0 && !pending {
			require.NotNil(t, st.lookup("live"), "the live session's slot was forgotten")
			return
		}
		require.False(t, time.Now().After(deadline), "after 10 s: %d slots, %d evicted infos, sweep pending %v; want 1 (the live one), 0, false",
			slots, evicted, pending)
		time.Sleep(5 * time.Millisecond)
	}
}

// A sweep running all the time never forgets a rollout in use: with a
// retention of a millisecond, every episode started meanwhile still runs to
// its verdict.
func TestSweepNeverForgetsRolloutsInUse(t *testing.T) {
	s, err := NewServer(ServerConfig{Envs: []envs.Environment{counter.New()}, InsecureNoDataAuth: true,
		RetiredGrace: time.Nanosecond, ForgetAfter: time.Millisecond})
	require.NoError(t, err)
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	c := protocol.NewClient(hs.URL, hs.Client())
	ctx, stop := context.WithCancel(context.Background())
	swept := make(chan struct{})
	go func() {
		defer close(swept)
		for ctx.Err() == nil {
			s.store.sweepForgotten()
		}
	}()
	defer func() { stop(); <-swept }()
	for i := range 30 {
		id := fmt.Sprintf("r%d", i)
		_, err := c.Start(ctx, protocol.StartRequest{Identity: envtest.ID(id, 0, protocol.SeedRequestID(id)), Env: counter.Name,
			Task: json.RawMessage(`{"target":3}`)})
		require.NoError(t, err, "start %s", id)
		for turn := range 3 {
			_, err := c.Operate(ctx, protocol.OperateRequest{Identity: envtest.ID(id, 0, fmt.Sprintf("%s/t%d", id, turn)),
				ExpectedRevision: int64(turn), Tool: counter.ToolIncrement, Arguments: json.RawMessage(`{"amount":1}`)})
			require.NoError(t, err, "operate %s turn %d", id, turn)
		}
		v, err := c.Verify(ctx, protocol.VerifyRequest{Identity: envtest.ID(id, 0, id+"/verify"), ExpectedRevision: 3})
		require.NoError(t, err, "verify %s", id)
		require.InDelta(t, 1.0, v.Verdict.Reward, 1e-9, "verify %s = %+v", id, v)
	}
}
