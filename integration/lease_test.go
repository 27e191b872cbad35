package integration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// A checkpoint whose coordinator vanishes after it parked the set (its
// worker SIGKILLed right after the park, its workflow then terminated, so
// no abort ever runs) holds the set only for its lease: the rollouts and
// the environment servers resume by themselves at deadline + settle +
// lease grace, with no operator resume, and every rollout ends as in the
// uninterrupted run (same outcome, each mutation applied once, one
// completed run, attempt 0).
func TestCheckpointLeaseEndsParkOfVanishedCoordinator(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	base := matrixBaseline(t, false)
	s := newMatrixStack(t, false, "600ms", false)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	doomed := s.startWorker(fmt.Sprintf("%s=%s=kill@1", failpoint.EnvVar, failpoint.CoordinatorAfterPark))
	s.submitAll(ctx)
	s.waitMidFlight(ctx)

	const id, timeout, grace = "cp-vanish", 15 * time.Second, 5 * time.Second
	wfID := checkpoint.CheckpointWorkflowID(id)
	started := time.Now()
	_, err := s.c.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: wfID, TaskQueue: rollout.TaskQueue}, checkpoint.CheckpointWorkflowName,
		checkpoint.CheckpointInput{CheckpointID: id, Set: matrixSet, Root: s.root, Participants: s.participants(),
			Timeout: timeout.String(), LeaseGrace: grace.String()})
	require.NoError(t, err)
	select {
	case <-doomed.done:
	case <-ctx.Done():
		require.FailNow(t, "the worker never reached "+failpoint.CoordinatorAfterPark)
	}
	require.ErrorContains(t, doomed.Err(), "killed")
	require.NoError(t, s.c.client.TerminateWorkflow(ctx, wfID, "", "the coordinator vanished"))
	s.note("worker SIGKILLed at %s, checkpoint workflow terminated %s after its start", failpoint.CoordinatorAfterPark, time.Since(started).Round(time.Millisecond))
	for _, u := range s.participants() {
		st, err := protocol.NewControlClient(u, s.c.token, nil).Status(ctx)
		require.NoError(t, err)
		require.Equal(t, protocol.AdmissionClosed, st.Admission, "%s is held by the vanished checkpoint", u)
	}

	s.startWorker()
	results := s.c.acknowledgeAll(ctx, matrixSet, matrixCount)
	took := time.Since(started)
	lease := timeout + checkpoint.CheckpointSettle + grace
	s.note("every rollout finished %s after the checkpoint started; its lease was %s (deadline %s + settle %s + grace %s)",
		took.Round(time.Millisecond), lease, timeout, checkpoint.CheckpointSettle, grace)
	for _, r := range results {
		require.Equal(t, 0, r.Attempt, "%s: no restore, no new attempt", r.RolloutID)
	}
	for _, u := range s.participants() {
		st, err := protocol.NewControlClient(u, s.c.token, nil).Status(ctx)
		require.NoError(t, err)
		require.Equal(t, protocol.AdmissionOpen, st.Admission, "%s resumed by itself", u)
		require.Equal(t, protocol.PhaseIdle, st.Phase, "%s resumed by itself", u)
	}
	checks := s.check(ctx, base, results, nil)
	for class, cc := range checks {
		t.Logf("%-10s %d rollouts, %d equal to uninterrupted, %d final revision equal, %d one completed run", class, cc.total, cc.equal, cc.revOK, cc.oneRun)
	}
}
