package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workers"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// cutSet submits n counter rollouts of set (the policy answers slowly, so
// they are in flight) and cuts checkpoint k of them, staying paused or not.
func cutSet(ctx context.Context, t *testing.T, c *cluster, set, k string, n int, stayPaused bool) (*trainer.Client, string) {
	t.Helper()
	for i := range n {
		c.submit(ctx, counterInput(set, i, 6))
	}
	tc := trainer.New(c.client, rollout.TaskQueue)
	root := filepath.Join(c.dir, "ckpt")
	_, err := tc.Checkpoint(ctx, trainer.CheckpointRequest{
		Set: set, CheckpointID: k, Root: root, Participants: []string{c.envURL}, Timeout: 90 * time.Second, StayPaused: stayPaused,
	}, true)
	require.NoError(t, err, "checkpoint %s", k)
	return tc, root
}

// exportedIDs are the rollout ids (with their attempts) of set's export.
func exportedIDs(ctx context.Context, t *testing.T, c *cluster, tc *trainer.Client, set string) map[string]int {
	t.Helper()
	store, err := transcriptstore.Open(c.store)
	require.NoError(t, err)
	var buf bytes.Buffer
	_, err = tc.Export(ctx, set, store, &buf)
	require.NoError(t, err)
	out := map[string]int{}
	for _, raw := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if raw == "" {
			continue
		}
		var l trainer.ExportLine
		require.NoError(t, json.Unmarshal([]byte(raw), &l))
		out[l.RolloutID] = l.Attempt
	}
	return out
}

// TestRestoreFencesRunNotYetVisible: a rollout with an id of its own (not a
// submission id, so the restore cannot probe for it) is started just before
// a restore and is not listed by visibility yet: it is started without
// search attributes on a task queue no worker polls, so it has not run a
// single workflow task. The restore's attempt map cannot name it; the set's
// fence record stops it. When a worker picks it up after the restore, it
// stops FencedByRestore before its first environment call: the
// environment server never saw it, and the export does not list it. A
// deliberate re-submission as a higher attempt then completes and is
// exported.
func TestRestoreFencesRunNotYetVisible(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := newStack(t, "--latency", "200ms")
	const set, late = "fz", "fz-custom-late"
	tc, root := cutSet(ctx, t, c, set, "k1", 2, false)

	in := counterInput(set, 0, 3)
	in.RolloutID = late
	const heldQueue = "fz-held"
	run, err := c.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: rollout.WorkflowID(late), TaskQueue: heldQueue}, rollout.WorkflowName, in)
	require.NoError(t, err)

	_, err = tc.Restore(ctx, trainer.RestoreRequest{CheckpointID: "k1", Root: root, Participants: []string{c.envURL}}, true)
	require.NoError(t, err, "restore")
	desc, err := c.client.DescribeWorkflow(ctx, rollout.WorkflowID(late), "")
	require.NoError(t, err)
	info := desc.RawResponse.GetWorkflowExecutionInfo()
	require.Equal(t, enums.WORKFLOW_EXECUTION_STATUS_RUNNING, info.GetStatus(), "the restore could not know the late run, so it did not end it")
	require.Equal(t, run.GetRunID(), info.GetExecution().GetRunId())

	// Now a worker takes the late run: it must not act on the restored world.
	c.startWorker(workers.EnvTaskQueue + "=" + heldQueue)
	err = run.Get(ctx, nil)
	var ae *temporal.ApplicationError
	require.True(t, errors.As(err, &ae), "the late run ended %v, want a FencedByRestore failure", err)
	require.Equal(t, rollout.ErrFencedByRestore, ae.Type(), "%v", err)
	_, err = c.dataClient(c.envURL).Session(ctx, late)
	var re *protocol.RemoteError
	require.True(t, errors.As(err, &re) && re.Status == http.StatusNotFound, "the environment server holds a session of the fenced run: %v", err)

	// The restored set completes; the fenced run is not delivered.
	for i := range 2 {
		var r rollout.Result
		require.NoError(t, c.client.GetWorkflow(ctx, rollout.WorkflowID(rollout.SubmittedID(set, i)), "").Get(ctx, &r))
	}
	got := exportedIDs(ctx, t, c, tc, set)
	require.NotContains(t, got, late, "the fenced run was exported")
	require.Len(t, got, 2)

	// Deliberately re-submitted as a higher attempt, it runs and lands.
	in.Attempt = 1
	var r rollout.Result
	require.NoError(t, c.submit(ctx, in).Get(ctx, &r))
	require.Equal(t, 1, r.Attempt)
	got = exportedIDs(ctx, t, c, tc, set)
	require.Equal(t, 1, got[late], "the re-submitted attempt is exported")
	require.Len(t, got, 3)
}

// TestRestoreOntoStayPausedServer: a checkpoint taken with --stay-paused
// leaves the environment server committed with admission closed; a restore
// of it onto that live server is accepted (it takes the paused session
// over), the server ends open and the restored rollouts complete as their
// new attempts.
func TestRestoreOntoStayPausedServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := newStack(t, "--latency", "200ms")
	const set = "sp"
	tc, root := cutSet(ctx, t, c, set, "k1", 2, true)
	cc := protocol.NewControlClient(c.envURL, c.token, nil)
	st, err := cc.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, protocol.PhaseCommitted, st.Phase, "stay-paused leaves the server committed")
	require.Equal(t, protocol.AdmissionClosed, st.Admission)

	res, err := tc.Restore(ctx, trainer.RestoreRequest{CheckpointID: "k1", Root: root, Participants: []string{c.envURL}}, true)
	require.NoError(t, err, "restore onto the stay-paused server")
	require.Equal(t, 2, res.Restored+res.StartedOver+res.OfferedAgain)

	st, err = cc.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, protocol.PhaseIdle, st.Phase, "the server ends open")
	require.Equal(t, protocol.AdmissionOpen, st.Admission)
	for i := range 2 {
		var r rollout.Result
		require.NoError(t, c.client.GetWorkflow(ctx, rollout.WorkflowID(rollout.SubmittedID(set, i)), "").Get(ctx, &r))
		require.Equal(t, 1, r.Attempt, "rollout %d completes as its restored attempt", i)
	}
}
