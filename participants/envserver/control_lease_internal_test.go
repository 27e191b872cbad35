package envserver

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// A lease whose timer fires after a newer control operation began (a
// commit running, or a restore that took the committed session over) ends
// nothing: the operation holds the session. The fence is driven directly,
// and the timer's firing is simulated by the call it would make.
func TestLeaseHeldByNewerOperation(t *testing.T) {
	ctx := context.Background()
	f := newPhaseFence()
	var expired []string
	f.lease.expire = func(id string, _ uint64) { expired = append(expired, id) }

	run, _, err := f.begin(ctx, opSpec{op: opPrepare, id: "c1", checkpoint: "c1", lease: time.Hour,
		allowed: []protocol.Phase{protocol.PhaseIdle}, during: protocol.PhasePreparing})
	require.NoError(t, err)
	f.freeze(run, serverState{}, nil)
	f.mu.Lock()
	prepared := f.lease.gen
	require.NotNil(t, f.lease.timer, "a prepared session holds a lease")
	f.mu.Unlock()

	commit, _, err := f.begin(ctx, opSpec{op: opCommit, id: "c1", checkpoint: "c1", key: "location /x",
		allowed: []protocol.Phase{protocol.PhasePrepared}, during: protocol.PhaseCommitting})
	require.NoError(t, err)
	f.mu.Lock()
	require.Nil(t, f.startExpiryLocked("c1", prepared), "the prepare's lease ends nothing once the commit began")
	require.Nil(t, f.startExpiryLocked("c1", f.lease.gen), "no lease ends a running commit")
	f.mu.Unlock()
	f.succeed(commit, protocol.PhaseCommitted, protocol.CommitResponse{})
	f.mu.Lock()
	committed := f.lease.gen
	require.NotNil(t, f.lease.timer, "the commit renewed the lease")
	f.mu.Unlock()

	restore, _, err := f.begin(ctx, opSpec{op: opRestore, id: "r1", checkpoint: "c1", during: protocol.PhaseRestoring})
	require.NoError(t, err, "a restore takes the committed session over")
	f.mu.Lock()
	require.Nil(t, f.startExpiryLocked("c1", committed), "the commit's lease ends nothing once the restore began")
	f.mu.Unlock()
	f.succeed(restore, protocol.PhaseRestored, protocol.RestoreResponse{})
	f.mu.Lock()
	require.Nil(t, f.lease.timer, "a restore session holds no lease")
	f.mu.Unlock()
	require.Empty(t, expired)
	require.Equal(t, protocol.PhaseRestored, f.snapshot().phase)
}
