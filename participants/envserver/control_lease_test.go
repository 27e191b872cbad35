package envserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/internal/testsupport/envtest"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// A prepared checkpoint session whose coordinator says nothing more for its
// lease resumes by itself (R28): admission reopens, the id is retired (a
// late commit is stale, a late resume replays), and the session's rollouts
// go on. A commit within the lease renews it, and the committed session
// resumes by itself in turn. A lease outside its bounds is refused.
func TestPrepareLease(t *testing.T) {
	ctx := context.Background()
	t.Run("prepared session expires", func(t *testing.T) {
		f := newCtlFixture(t)
		f.startEnv(t, "counter", "r1", 0)
		_, err := f.cc.Prepare(ctx, protocol.PrepareRequest{CheckpointID: "c1", Deadline: future(), LeaseMillis: 50})
		require.NoError(t, err)
		f.waitStatus(t, "the lease ending the session", func(st protocol.ControlStatus) bool {
			return st.Phase == protocol.PhaseIdle
		})
		f.operate(t, protocol.OperateRequest{Identity: envtest.ID("r1", 0, "r1/t1/c0"), ExpectedRevision: 0,
			Tool: counter.ToolIncrement, Arguments: json.RawMessage(`{"amount":1}`)})
		_, err = f.cc.Commit(ctx, protocol.CommitRequest{CheckpointID: "c1", Location: t.TempDir()})
		wantRemote(t, err, http.StatusConflict, protocol.CodeStaleCheckpoint)
		f.resume(t, "c1") // a late resume replays
	})
	t.Run("commit renews, then the committed session expires", func(t *testing.T) {
		f := newCtlFixture(t)
		f.startEnv(t, "counter", "r1", 0)
		_, err := f.cc.Prepare(ctx, protocol.PrepareRequest{CheckpointID: "c1", Deadline: future(), LeaseMillis: 5000})
		require.NoError(t, err)
		_, err = f.cc.Commit(ctx, protocol.CommitRequest{CheckpointID: "c1", Location: t.TempDir()})
		require.NoError(t, err)
		require.Equal(t, protocol.PhaseCommitted, f.status(t).Phase)
		f.waitStatus(t, "the lease ending the committed session", func(st protocol.ControlStatus) bool {
			return st.Phase == protocol.PhaseIdle
		})
		_, err = f.cc.Prepare(ctx, protocol.PrepareRequest{CheckpointID: "c1", Deadline: future()})
		wantRemote(t, err, http.StatusConflict, protocol.CodeStaleCheckpoint)
	})
	t.Run("lease out of bounds", func(t *testing.T) {
		f := newCtlFixture(t)
		for _, ms := range []int64{-1, protocol.MaxLeaseMillis + 1} {
			_, err := f.cc.Prepare(ctx, protocol.PrepareRequest{CheckpointID: "c1", Deadline: future(), LeaseMillis: ms})
			wantRemote(t, err, http.StatusBadRequest, protocol.CodeMalformed)
			require.Equal(t, protocol.PhaseIdle, f.status(t).Phase, "a refused prepare changes nothing")
		}
	})
}
