package envserver_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/testsupport"
	"github.com/turnstile-rl/turnstile/internal/testsupport/envtest"
	"github.com/turnstile-rl/turnstile/participants/envserver"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// A retired session keeps its receipts for RetiredGrace after its last use
// (its retirement or a replay from it); after that a retry of its verify
// fails closed with session_retired, naming the drop, and applies nothing.
func TestRetiredSessionsExpireAfterGrace(t *testing.T) {
	clock := testsupport.NewClock(time.Unix(1_000_000, 0))
	f := newFixture(t, func(c *envserver.ServerConfig) {
		c.RetiredGrace = time.Minute
		c.Now = clock.Now
	})
	verify := func(rollout string) (protocol.VerifyResponse, error) {
		return f.c.Verify(context.Background(), protocol.VerifyRequest{Identity: envtest.ID(rollout, 0, rollout+"/verify")})
	}
	replays := func(rollout string) {
		t.Helper()
		v, err := verify(rollout)
		require.NoError(t, err, "%s: verify retry = %+v, %v; want a replay", rollout, v, err)
		require.True(t, v.Replayed, "%s: verify retry = %+v, %v; want a replay", rollout, v, err)
	}
	dropped := func(rollout string) {
		t.Helper()
		_, err := verify(rollout)
		wantRemote(t, err, http.StatusConflict, protocol.CodeSessionRetired, "receipts dropped")
	}
	for _, r := range []string{"a", "b"} {
		f.start(t, r, 0, `{"target":0}`)
		_, err := verify(r)
		require.NoError(t, err)
	}
	clock.Advance(40 * time.Second)
	replays("a")   // used at 40 s
	f.info(t, "b") // reading its info is no use of it
	clock.Advance(30 * time.Second)
	dropped("b") // unused for 70 s
	replays("a") // unused for 30 s; used again at 70 s
	clock.Advance(59 * time.Second)
	replays("a") // used at 129 s
	clock.Advance(time.Minute)
	dropped("a")

	applied := f.srv.Stats().Applied
	_, err := f.c.Start(context.Background(), protocol.StartRequest{Identity: envtest.ID("b", 0, protocol.SeedRequestID("b")), Env: "counter", Task: []byte(`{"target":0}`)})
	wantRemote(t, err, http.StatusConflict, protocol.CodeSessionRetired)
	got := f.srv.Stats().Applied
	require.Equal(t, applied, got, "a refused retry applied something: applied %d → %d", applied, got)
	info := f.info(t, "b")
	require.True(t, info.Retired, "dropped session's info = %+v; want it retired", info)
	require.Equal(t, "counter", info.Env, "dropped session's info = %+v; want it retired", info)
	// A higher attempt may start over.
	st := f.start(t, "b", 1, `{"target":0}`)
	require.False(t, st.Replayed, "start-over after the drop replayed: %+v", st)
}

// A negative grace keeps receipts until the count bound alone drops them.
func TestRetiredSessionsWithoutGrace(t *testing.T) {
	clock := testsupport.NewClock(time.Unix(1_000_000, 0))
	f := newFixture(t, func(c *envserver.ServerConfig) {
		c.RetiredGrace = -1
		c.Now = clock.Now
	})
	f.start(t, "a", 0, `{"target":0}`)
	req := protocol.VerifyRequest{Identity: envtest.ID("a", 0, "a/verify")}
	_, err := f.c.Verify(context.Background(), req)
	require.NoError(t, err)
	clock.Advance(1000 * time.Hour)
	v, err := f.c.Verify(context.Background(), req)
	require.NoError(t, err, "verify retry = %+v, %v; want a replay", v, err)
	require.True(t, v.Replayed, "verify retry = %+v, %v; want a replay", v, err)
}
