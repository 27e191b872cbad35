package coordinator_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/activities/coordinator"
	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
)

// quickLiveness declares a participant hung after about a second.
var quickLiveness = coordinator.Liveness{Every: 200 * time.Millisecond, Timeout: 200 * time.Millisecond, Misses: 3}

// requireHung checks err is the non-retryable ParticipantHung naming url.
func requireHung(t *testing.T, err error, url string) {
	t.Helper()
	var ae *temporal.ApplicationError
	require.True(t, errors.As(err, &ae), "want an application error, got %v", err)
	require.Equal(t, checkpoint.ErrParticipantHung, ae.Type(), "%v", err)
	require.True(t, ae.NonRetryable(), "a retry would only wait on the same silence")
	require.ErrorContains(t, err, url)
}

// A participant that hangs (answers nothing, refuses nothing) after it
// prepared its cut costs its commit the liveness bound, not the call's
// whole budget (the commit step's tries were 30 minutes each): the commit
// fails non-retryably, writes no manifest, and once the participant
// answers again the abort releases everything.
func TestCommitToAHungParticipantIsBounded(t *testing.T) {
	w := newWorld(t)
	w.cut(t)
	w.coord.Liveness = quickLiveness
	w.env.hang.on()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	_, err := w.coord.CommitCheckpoint(ctx, checkpoint.CommitCheckpointInput{
		CheckpointID: "ck1", Set: "s1", Root: w.root, Participants: []string{w.env.url},
	})
	took := time.Since(start)
	requireHung(t, err, w.env.url)
	require.Less(t, took, time.Minute, "given up by the liveness bound (%s), not the call's context", quickLiveness.Bound())
	_, err = readAggregate(t, filepath.Join(w.root, "ck1"), "ck1")
	require.ErrorContains(t, err, "not a checkpoint", "no manifest without the participant's commit")

	w.env.hang.heal()
	res, err := w.coord.AbortCheckpoint(ctx, checkpoint.AbortCheckpointInput{CheckpointID: "ck1", Root: w.root, Participants: []string{w.env.url}})
	require.NoError(t, err)
	require.Equal(t, 1, res.Participants)
	require.Zero(t, w.heldFor("ck1"), "no rollout stays parked")
	st := w.env.status(t)
	require.Equal(t, protocol.PhaseIdle, st.Phase)
	require.Equal(t, protocol.AdmissionOpen, st.Admission)
}

// A participant hung before the cut fails the prepare by the same bound.
func TestPrepareWithAHungParticipantIsBounded(t *testing.T) {
	w := newWorld(t)
	w.coord.Liveness = quickLiveness
	w.env.hang.on()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	_, err := w.coord.PrepareParticipants(ctx, checkpoint.PrepareParticipantsInput{
		CheckpointID: "ck1", Set: "s1", Root: w.root, Participants: []string{w.env.url}, Deadline: time.Now().Add(2 * time.Minute),
	})
	requireHung(t, err, w.env.url)
	require.Less(t, time.Since(start), time.Minute, "given up by the liveness bound, not the prepare's deadline")
}
