package workflows_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/turnstile-rl/turnstile/activities"
	"github.com/turnstile-rl/turnstile/workflows"
)

// coord is a fake of the coordinator activities: it records the order of
// the calls and their inputs, and fails a step when told to.
type coord struct {
	mu     sync.Mutex
	calls  []string
	inputs map[string]any
	fail   map[string]error
}

func newCoord() *coord { return &coord{inputs: map[string]any{}, fail: map[string]error{}} }

func (c *coord) record(name string, in any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, name)
	c.inputs[name] = in
	return c.fail[name]
}

func (c *coord) called() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.calls...)
}

func (c *coord) register(env *testsuite.TestWorkflowEnvironment) {
	reg := func(fn any, name string) { env.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name}) }
	reg(func(_ context.Context, in activities.PrepareParticipantsInput) (activities.PrepareParticipantsResult, error) {
		return activities.PrepareParticipantsResult{Participants: len(in.Participants), Sessions: 3}, c.record(activities.PrepareParticipantsName, in)
	}, activities.PrepareParticipantsName)
	reg(func(_ context.Context, in activities.FreezeMembershipInput) (activities.FreezeMembershipResult, error) {
		return activities.FreezeMembershipResult{Members: 4}, c.record(activities.FreezeMembershipName, in)
	}, activities.FreezeMembershipName)
	reg(func(_ context.Context, in activities.ParkMembersInput) (activities.ParkMembersResult, error) {
		return activities.ParkMembersResult{Members: 4, Parked: 3, CompletedUnacked: 1, Closed: 1}, c.record(activities.ParkMembersName, in)
	}, activities.ParkMembersName)
	reg(func(_ context.Context, in activities.CommitCheckpointInput) (activities.CommitCheckpointResult, error) {
		return activities.CommitCheckpointResult{ManifestDigest: "d1", Bytes: 1234}, c.record(activities.CommitCheckpointName, in)
	}, activities.CommitCheckpointName)
	reg(func(_ context.Context, in activities.ResumeParticipantsInput) (activities.ResumeParticipantsResult, error) {
		return activities.ResumeParticipantsResult{Resumed: len(in.Participants)}, c.record(activities.ResumeParticipantsName, in)
	}, activities.ResumeParticipantsName)
	reg(func(_ context.Context, in activities.ResumeRolloutsInput) (activities.ResumeRolloutsResult, error) {
		return activities.ResumeRolloutsResult{Resumed: 3}, c.record(activities.ResumeRolloutsName, in)
	}, activities.ResumeRolloutsName)
	reg(func(_ context.Context, in activities.AbortCheckpointInput) (activities.AbortCheckpointResult, error) {
		return activities.AbortCheckpointResult{Participants: len(in.Participants), Rollouts: 4}, c.record(activities.AbortCheckpointName, in)
	}, activities.AbortCheckpointName)
	reg(func(_ context.Context, in activities.ValidateCheckpointInput) (activities.ValidateCheckpointResult, error) {
		return activities.ValidateCheckpointResult{Set: "s1", Records: 3, Continue: 1, StartOver: 1, OfferAgain: 1}, c.record(activities.ValidateCheckpointName, in)
	}, activities.ValidateCheckpointName)
	reg(func(_ context.Context, in activities.PlanAttemptsInput) (activities.PlanAttemptsResult, error) {
		return activities.PlanAttemptsResult{Rollouts: 3, Start: 3, Digest: "a1"}, c.record(activities.PlanAttemptsName, in)
	}, activities.PlanAttemptsName)
	reg(func(_ context.Context, in activities.RestoreParticipantsInput) (activities.RestoreParticipantsResult, error) {
		return activities.RestoreParticipantsResult{Participants: len(in.Participants)}, c.record(activities.RestoreParticipantsName, in)
	}, activities.RestoreParticipantsName)
	reg(func(_ context.Context, in activities.TerminateStaleInput) (activities.TerminateStaleResult, error) {
		return activities.TerminateStaleResult{Terminated: 2}, c.record(activities.TerminateStaleName, in)
	}, activities.TerminateStaleName)
	reg(func(_ context.Context, in activities.StartRestoredInput) (activities.StartRestoredResult, error) {
		return activities.StartRestoredResult{Continue: 1, StartOver: 1, OfferAgain: 1, Started: 3}, c.record(activities.StartRestoredName, in)
	}, activities.StartRestoredName)
}

func checkpointInput() workflows.CheckpointInput {
	return workflows.CheckpointInput{
		CheckpointID: "ck1", Set: "s1", Root: "/ckpt",
		Participants: []string{"http://127.0.0.1:1", "http://127.0.0.1:2"}, Timeout: "2m",
	}
}

func runCheckpoint(t *testing.T, c *coord, in workflows.CheckpointInput, setup func(*testsuite.TestWorkflowEnvironment)) (*testsuite.TestWorkflowEnvironment, workflows.CheckpointResult, error) {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	c.register(env)
	if setup != nil {
		setup(env)
	}
	start := env.Now()
	env.ExecuteWorkflow(workflows.Checkpoint, in)
	require.True(t, env.IsWorkflowCompleted())
	var res workflows.CheckpointResult
	err := env.GetWorkflowError()
	if err == nil {
		require.NoError(t, env.GetWorkflowResult(&res))
	}
	if in.Timeout == "2m" && len(c.called()) > 0 {
		// The timeout became one absolute deadline, from the start.
		prep := c.inputs[activities.PrepareParticipantsName].(activities.PrepareParticipantsInput)
		require.True(t, prep.Deadline.Equal(start.Add(2*time.Minute)), "deadline %s, start %s", prep.Deadline, start)
	}
	return env, res, err
}

func TestCheckpointCommitsThenResumes(t *testing.T) {
	c := newCoord()
	_, res, err := runCheckpoint(t, c, checkpointInput(), nil)
	require.NoError(t, err)
	require.Equal(t, []string{
		activities.PrepareParticipantsName, activities.FreezeMembershipName, activities.ParkMembersName,
		activities.CommitCheckpointName, activities.ResumeParticipantsName, activities.ResumeRolloutsName,
	}, c.called())
	require.Equal(t, "/ckpt/ck1", res.Dir)
	require.Equal(t, 4, res.Members)
	require.Equal(t, 3, res.Parked)
	require.Equal(t, 1, res.CompletedUnacked)
	require.Equal(t, 1, res.Closed)
	require.Equal(t, "d1", res.ManifestDigest)
	require.EqualValues(t, 1234, res.Bytes)
	require.True(t, res.Resumed)
	park := c.inputs[activities.ParkMembersName].(activities.ParkMembersInput)
	prep := c.inputs[activities.PrepareParticipantsName].(activities.PrepareParticipantsInput)
	require.True(t, park.Deadline.Equal(prep.Deadline), "rollouts and servers share one deadline")
	require.Equal(t, activities.ListParked, c.inputs[activities.ResumeRolloutsName].(activities.ResumeRolloutsInput).List)
}

func TestCheckpointStayPausedDoesNotResume(t *testing.T) {
	c := newCoord()
	in := checkpointInput()
	in.StayPaused = true
	_, res, err := runCheckpoint(t, c, in, nil)
	require.NoError(t, err)
	require.Equal(t, []string{
		activities.PrepareParticipantsName, activities.FreezeMembershipName, activities.ParkMembersName, activities.CommitCheckpointName,
	}, c.called())
	require.False(t, res.Resumed)
	require.Equal(t, "d1", res.ManifestDigest)
}

func TestCheckpointAbortsAtDeadline(t *testing.T) {
	c := newCoord()
	in := checkpointInput()
	in.Timeout = ""
	in.Deadline = time.Now().Add(time.Minute)
	_, _, err := runCheckpoint(t, c, in, func(env *testsuite.TestWorkflowEnvironment) {
		// A park that would answer only long after the deadline.
		env.OnActivity(activities.ParkMembersName, mock.Anything, mock.Anything).After(time.Hour).
			Return(activities.ParkMembersResult{Parked: 4}, nil)
	})
	requireAborted(t, err, "deadline")
	calls := c.called()
	require.Equal(t, []string{activities.PrepareParticipantsName, activities.FreezeMembershipName, activities.AbortCheckpointName}, calls)
	require.NotContains(t, calls, activities.CommitCheckpointName, "no manifest may be written after the deadline")
	abort := c.inputs[activities.AbortCheckpointName].(activities.AbortCheckpointInput)
	require.Equal(t, in.Participants, abort.Participants)
	require.Equal(t, "ck1", abort.CheckpointID)
}

func TestCheckpointAbortsWhenAStepFails(t *testing.T) {
	for _, step := range []string{activities.PrepareParticipantsName, activities.FreezeMembershipName, activities.ParkMembersName, activities.CommitCheckpointName} {
		t.Run(step, func(t *testing.T) {
			c := newCoord()
			c.fail[step] = temporal.NewNonRetryableApplicationError("boom at "+step, activities.ErrParticipantRefused, nil)
			_, _, err := runCheckpoint(t, c, checkpointInput(), nil)
			requireAborted(t, err, "boom at "+step)
			calls := c.called()
			require.Equal(t, step, calls[len(calls)-2])
			require.Equal(t, activities.AbortCheckpointName, calls[len(calls)-1])
			require.NotContains(t, calls, activities.ResumeRolloutsName)
		})
	}
}

func TestCheckpointReportsFailedCleanup(t *testing.T) {
	c := newCoord()
	c.fail[activities.ParkMembersName] = temporal.NewNonRetryableApplicationError("rollout x missing", activities.ErrMemberMissing, nil)
	c.fail[activities.AbortCheckpointName] = temporal.NewNonRetryableApplicationError("server down", activities.ErrParticipantRefused, nil)
	_, _, err := runCheckpoint(t, c, checkpointInput(), nil)
	requireAborted(t, err, "CLEANUP FAILED")
	require.Contains(t, err.Error(), "rollout x missing")
}

func TestCheckpointRefusesBadInput(t *testing.T) {
	tests := map[string]func(*workflows.CheckpointInput){
		"no id":            func(in *workflows.CheckpointInput) { in.CheckpointID = "" },
		"id with a slash":  func(in *workflows.CheckpointInput) { in.CheckpointID = "a/../b" },
		"set with a quote": func(in *workflows.CheckpointInput) { in.Set = `s"1` },
		"relative root":    func(in *workflows.CheckpointInput) { in.Root = "ckpt" },
		"no deadline":      func(in *workflows.CheckpointInput) { in.Timeout = "" },
		"bad timeout":      func(in *workflows.CheckpointInput) { in.Timeout = "soon" },
		"both":             func(in *workflows.CheckpointInput) { in.Deadline = time.Now().Add(time.Hour) },
		"duplicate url":    func(in *workflows.CheckpointInput) { in.Participants[1] = in.Participants[0] },
		"past deadline": func(in *workflows.CheckpointInput) {
			in.Timeout = ""
			in.Deadline = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
		},
	}
	for name, mod := range tests {
		t.Run(name, func(t *testing.T) {
			c := newCoord()
			in := checkpointInput()
			mod(&in)
			_, _, err := runCheckpoint(t, c, in, nil)
			var ae *temporal.ApplicationError
			require.True(t, errors.As(err, &ae), "error %v", err)
			require.Equal(t, workflows.ErrInvalidCoordinatorInput, ae.Type())
			require.Empty(t, c.called(), "bad input touches nothing")
		})
	}
}

func requireAborted(t *testing.T, err error, contains string) {
	t.Helper()
	require.Error(t, err)
	var ae *temporal.ApplicationError
	require.True(t, errors.As(err, &ae), "error %v", err)
	require.Equal(t, workflows.ErrCheckpointAborted, ae.Type())
	require.True(t, strings.Contains(err.Error(), contains), "error %q does not say %q", err, contains)
}
