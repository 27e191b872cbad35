package rollout_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/internal/testsupport/temporalfake"
	"github.com/turnstile-rl/turnstile/internal/visibility"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
	"github.com/turnstile-rl/turnstile/workflows/set"
)

var fenceT0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func at(sec int) time.Time { return fenceT0.Add(time.Duration(sec) * time.Second) }

// Two restores: r1 of a checkpoint cut at 10 s, fenced at 20 s; r2 of a
// checkpoint cut at 30 s, fenced at 40 s.
var twoRestores = set.SetFence{Set: "s", Windows: []rollout.FenceWindow{
	{RestoreID: "r1", CheckpointID: "k1", From: at(10), Before: at(20)},
	{RestoreID: "r2", CheckpointID: "k2", From: at(30), Before: at(40)},
}}

func TestSetFenceRules(t *testing.T) {
	for _, tc := range []struct {
		name           string
		fence          set.SetFence
		started        time.Time
		run, result    bool
		runBy, resByID string
	}{
		{name: "no restore", fence: set.SetFence{Set: "s"}, started: at(5)},
		{name: "before every cut", fence: twoRestores, started: at(5), run: true, runBy: "r2"},
		{name: "inside r1's window", fence: twoRestores, started: at(15), run: true, runBy: "r2", result: true, resByID: "r1"},
		{name: "after r1, before k2's cut", fence: twoRestores, started: at(25), run: true, runBy: "r2"},
		{name: "inside r2's window", fence: twoRestores, started: at(35), run: true, runBy: "r2", result: true, resByID: "r2"},
		{name: "exactly at the fence", fence: twoRestores, started: at(40), run: true, runBy: "r2", result: true, resByID: "r2"},
		{name: "after the newest fence", fence: twoRestores, started: at(41)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, run := tc.fence.FencesRun(tc.started)
			require.Equal(t, tc.run, run, "FencesRun")
			require.Equal(t, tc.runBy, w.RestoreID)
			w, res := tc.fence.FencesResult(tc.started)
			require.Equal(t, tc.result, res, "FencesResult")
			require.Equal(t, tc.resByID, w.RestoreID)
		})
	}
}

// fenceDescriber answers a describe of set s's fence workflow with resp,
// or err.
func fenceDescriber(resp *workflowservice.DescribeWorkflowExecutionResponse, err error) *temporalfake.Client {
	return &temporalfake.Client{Describe: func(workflowID, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
		if workflowID != set.SetFenceWorkflowID("s") {
			return nil, serviceerror.NewNotFound(workflowID)
		}
		return resp, err
	}}
}

func fenceRun(t *testing.T, memo any, start time.Time) *workflowservice.DescribeWorkflowExecutionResponse {
	t.Helper()
	info := &workflowpb.WorkflowExecutionInfo{StartTime: timestamppb.New(start)}
	if memo != nil {
		info.Memo = &commonpb.Memo{Fields: map[string]*commonpb.Payload{set.MemoSetFence: temporalfake.Payload(memo)}}
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: info}
}

func TestReadSetFence(t *testing.T) {
	ctx := context.Background()
	current := set.SetFence{Set: "s", Windows: []rollout.FenceWindow{
		{RestoreID: "r1", CheckpointID: "k1", From: at(10), Before: at(20)},
		{RestoreID: "r2", CheckpointID: "k2", From: at(30)},
	}}
	f, err := visibility.ReadSetFence(ctx, fenceDescriber(fenceRun(t, current, at(40)), nil), "s")
	require.NoError(t, err)
	require.Equal(t, twoRestores.Windows, f.Windows, "the newest window ends at the fence run's start")

	f, err = visibility.ReadSetFence(ctx, fenceDescriber(nil, serviceerror.NewNotFound("none")), "s")
	require.NoError(t, err)
	require.Empty(t, f.Windows, "a set never restored has no fence")

	// Anything else fails closed: the caller retries, never takes it as unfenced.
	for name, d := range map[string]*temporalfake.Client{
		"unavailable":  fenceDescriber(nil, serviceerror.NewUnavailable("down")),
		"no memo":      fenceDescriber(fenceRun(t, nil, at(40)), nil),
		"another set":  fenceDescriber(fenceRun(t, set.SetFence{Set: "x", Windows: current.Windows}, at(40)), nil),
		"no windows":   fenceDescriber(fenceRun(t, set.SetFence{Set: "s"}, at(40)), nil),
		"not a record": fenceDescriber(fenceRun(t, "text", at(40)), nil),
	} {
		_, err := visibility.ReadSetFence(ctx, d, "s")
		require.Error(t, err, name)
	}
}

// fencedByR1 answers every seed's check with a fence of restore r1.
func fencedByR1(rollout.SetFenceCheck) *rollout.FenceWindow {
	return &rollout.FenceWindow{RestoreID: "r1", CheckpointID: "k1", Before: at(20)}
}

func requireFencedByRestore(t *testing.T, err error) {
	t.Helper()
	var ae *temporal.ApplicationError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, rollout.ErrFencedByRestore, ae.Type())
	require.Contains(t, ae.Error(), "restore r1 of checkpoint k1")
}

// A run a restore fenced before its first environment call applies
// nothing: its seed (StartEnvironment checks the fence before it sends
// anything) fails, and there is no model call, no verify, no group report;
// the run publishes that it failed.
func TestRolloutFencedBeforeFirstEnvironmentCall(t *testing.T) {
	w := newWorld(3)
	w.fence = fencedByR1
	env := newEnv(t, w)
	seen := phases(env)
	in := input(16)
	in.Group, in.GroupSize = "g", 2
	env.ExecuteWorkflow(rollout.Rollout, in)
	requireFencedByRestore(t, env.GetWorkflowError())
	require.Empty(t, w.starts, "no seed")
	require.Empty(t, w.calls, "no model call")
	require.Empty(t, w.verifies, "no verify")
	require.Len(t, w.fenceChecks, 1)
	require.Equal(t, []string{string(rollout.PhaseFailed)}, *seen)
}

// A run chain checks the fence once, at its seed, with the chain's start:
// the run's own start when the input carries none, the carried one after a
// continue-as-new or a group retry. A run that continues from a seeded
// boundary (a continue-as-new, a restored continuation) makes no check; a
// rollout outside a set none at all.
func TestRolloutChecksFenceOncePerChain(t *testing.T) {
	w := newWorld(2)
	env := newEnv(t, w)
	env.SetStartTime(at(30))
	env.ExecuteWorkflow(rollout.Rollout, input(16))
	result(t, env)
	require.Len(t, w.fenceChecks, 1, "at the seed only")
	require.Equal(t, "s", w.fenceChecks[0].Set)
	require.True(t, w.fenceChecks[0].StartedAt.Equal(at(30)), "the run's start: %v", w.fenceChecks[0].StartedAt)

	w = newWorld(2)
	env = newEnv(t, w)
	in := input(16)
	carried := at(3)
	in.StartedAt = &carried
	env.ExecuteWorkflow(rollout.Rollout, in)
	result(t, env)
	require.Len(t, w.fenceChecks, 1)
	require.True(t, w.fenceChecks[0].StartedAt.Equal(carried), "the carried chain start, not this run's")

	w = newWorld(3)
	w.value, w.revision = 1, 1
	env = newEnv(t, w)
	in = input(16)
	in.StartedAt = &carried
	in.Resume = &rollout.Boundary{RolloutID: "r1", Turn: 1, Revision: 1, Seeded: true, Style: envs.StyleTools}
	env.ExecuteWorkflow(rollout.Rollout, in)
	result(t, env)
	require.Empty(t, w.fenceChecks, "a seeded chain checked at its seed")

	w = newWorld(2)
	env = newEnv(t, w)
	in = input(16)
	in.Set = ""
	env.ExecuteWorkflow(rollout.Rollout, in)
	result(t, env)
	require.Empty(t, w.fenceChecks, "no set, no fence")
	require.Len(t, w.starts, 1)
	require.Nil(t, w.starts[0].Fence)
}
