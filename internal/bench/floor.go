package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"
	tclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	procs "github.com/turnstile-rl/turnstile/internal/stack"
)

// The floor is the plainest Temporal loop a rollout could be: per turn one
// "model" activity and one "environment" activity, both regular activities
// with the SDK's default worker options, no search attributes, no
// transcript store, no environment or policy server. Whatever turnstile
// costs beyond it is turnstile's.
const (
	FloorWorkflowName = "BenchFloor"
	floorModelName    = "FloorModel"
	floorEnvName      = "FloorEnvironment"
	// FloorWorkerCommand is the bench binary's argument that runs the
	// floor's worker instead of the bench.
	FloorWorkerCommand = "floor-worker"
)

// LeanPayloadBytes is the size of the lean floor's observations: a few
// hundred bytes, what turnstile's digests and small tool answers are. The
// lean floor is the same two-activity loop as the floor, with SDK default
// worker options, passing these instead of the padded observations a
// careless loop would keep in history: every headline ratio is against it.
const LeanPayloadBytes = 256

// FloorInput is one floor rollout: Turns turns, each environment answer
// ObservationBytes long (a naive loop keeps it in history).
type FloorInput struct {
	Turns            int `json:"turns"`
	ObservationBytes int `json:"observation_bytes"`
}

// FloorResult counts the turns run.
type FloorResult struct {
	Turns int `json:"turns"`
}

var floorActivity = workflow.ActivityOptions{
	StartToCloseTimeout: 15 * time.Second,
	RetryPolicy:         &temporal.RetryPolicy{InitialInterval: 500 * time.Millisecond},
}

// FloorWorkflow runs in.Turns turns: model, then environment, passing the
// last observation to the next model call.
func FloorWorkflow(ctx workflow.Context, in FloorInput) (FloorResult, error) {
	ctx = workflow.WithActivityOptions(ctx, floorActivity)
	var obs string
	for turn := 1; turn <= in.Turns; turn++ {
		var action string
		if err := workflow.ExecuteActivity(ctx, floorModelName, turn, obs).Get(ctx, &action); err != nil {
			return FloorResult{}, err
		}
		if err := workflow.ExecuteActivity(ctx, floorEnvName, action, in.ObservationBytes).Get(ctx, &obs); err != nil {
			return FloorResult{}, err
		}
	}
	return FloorResult{Turns: in.Turns}, nil
}

// FloorModel answers at once with a fixed action.
func FloorModel(_ context.Context, turn int, _ string) (string, error) {
	return fmt.Sprintf(`{"amount":1,"turn":%d}`, turn), nil
}

// FloorEnvironment answers an observation of size bytes.
func FloorEnvironment(_ context.Context, action string, size int) (string, error) {
	obs := "ok " + action
	if size > len(obs) {
		obs += strings.Repeat("x", size-len(obs))
	}
	return obs, nil
}

// The plain update loop of the feed row: a workflow holding one result
// until an update takes it.
const (
	FloorHeldWorkflowName = "BenchFloorHeld"
	// FloorHeldQuery answers once the workflow holds its result.
	FloorHeldQuery = "held"
	// FloorAckUpdate returns the result and lets the workflow close.
	FloorAckUpdate = "ack"
)

// FloorHeldInput is the result a held workflow holds, padded to Bytes.
type FloorHeldInput struct {
	Result string `json:"result"`
	Bytes  int    `json:"bytes"`
}

// FloorHeldWorkflow holds in.Result until FloorAckUpdate takes it.
func FloorHeldWorkflow(ctx workflow.Context, in FloorHeldInput) (string, error) {
	res := in.Result
	if in.Bytes > len(res) {
		res += strings.Repeat(" ", in.Bytes-len(res))
	}
	if err := workflow.SetQueryHandler(ctx, FloorHeldQuery, func() (bool, error) { return true, nil }); err != nil {
		return "", err
	}
	taken := false
	if err := workflow.SetUpdateHandler(ctx, FloorAckUpdate, func(workflow.Context) (string, error) {
		taken = true
		return res, nil
	}); err != nil {
		return "", err
	}
	if err := workflow.Await(ctx, func() bool { return taken && workflow.AllHandlersFinished(ctx) }); err != nil {
		return "", err
	}
	return "acknowledged", nil
}

// RunFloorWorker runs the floor's worker on taskQueue of the server at
// hostPort until stop is closed.
func RunFloorWorker(hostPort, taskQueue string, stop <-chan any) error {
	c, err := tclient.Dial(tclient.Options{HostPort: hostPort, Logger: procs.Quiet{}})
	if err != nil {
		return fmt.Errorf("connect to %s: %w", hostPort, err)
	}
	defer c.Close()
	w := worker.New(c, taskQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(FloorWorkflow, workflow.RegisterOptions{Name: FloorWorkflowName})
	w.RegisterWorkflowWithOptions(FloorHeldWorkflow, workflow.RegisterOptions{Name: FloorHeldWorkflowName})
	w.RegisterActivityWithOptions(FloorModel, activity.RegisterOptions{Name: floorModelName})
	w.RegisterActivityWithOptions(FloorEnvironment, activity.RegisterOptions{Name: floorEnvName})
	if err := w.Run(stop); err != nil {
		return fmt.Errorf("floor worker on %s: %w", taskQueue, err)
	}
	return nil
}
