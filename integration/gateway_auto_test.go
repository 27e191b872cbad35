package integration_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/gateway"
	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// TestGatewayAutoRecoveryAndSchedule: through a real gateway, the
// operator token turns automatic recovery on for a set (a repeat joins
// it) and creates its checkpoint schedule; the trainer token reads the
// watchdog's status, tags the schedule with its step and, after a
// triggered checkpoint committed with that tag, pins it; the trainer token
// cannot create a schedule. Then the schedule is deleted and the watchdog
// stopped (each twice: idempotent).
func TestGatewayAutoRecoveryAndSchedule(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	c := newCluster(t)
	c.startTemporal()
	c.startEnvServer()
	c.startPolicyServer("--latency", "200ms")
	c.startWorker()
	_, base := c.startGateway("127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tr := gw{t: t, base: base, token: gatewayToken}
	op := gw{t: t, base: base, token: gatewayOperatorToken}
	const set = "gwauto"
	// Rollouts that outlast the test (a watchdog ends by itself once its
	// set has run out of rollouts).
	long := trainer.DatasetRow{Env: "counter", Task: json.RawMessage(`{"target":1000}`)}
	status, raw := tr.do(ctx, "POST", "/v1/sets", gateway.SubmitRequest{RequestID: "s-" + set, Set: set, Rows: []trainer.DatasetRow{long, long}, MaxTurns: 1000}, nil)
	require.Equal(t, http.StatusOK, status, "%s", raw)

	// Automatic recovery on; a repeat joins the running watchdog.
	wreq := gateway.WatchdogRequest{RequestID: "w1", Participants: []string{c.envURL}, Every: "1s"}
	var started gateway.StartedResponse
	status, raw = op.do(ctx, "POST", "/v1/sets/"+set+"/watchdog", wreq, &started)
	require.Equal(t, http.StatusAccepted, status, "%s", raw)
	require.Equal(t, checkpoint.WatchdogWorkflowID(set), started.WorkflowID)
	var wd gateway.WatchdogResponse
	c.waitFor("the watchdog's status", nil, 30*time.Second, func() bool {
		status, _ := tr.do(ctx, "GET", "/v1/sets/"+set+"/watchdog", nil, &wd)
		return status == http.StatusOK && wd.Phase != ""
	})
	require.Equal(t, []string{c.envURL}, wd.Watched)
	require.Empty(t, wd.Declarations)
	status, raw = op.do(ctx, "POST", "/v1/sets/"+set+"/watchdog", wreq, &started)
	require.Equal(t, http.StatusAccepted, status, "%s", raw)
	require.True(t, started.Existing, "a repeat joins the watchdog")

	// The schedule: the trainer token may not create it; the operator's
	// does (every hour: the test triggers the checkpoint it waits for).
	sreq := gateway.ScheduleRequest{RequestID: "c1", Every: "1h", Participants: []string{c.envURL}, Tag: "step-1", Keep: 2}
	status, raw = tr.do(ctx, "POST", "/v1/sets/"+set+"/schedule", sreq, nil)
	require.Equal(t, http.StatusForbidden, status, "%s", raw)
	var sch gateway.ScheduleResponse
	status, raw = op.do(ctx, "POST", "/v1/sets/"+set+"/schedule", sreq, &sch)
	require.Equal(t, http.StatusOK, status, "%s", raw)
	require.Equal(t, "step-1", sch.Tag)
	status, raw = tr.do(ctx, "POST", "/v1/sets/"+set+"/schedule/tag", gateway.ScheduleTagRequest{RequestID: "t2", Tag: "step-2"}, &sch)
	require.Equal(t, http.StatusOK, status, "%s", raw)
	require.Equal(t, "step-2", sch.Tag)
	status, raw = op.do(ctx, "POST", "/v1/sets/"+set+"/schedule/trigger", gateway.ScheduleTriggerRequest{RequestID: "g1"}, &sch)
	require.Equal(t, http.StatusOK, status, "%s", raw)
	c.waitFor("the triggered checkpoint", nil, 30*time.Second, func() bool {
		status, _ := tr.do(ctx, "GET", "/v1/sets/"+set+"/schedule", nil, &sch)
		return status == http.StatusOK && len(sch.Recent) > 0
	})
	run := sch.Recent[0]
	tc := trainer.New(c.client, rollout.TaskQueue)
	var res checkpoint.CheckpointResult
	c.waitFor("the scheduled checkpoint's commit", nil, time.Minute, func() bool {
		st, err := tc.CoordinatorStatus(ctx, run.WorkflowID, &res)
		require.NoError(t, err)
		require.NotEqual(t, "failed", st.Status, "%+v", st)
		return st.Status == "completed"
	})
	require.Equal(t, "step-2", res.Tag)
	require.Equal(t, run.CheckpointID, res.CheckpointID)
	var pinned gateway.PinResponse
	status, raw = tr.do(ctx, "POST", "/v1/sets/"+set+"/pins", gateway.PinRequest{RequestID: "p1", Tag: "step-2"}, &pinned)
	require.Equal(t, http.StatusOK, status, "%s", raw)
	require.Equal(t, []string{run.CheckpointID}, pinned.Pinned)

	status, raw = op.do(ctx, "POST", "/v1/sets/"+set+"/schedule/pause", gateway.ScheduleNoteRequest{RequestID: "p2", Note: "evaluating step-2"}, &sch)
	require.Equal(t, http.StatusOK, status, "%s", raw)
	require.True(t, sch.Paused)
	require.Equal(t, "evaluating step-2", sch.Note)

	for range 2 {
		status, raw = op.do(ctx, "DELETE", "/v1/sets/"+set+"/schedule", gateway.StopRequest{RequestID: "d1"}, nil)
		require.Equal(t, http.StatusOK, status, "%s", raw)
		status, raw = op.do(ctx, "DELETE", "/v1/sets/"+set+"/watchdog", gateway.StopRequest{RequestID: "d2"}, nil)
		require.Equal(t, http.StatusOK, status, "%s", raw)
	}
	status, raw = tr.do(ctx, "GET", "/v1/sets/"+set+"/schedule", nil, nil)
	require.Equal(t, http.StatusNotFound, status, "%s", raw)
	c.waitFor("the watchdog stopped", nil, 30*time.Second, func() bool {
		status, _ := tr.do(ctx, "GET", "/v1/sets/"+set+"/watchdog", nil, &wd)
		return status == http.StatusOK && wd.Phase == "stopped"
	})
}
