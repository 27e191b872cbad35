package coordinator_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
)

// deadURL is an address nothing listens at: connections are refused.
func deadURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return "http://" + addr
}

// failingURL is a participant that answers every call with a 503.
func failingURL(t *testing.T) string {
	t.Helper()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "restarting", http.StatusServiceUnavailable)
	}))
	t.Cleanup(hs.Close)
	return hs.URL
}

// heldFor counts the rollouts of the world still held for checkpoint ck.
func (w *world) heldFor(ck string) int {
	w.tc.mu.Lock()
	defer w.tc.mu.Unlock()
	n := 0
	for _, r := range w.tc.runs {
		if r.heldFor == ck {
			n++
		}
	}
	return n
}

// An abort releases every rollout and every reachable participant whatever
// another participant does. One nothing listens at is dead: it holds
// nothing, so it is reported and the abort succeeds. One answering 5xx may
// still hold admission closed: the abort fails, to be retried.
func TestAbortWithAnUnreachableParticipantStillReleasesEverything(t *testing.T) {
	cases := []struct {
		name            string
		other           func(t *testing.T) string
		wantErr         bool
		wantUnreachable bool
	}{
		{name: "connection refused", other: deadURL, wantUnreachable: true},
		{name: "503", other: failingURL, wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			w := newWorld(t)
			w.cut(t)
			require.Equal(t, 4, w.heldFor("ck1"))
			other := tc.other(t)
			res, err := w.coord.AbortCheckpoint(ctx, checkpoint.AbortCheckpointInput{
				CheckpointID: "ck1", Root: w.root, Participants: []string{other, w.env.url},
			})
			if tc.wantErr {
				require.ErrorContains(t, err, other)
				requireNotType(t, err, checkpoint.ErrParticipantUnreachable)
			} else {
				require.NoError(t, err)
				require.Equal(t, 1, res.Participants)
			}
			if tc.wantUnreachable {
				require.Equal(t, []string{other}, res.Unreachable)
			} else {
				require.Empty(t, res.Unreachable)
			}
			require.Equal(t, 4, res.Rollouts, "every running member is released")
			require.Zero(t, w.heldFor("ck1"), "no rollout stays parked")
			st := w.env.status(t)
			require.Equal(t, protocol.PhaseIdle, st.Phase)
			require.Equal(t, protocol.AdmissionOpen, st.Admission)
		})
	}
}

// A participant killed after it prepared its cut cannot commit it: the
// commit fails at once, non-retryably, and writes no manifest.
func TestCommitToAKilledParticipantFailsAtOnce(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	w.cut(t)
	w.env.kill()
	_, err := w.coord.CommitCheckpoint(ctx, checkpoint.CommitCheckpointInput{
		CheckpointID: "ck1", Set: "s1", Root: w.root, Participants: []string{w.env.url},
	})
	requireType(t, err, checkpoint.ErrParticipantUnreachable)
	require.ErrorContains(t, err, w.env.url)
	_, err = readAggregate(t, filepath.Join(w.root, "ck1"), "ck1")
	require.ErrorContains(t, err, "not a checkpoint")

	res, err := w.coord.AbortCheckpoint(ctx, checkpoint.AbortCheckpointInput{CheckpointID: "ck1", Root: w.root, Participants: []string{w.env.url}})
	require.NoError(t, err)
	require.Equal(t, []string{w.env.url}, res.Unreachable)
	require.Zero(t, w.heldFor("ck1"))
}

// requireNotType checks err is an error, but not an application error of
// type typ.
func requireNotType(t *testing.T, err error, typ string) {
	t.Helper()
	require.Error(t, err)
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) {
		require.NotEqual(t, typ, ae.Type(), "error %v", err)
	}
}

// A checkpoint naming a participant nothing listens at fails its prepare at
// once, rather than retrying until the deadline.
func TestPrepareWithAnUnreachableParticipantFailsAtOnce(t *testing.T) {
	w := newWorld(t)
	dead := deadURL(t)
	_, err := w.coord.PrepareParticipants(context.Background(), checkpoint.PrepareParticipantsInput{
		CheckpointID: "ck1", Set: "s1", Root: w.root, Participants: []string{w.env.url, dead}, Deadline: time.Now().Add(time.Minute),
	})
	requireType(t, err, checkpoint.ErrParticipantUnreachable)
	require.ErrorContains(t, err, dead)
}
