package envserver_test

import (
	"context"
	"fmt"
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

// A checkpoint's size follows the rollouts of the retention window, not the
// server's history: with 10 rollouts finishing every (simulated) minute, the
// cut at 90 minutes is no bigger than the one at 30 once finished rollouts
// are forgotten (grace 10 minutes, forget-after 20); remembering every
// rollout, as before forgetting existed (and as a negative ForgetAfter
// still does), it grows with each one.
func TestCheckpointSizeFollowsRetentionNotHistory(t *testing.T) {
	for _, tc := range []struct {
		name        string
		forgetAfter time.Duration
		bounded     bool
	}{
		{"forget after 20 minutes", 20 * time.Minute, true},
		{"never forget", -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sizes := checkpointSizesOverTime(t, tc.forgetAfter)
			t.Logf("%s: checkpoint bytes at 30, 60, 90 minutes (300, 600, 900 rollouts finished): %v", tc.name, sizes)
			if tc.bounded {
				require.LessOrEqual(t, sizes[2], sizes[0]*11/10, "the cut at 90 minutes (%d B) is more than 10%% above the one at 30 (%d B)", sizes[2], sizes[0])
			} else {
				// Each finished rollout remembered costs its fence's tar entry
				// and index line, over 1 KB.
				require.GreaterOrEqual(t, sizes[2]-sizes[0], int64(600*1000), "without forgetting the cut should grow with the 600 rollouts finished meanwhile: %v", sizes)
			}
		})
	}
}

// checkpointSizesOverTime finishes 10 rollouts a minute for 90 simulated
// minutes and commits a checkpoint every 30, returning their sizes.
func checkpointSizesOverTime(t *testing.T, forgetAfter time.Duration) []int64 {
	t.Helper()
	ctx := context.Background()
	clock := testsupport.NewClock(time.Unix(1_000_000, 0))
	f := newCtlFixture(t, func(c *envserver.ServerConfig) {
		c.RetiredGrace, c.ForgetAfter, c.Now = 10*time.Minute, forgetAfter, clock.Now
	})
	var sizes []int64
	n := 0
	for minute := 1; minute <= 90; minute++ {
		for range 10 {
			id := fmt.Sprintf("r%04d", n)
			n++
			f.startEnv(t, counter.Name, id, 0)
			f.operate(t, inc(id, 0, id+"/t0/c0", 0, 1))
			_, err := f.c.Verify(ctx, protocol.VerifyRequest{Identity: envtest.ID(id, 0, protocol.VerifyRequestID(id)), ExpectedRevision: 1})
			require.NoError(t, err)
		}
		clock.Advance(time.Minute)
		if minute%30 == 0 {
			id := fmt.Sprintf("ck%d", minute)
			f.prepare(t, id)
			c, err := f.cc.Commit(ctx, protocol.CommitRequest{CheckpointID: id, Location: filepath.Join(t.TempDir(), id)})
			require.NoError(t, err)
			f.resume(t, id)
			sizes = append(sizes, c.Bytes)
		}
	}
	return sizes
}

// A finished rollout a restore installs from a checkpoint (a restarted,
// empty server gets back the verdicts it lost) keeps the retention clock
// it had: its stored responses go a grace period after its verify, not
// after the restore, and it is forgotten forget-after later. A server
// restored again and again (a recovery after each kill) would otherwise
// carry every such rollout, receipts and all, from cut to cut.
func TestRestoredFinishedRolloutKeepsItsRetentionClock(t *testing.T) {
	ctx := context.Background()
	clock := testsupport.NewClock(time.Unix(1_000_000, 0))
	retention := func(c *envserver.ServerConfig) {
		c.RetiredGrace, c.ForgetAfter, c.Now = 5*time.Minute, time.Minute, clock.Now
	}
	a := newCtlFixture(t, retention)
	a.startEnv(t, counter.Name, "done", 0)
	a.operate(t, inc("done", 0, "done/t0/c0", 0, 1))
	_, err := a.c.Verify(ctx, protocol.VerifyRequest{Identity: envtest.ID("done", 0, protocol.VerifyRequestID("done")), ExpectedRevision: 1})
	require.NoError(t, err)
	a.startEnv(t, counter.Name, "live", 0)
	clock.Advance(2 * time.Minute)
	loc := filepath.Join(t.TempDir(), "c1")
	a.prepare(t, "c1")
	_, err = a.cc.Commit(ctx, protocol.CommitRequest{CheckpointID: "c1", Location: loc})
	require.NoError(t, err)
	a.resume(t, "c1")

	clock.Advance(2 * time.Minute) // 4 minutes after the verify
	b := newCtlFixture(t, retention)
	_, err = b.cc.Restore(ctx, protocol.RestoreRequest{CheckpointID: "c1", Location: loc, Attempts: map[string]int{"live": 1}})
	require.NoError(t, err)
	b.resume(t, "c1")
	info, err := b.c.Session(ctx, "done")
	require.NoError(t, err, "the restarted server got the verdict back")
	require.True(t, info.Retired)

	clock.Advance(2*time.Minute + 30*time.Second) // 6.5 minutes after the verify, 2.5 after the restore
	_, err = b.c.Session(ctx, "done")
	wantRemote(t, err, http.StatusNotFound, protocol.CodeUnknownSession)
	prep := b.prepare(t, "c2")
	c2, err := b.cc.Commit(ctx, protocol.CommitRequest{CheckpointID: "c2", Location: filepath.Join(t.TempDir(), "c2")})
	require.NoError(t, err)
	b.resume(t, "c2")
	require.Equal(t, []string{"live"}, members(prep))
	require.Equal(t, 1, c2.Sessions, "the next cut no longer carries the finished rollout")
}
