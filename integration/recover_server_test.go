package integration_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// TestRecoverServer is scoped recovery on real processes: a mixed set runs
// on two environment servers, a checkpoint is cut, the rollouts go on past
// it, then one server is SIGKILLed. RecoverServer moves only its rollouts to
// a replacement process (from their boundary, or from their seed); the
// rollouts of the healthy server keep their single run, attempt 0 and
// their server's mutation count. Every result equals the uninterrupted
// run's, every moved rollout's environment ends at the baseline revision
// (no mutation applied twice in its lineage), and each rollout completes
// exactly once.
func TestRecoverServer(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	envList := []string{"counter", "blackjack", "workplace", "sandbox"}
	count := 16
	// A larger set measures the time to recover more rollouts
	// (TURNSTILE_RECOVER_COUNT=64); CI runs 16.
	if n, err := strconv.Atoi(os.Getenv("TURNSTILE_RECOVER_COUNT")); err == nil && n > 0 {
		count = n
	}
	s := newTwoServers(t, envList, count)
	c := s.c
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	// 1. The uninterrupted baseline.
	baseline, baseRevisions, baseAppliedA := s.baseline(ctx)

	// 2. The same set with a slower model, checkpointed mid-flight.
	s.slowModel()
	beforeRec := s.appliedA()
	s.submitMidFlight(ctx)
	root := filepath.Join(c.dir, "checkpoints")
	records := s.checkpoint(ctx, root)

	// 3. Server B's rollouts go on past the cut (mutations the checkpoint
	// does not hold), then B dies mid-flight.
	s.waitPastCut(ctx, records)
	s.procB.kill()
	<-s.procB.done

	// 4. A replacement with the dead server's name, on a new address; the
	// operator's command moves B's rollouts there.
	replacement, _ := c.startNamedEnvServer("env-1")
	require.NotEqual(t, s.serverB, replacement)
	tc := trainer.New(c.client, rollout.TaskQueue)
	req := trainer.RecoverServerRequest{Set: "rec", Server: s.serverB, Replacement: replacement, Root: root}
	start := time.Now()
	started, err := tc.RecoverServer(ctx, req)
	require.NoError(t, err)
	require.Equal(t, checkpoint.RecoverServerWorkflowID("rec", s.serverB), started.WorkflowID)
	res, err := tc.WaitRecoverServer(ctx, started)
	require.NoError(t, err)
	t.Logf("recovery: %d moved (%d continue, %d of them by replay; %d start over, %d after a replay diverged), %d terminated, %d untouched, in %s",
		res.Affected, res.Continue, res.Replayed, res.StartOver, res.ReplayDiverged, res.Terminated, res.Untouched, time.Since(start).Round(time.Millisecond))
	require.Zero(t, res.ReplayDiverged, "the sandbox answers a replay as the first time")
	require.Equal(t, res.Affected, res.Continue+res.StartOver)
	require.Equal(t, "cp-1", res.CheckpointID, "the newest committed checkpoint of the set")
	require.Equal(t, 1, res.Participant)
	require.Positive(t, res.Affected)
	again, err := tc.RecoverServer(ctx, req)
	require.NoError(t, err)
	require.Equal(t, started, again, "a repeated request starts nothing")

	// 5. Every rollout completes once, as in the uninterrupted run.
	moved := s.checkRecovered(ctx, baseline, baseRevisions, replacement)
	require.Equal(t, res.Affected, moved, "exactly the rollouts of the dead server moved")
	require.Equal(t, baseAppliedA, s.appliedA()-beforeRec, "the healthy server applied each mutation of its rollouts once")
}

// allRuns counts every run (any status) of a rollout's workflow ID.
func (c *cluster) allRuns(ctx context.Context, rolloutID string) int {
	c.t.Helper()
	q := fmt.Sprintf(`WorkflowId=%q`, rollout.WorkflowID(rolloutID))
	resp, err := c.client.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: "default", Query: q})
	require.NoError(c.t, err)
	return int(resp.GetCount())
}
