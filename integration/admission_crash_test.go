package integration_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// countStarted counts the set's attempt-0 runs that did not continue as new:
// one per rollout started.
func (c *cluster) countStarted(ctx context.Context, set string) int {
	c.t.Helper()
	resp, err := c.client.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{
		Namespace: "default", Query: rollout.SetQuery(set) + " AND " + rollout.SARolloutAttempt + ` = 0 AND ExecutionStatus != "ContinuedAsNew"`,
	})
	require.NoError(c.t, err)
	return int(resp.GetCount())
}

// TestAdmissionSubmitterKilledMidSubmit: a starter killed (SIGKILL, by the
// submit.between-batches failpoint) after the first of two batches leaves
// that batch queued and running; the same submission made again queues
// exactly the rest. Every rollout runs once.
func TestAdmissionSubmitterKilledMidSubmit(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	c := newStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	const n = 300 // two batches of at most 256: the kill falls between them
	args := []string{"submit", "--set", "adm2", "--count", fmt.Sprint(n), "--env", "counter", "--seed", "3",
		"--max-in-flight", "64", "--request-id", "adm2"}
	cmd := exec.CommandContext(ctx, filepath.Join(bins.dir, "starter"), args...)
	cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+c.hostPort, "TEMPORAL_NAMESPACE=default",
		failpoint.EnvVar+"="+failpoint.SubmitBetweenBatches+"=kill@1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "the starter was not killed (%v):\n%s", err, out)

	ts := trainer.New(c.client, rollout.TaskQueue)
	adm, ok, err := ts.Admission(ctx, "adm2")
	require.NoError(t, err)
	require.True(t, ok, "the killed submission left no admission")
	require.Equal(t, 1, adm.Received, "batches the admission holds after the kill")
	require.Equal(t, 2, adm.Batches)

	out2, err := c.starter(ctx, args...)
	require.NoError(t, err, "starter submit again:\n%s", out2)
	require.Contains(t, out2, "256 of them were queued before", "the second submission queued the rest only")

	inputs, err := trainer.BuildInputs(trainer.SubmitRequest{Set: "adm2", Count: n, Envs: []string{"counter"}, Seed: 3})
	require.NoError(t, err)
	require.NoError(t, ts.Wait(ctx, trainer.WaitRequest{Set: "adm2", Inputs: inputs}))
	sum, err := ts.Summary(ctx, "adm2")
	require.NoError(t, err)
	require.Equal(t, trainer.Summary{Rollouts: n, Completed: n}, zeroMeans(sum.Overall), "every rollout completes")
	require.Equal(t, n, c.countStarted(ctx, "adm2"), "every rollout started exactly once")
	adm, _, err = ts.Admission(ctx, "adm2")
	require.NoError(t, err)
	require.Equal(t, n, adm.Counts.Admitted)
	require.Zero(t, adm.Queued)
}

// TestAdmissionRaiseMaxInFlightLive: a set running one rollout at a time
// runs more at once as soon as max_in_flight is raised, and completes.
func TestAdmissionRaiseMaxInFlightLive(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	c := newStack(t, "--latency", "200ms")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ts := trainer.New(c.client, rollout.TaskQueue)
	const n = 12
	res, err := ts.Submit(ctx, trainer.SubmitRequest{Set: "adm3", Count: n, Envs: []string{"counter"}, Seed: 9, MaxInFlight: 1, RequestID: "adm3"})
	require.NoError(t, err)
	c.waitFor("one rollout running, the others queued", nil, 2*time.Minute, func() bool {
		adm, ok, err := ts.Admission(ctx, "adm3")
		require.LessOrEqual(t, adm.Running, 1, "more than max_in_flight 1 running before the raise")
		return err == nil && ok && adm.Running == 1 && adm.Queued > 0
	})
	st, err := ts.SetMaxInFlight(ctx, "adm3", n)
	require.NoError(t, err)
	require.Equal(t, n, st.MaxInFlight)
	c.waitFor("more than one rollout running after the raise", nil, 2*time.Minute, func() bool {
		adm, ok, err := ts.Admission(ctx, "adm3")
		return err == nil && ok && (adm.Running > 1 || adm.Queued == 0)
	})
	require.NoError(t, ts.Wait(ctx, trainer.WaitRequest{Set: "adm3", Inputs: res.Inputs}))
	sum, err := ts.Summary(ctx, "adm3")
	require.NoError(t, err)
	require.Equal(t, trainer.Summary{Rollouts: n, Completed: n}, zeroMeans(sum.Overall))
	require.Equal(t, n, c.countStarted(ctx, "adm3"))
}
