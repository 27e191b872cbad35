package envserver_test

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/internal/testsupport"
	"github.com/turnstile-rl/turnstile/internal/testsupport/envtest"
	"github.com/turnstile-rl/turnstile/participants/envserver"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// A checkpoint cut while the server still remembered finished rollouts (as
// every checkpoint written before forgetting existed does) restores after
// the server forgot them, onto it or onto a fresh server; a later cut no
// longer carries them.
func TestCheckpointOfForgottenRolloutsStillRestores(t *testing.T) {
	ctx := context.Background()
	clock := testsupport.NewClock(time.Unix(1_000_000, 0))
	retention := func(c *envserver.ServerConfig) {
		c.RetiredGrace, c.ForgetAfter, c.Now = time.Minute, 5*time.Minute, clock.Now
	}
	f := newCtlFixture(t, retention)
	for _, id := range []string{"done1", "done2"} {
		f.startEnv(t, counter.Name, id, 0)
		_, err := f.c.Verify(ctx, protocol.VerifyRequest{Identity: envtest.ID(id, 0, protocol.VerifyRequestID(id))})
		require.NoError(t, err)
	}
	f.startEnv(t, counter.Name, "live", 0)
	clock.Advance(2 * time.Minute) // the verified sessions' receipts are dropped; their fences kept

	before := filepath.Join(t.TempDir(), "before")
	prep := f.prepare(t, "before")
	require.Equal(t, []string{"live"}, members(prep))
	_, err := f.cc.Commit(ctx, protocol.CommitRequest{CheckpointID: "before", Location: before})
	require.NoError(t, err)
	f.resume(t, "before")

	clock.Advance(4 * time.Minute) // 6 minutes since the verifies: forgotten
	_, err = f.c.Session(ctx, "done1")
	wantRemote(t, err, http.StatusNotFound, protocol.CodeUnknownSession)

	// Onto the server that forgot them: the cut's fences of done1 and done2
	// are read and checked; the rollouts it names are fenced.
	res, err := f.cc.Restore(ctx, protocol.RestoreRequest{CheckpointID: "before", Location: before,
		Attempts: map[string]int{"live": 1, "done1": 1}})
	require.NoError(t, err, "restore of a cut holding forgotten rollouts")
	require.Equal(t, []string{"live"}, summaryIDs(res.Restored))
	require.Equal(t, []protocol.FenceSummary{{RolloutID: "done1", Attempt: 1}}, res.Fenced)
	f.resume(t, "before")
	_, err = f.c.Operate(ctx, inc("done1", 0, "done1/t0/c0", 0, 1))
	wantRemote(t, err, http.StatusConflict, protocol.CodeStaleAttempt)

	// Onto a fresh server.
	b := newCtlFixture(t, retention)
	res, err = b.cc.Restore(ctx, protocol.RestoreRequest{CheckpointID: "before", Location: before, Attempts: map[string]int{"live": 1}})
	require.NoError(t, err)
	require.Equal(t, []string{"live"}, summaryIDs(res.Restored))
}

func summaryIDs(list []protocol.SessionSummary) []string {
	out := []string{}
	for _, s := range list {
		out = append(out, s.RolloutID)
	}
	return out
}
