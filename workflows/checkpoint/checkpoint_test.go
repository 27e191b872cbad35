package checkpoint_test

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

	"github.com/turnstile-rl/turnstile/internal/testsupport"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// coord is a fake of the coordinator activities: it records the order of
// the calls and their inputs, and fails a step when told to.
type coord struct {
	mu     sync.Mutex
	calls  []string
	inputs map[string]any
	fail   map[string]error
	// abortTry is the time the abort's try was given (deadline - start).
	abortTry time.Duration
	// unreachable is what the abort reports dead.
	unreachable []string
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
	reg(func(_ context.Context, in checkpoint.PrepareParticipantsInput) (checkpoint.PrepareParticipantsResult, error) {
		return checkpoint.PrepareParticipantsResult{Participants: len(in.Participants), Sessions: 3}, c.record(checkpoint.PrepareParticipantsName, in)
	}, checkpoint.PrepareParticipantsName)
	reg(func(_ context.Context, in checkpoint.FreezeMembershipInput) (checkpoint.FreezeMembershipResult, error) {
		return checkpoint.FreezeMembershipResult{Members: 4}, c.record(checkpoint.FreezeMembershipName, in)
	}, checkpoint.FreezeMembershipName)
	reg(func(_ context.Context, in checkpoint.ParkMembersInput) (checkpoint.ParkMembersResult, error) {
		return checkpoint.ParkMembersResult{Members: 4, Parked: 3, CompletedUnacked: 1, Closed: 1}, c.record(checkpoint.ParkMembersName, in)
	}, checkpoint.ParkMembersName)
	reg(func(_ context.Context, in checkpoint.CommitCheckpointInput) (checkpoint.CommitCheckpointResult, error) {
		return checkpoint.CommitCheckpointResult{ManifestDigest: "d1", Bytes: 1234}, c.record(checkpoint.CommitCheckpointName, in)
	}, checkpoint.CommitCheckpointName)
	reg(func(_ context.Context, in checkpoint.ResumeParticipantsInput) (checkpoint.ResumeParticipantsResult, error) {
		return checkpoint.ResumeParticipantsResult{Resumed: len(in.Participants)}, c.record(checkpoint.ResumeParticipantsName, in)
	}, checkpoint.ResumeParticipantsName)
	reg(func(_ context.Context, in checkpoint.ResumeRolloutsInput) (checkpoint.ResumeRolloutsResult, error) {
		return checkpoint.ResumeRolloutsResult{Resumed: 3}, c.record(checkpoint.ResumeRolloutsName, in)
	}, checkpoint.ResumeRolloutsName)
	reg(func(ctx context.Context, in checkpoint.AbortCheckpointInput) (checkpoint.AbortCheckpointResult, error) {
		info := activity.GetInfo(ctx)
		c.mu.Lock()
		c.abortTry = info.Deadline.Sub(info.StartedTime)
		c.mu.Unlock()
		res := checkpoint.AbortCheckpointResult{Participants: len(in.Participants) - len(c.unreachable), Rollouts: 4, Unreachable: c.unreachable}
		return res, c.record(checkpoint.AbortCheckpointName, in)
	}, checkpoint.AbortCheckpointName)
	reg(func(_ context.Context, in checkpoint.ValidateCheckpointInput) (checkpoint.ValidateCheckpointResult, error) {
		return checkpoint.ValidateCheckpointResult{Set: "s1", Records: 3, Continue: 1, StartOver: 1, OfferAgain: 1}, c.record(checkpoint.ValidateCheckpointName, in)
	}, checkpoint.ValidateCheckpointName)
	reg(func(_ context.Context, in checkpoint.PlanAttemptsInput) (checkpoint.PlanAttemptsResult, error) {
		return checkpoint.PlanAttemptsResult{Rollouts: 3, Start: 3, Digest: "a1"}, c.record(checkpoint.PlanAttemptsName, in)
	}, checkpoint.PlanAttemptsName)
	reg(func(_ context.Context, in checkpoint.FenceSetInput) (checkpoint.FenceSetResult, error) {
		return checkpoint.FenceSetResult{Restores: 1}, c.record(checkpoint.FenceSetName, in)
	}, checkpoint.FenceSetName)
	reg(func(_ context.Context, in checkpoint.RestoreParticipantsInput) (checkpoint.RestoreParticipantsResult, error) {
		return checkpoint.RestoreParticipantsResult{Participants: len(in.Participants)}, c.record(checkpoint.RestoreParticipantsName, in)
	}, checkpoint.RestoreParticipantsName)
	reg(func(_ context.Context, in checkpoint.TerminateStaleInput) (checkpoint.TerminateStaleResult, error) {
		return checkpoint.TerminateStaleResult{Terminated: 2}, c.record(checkpoint.TerminateStaleName, in)
	}, checkpoint.TerminateStaleName)
	reg(func(_ context.Context, in checkpoint.StartRestoredInput) (checkpoint.StartRestoredResult, error) {
		return checkpoint.StartRestoredResult{Continue: 1, StartOver: 1, OfferAgain: 1, Started: 3}, c.record(checkpoint.StartRestoredName, in)
	}, checkpoint.StartRestoredName)
	reg(func(_ context.Context, in checkpoint.RetainCheckpointsInput) (checkpoint.RetainCheckpointsResult, error) {
		return checkpoint.RetainCheckpointsResult{Kept: []string{in.CheckpointID}, Deleted: []string{"old"}, KeptBytes: 10, FreedBytes: 20},
			c.record(checkpoint.RetainCheckpointsName, in)
	}, checkpoint.RetainCheckpointsName)
}

func checkpointInput() checkpoint.CheckpointInput {
	return checkpoint.CheckpointInput{
		CheckpointID: "ck1", Set: "s1", Root: "/ckpt",
		Participants: []string{"http://127.0.0.1:1", "http://127.0.0.1:2"}, Timeout: "2m",
	}
}

func runCheckpoint(t *testing.T, c *coord, in checkpoint.CheckpointInput, setup func(*testsuite.TestWorkflowEnvironment)) (*testsuite.TestWorkflowEnvironment, checkpoint.CheckpointResult, error) {
	t.Helper()
	env := testsupport.NewWorkflowEnv()
	c.register(env)
	if setup != nil {
		setup(env)
	}
	start := env.Now()
	env.ExecuteWorkflow(checkpoint.Checkpoint, in)
	require.True(t, env.IsWorkflowCompleted())
	var res checkpoint.CheckpointResult
	err := env.GetWorkflowError()
	if err == nil {
		require.NoError(t, env.GetWorkflowResult(&res))
	}
	if in.Timeout == "2m" && len(c.called()) > 0 {
		// The timeout became one absolute deadline, from the start.
		prep := c.inputs[checkpoint.PrepareParticipantsName].(checkpoint.PrepareParticipantsInput)
		require.True(t, prep.Deadline.Equal(start.Add(2*time.Minute)), "deadline %s, start %s", prep.Deadline, start)
	}
	return env, res, err
}

func TestCheckpointCommitsThenResumes(t *testing.T) {
	c := newCoord()
	_, res, err := runCheckpoint(t, c, checkpointInput(), nil)
	require.NoError(t, err)
	require.Equal(t, []string{
		checkpoint.PrepareParticipantsName, checkpoint.FreezeMembershipName, checkpoint.ParkMembersName,
		checkpoint.CommitCheckpointName, checkpoint.ResumeParticipantsName, checkpoint.ResumeRolloutsName,
	}, c.called())
	require.Equal(t, "/ckpt/ck1", res.Dir)
	require.Equal(t, 4, res.Members)
	require.Equal(t, 3, res.Parked)
	require.Equal(t, 1, res.CompletedUnacked)
	require.Equal(t, 1, res.Closed)
	require.Equal(t, "d1", res.ManifestDigest)
	require.EqualValues(t, 1234, res.Bytes)
	require.True(t, res.Resumed)
	park := c.inputs[checkpoint.ParkMembersName].(checkpoint.ParkMembersInput)
	prep := c.inputs[checkpoint.PrepareParticipantsName].(checkpoint.PrepareParticipantsInput)
	require.True(t, park.Deadline.Equal(prep.Deadline), "rollouts and servers share one deadline")
	require.Equal(t, checkpoint.ListParked, c.inputs[checkpoint.ResumeRolloutsName].(checkpoint.ResumeRolloutsInput).List)
}

// A Checkpoint run is searchable by its checkpoint however it was started.
func TestCheckpointRunCarriesCheckpointID(t *testing.T) {
	var ids []string
	key := temporal.NewSearchAttributeKeyKeyword(rollout.SACheckpointID)
	_, _, err := runCheckpoint(t, newCoord(), checkpointInput(), func(env *testsuite.TestWorkflowEnvironment) {
		env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
			if id, ok := args.Get(0).(temporal.SearchAttributes).GetKeyword(key); ok {
				ids = append(ids, id)
			}
		}).Return(nil)
	})
	require.NoError(t, err)
	require.Equal(t, []string{"ck1"}, ids)
}

func TestCheckpointStayPausedDoesNotResume(t *testing.T) {
	c := newCoord()
	in := checkpointInput()
	in.StayPaused = true
	_, res, err := runCheckpoint(t, c, in, nil)
	require.NoError(t, err)
	require.Equal(t, []string{
		checkpoint.PrepareParticipantsName, checkpoint.FreezeMembershipName, checkpoint.ParkMembersName, checkpoint.CommitCheckpointName,
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
		env.OnActivity(checkpoint.ParkMembersName, mock.Anything, mock.Anything).After(time.Hour).
			Return(checkpoint.ParkMembersResult{Parked: 4}, nil)
	})
	requireAborted(t, err, "deadline")
	calls := c.called()
	require.Equal(t, []string{checkpoint.PrepareParticipantsName, checkpoint.FreezeMembershipName, checkpoint.AbortCheckpointName}, calls)
	require.NotContains(t, calls, checkpoint.CommitCheckpointName, "no manifest may be written after the deadline")
	abort := c.inputs[checkpoint.AbortCheckpointName].(checkpoint.AbortCheckpointInput)
	require.Equal(t, in.Participants, abort.Participants)
	require.Equal(t, "ck1", abort.CheckpointID)
}

func TestCheckpointAbortsWhenAStepFails(t *testing.T) {
	for _, step := range []string{checkpoint.PrepareParticipantsName, checkpoint.FreezeMembershipName, checkpoint.ParkMembersName, checkpoint.CommitCheckpointName} {
		t.Run(step, func(t *testing.T) {
			c := newCoord()
			c.fail[step] = temporal.NewNonRetryableApplicationError("boom at "+step, checkpoint.ErrParticipantRefused, nil)
			_, _, err := runCheckpoint(t, c, checkpointInput(), nil)
			requireAborted(t, err, "boom at "+step)
			calls := c.called()
			require.Equal(t, step, calls[len(calls)-2])
			require.Equal(t, checkpoint.AbortCheckpointName, calls[len(calls)-1])
			require.NotContains(t, calls, checkpoint.ResumeRolloutsName)
		})
	}
}

// TestCheckpointAbortHasTimeToResumeABusySet: one try of the abort resumes
// every member, which takes minutes on a busy set; it is given far more
// than the one minute that left a 1,000-rollout soak's members parked.
func TestCheckpointAbortHasTimeToResumeABusySet(t *testing.T) {
	c := newCoord()
	c.fail[checkpoint.ParkMembersName] = temporal.NewNonRetryableApplicationError("boom", checkpoint.ErrParticipantRefused, nil)
	_, _, err := runCheckpoint(t, c, checkpointInput(), nil)
	requireAborted(t, err, "boom")
	c.mu.Lock()
	defer c.mu.Unlock()
	require.GreaterOrEqual(t, c.abortTry, 10*time.Minute, "an abort try of %s", c.abortTry)
}

// A participant that stays unreachable fails the commit in bounded time:
// a dead one at once, a failing one after a few tries (it was retried
// without limit for hours, keeping the set parked); then the abort releases
// everything and the failure names the dead server.
func TestCheckpointCommitToAnUnreachableParticipantAbortsInBoundedTime(t *testing.T) {
	cases := []struct {
		name      string
		err       error
		wantTries int
	}{
		{"connection refused", temporal.NewNonRetryableApplicationError("participant http://127.0.0.1:2: commit: nothing listens there",
			checkpoint.ErrParticipantUnreachable, nil), 1},
		{"503 every time", errors.New("participant http://127.0.0.1:2: commit: 503"), 5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCoord()
			c.fail[checkpoint.CommitCheckpointName] = tc.err
			c.unreachable = []string{"http://127.0.0.1:2"}
			_, _, err := runCheckpoint(t, c, checkpointInput(), nil)
			requireAborted(t, err, "phase commit")
			require.Contains(t, err.Error(), "unreachable environment servers")
			require.Contains(t, err.Error(), "http://127.0.0.1:2")
			require.Contains(t, err.Error(), "resumed 1 environment servers and 4 rollouts")
			calls := c.called()
			tries := 0
			for _, name := range calls {
				if name == checkpoint.CommitCheckpointName {
					tries++
				}
			}
			require.Equal(t, tc.wantTries, tries)
			require.Equal(t, checkpoint.AbortCheckpointName, calls[len(calls)-1])
		})
	}
}

func TestCheckpointReportsFailedCleanup(t *testing.T) {
	c := newCoord()
	c.fail[checkpoint.ParkMembersName] = temporal.NewNonRetryableApplicationError("rollout x missing", checkpoint.ErrMemberMissing, nil)
	c.fail[checkpoint.AbortCheckpointName] = temporal.NewNonRetryableApplicationError("server down", checkpoint.ErrParticipantRefused, nil)
	_, _, err := runCheckpoint(t, c, checkpointInput(), nil)
	requireAborted(t, err, "CLEANUP FAILED")
	require.Contains(t, err.Error(), "rollout x missing")
}

func TestCheckpointRefusesBadInput(t *testing.T) {
	tests := map[string]func(*checkpoint.CheckpointInput){
		"no id":            func(in *checkpoint.CheckpointInput) { in.CheckpointID = "" },
		"id with a slash":  func(in *checkpoint.CheckpointInput) { in.CheckpointID = "a/../b" },
		"set with a quote": func(in *checkpoint.CheckpointInput) { in.Set = `s"1` },
		"relative root":    func(in *checkpoint.CheckpointInput) { in.Root = "ckpt" },
		"no deadline":      func(in *checkpoint.CheckpointInput) { in.Timeout = "" },
		"bad timeout":      func(in *checkpoint.CheckpointInput) { in.Timeout = "soon" },
		"both":             func(in *checkpoint.CheckpointInput) { in.Deadline = time.Now().Add(time.Hour) },
		"duplicate url":    func(in *checkpoint.CheckpointInput) { in.Participants[1] = in.Participants[0] },
		"bad lease grace":  func(in *checkpoint.CheckpointInput) { in.LeaseGrace = "later" },
		"zero lease grace": func(in *checkpoint.CheckpointInput) { in.LeaseGrace = "0s" },
		"long lease grace": func(in *checkpoint.CheckpointInput) { in.LeaseGrace = "25h" },
		"past deadline": func(in *checkpoint.CheckpointInput) {
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
			require.Equal(t, checkpoint.ErrInvalidCoordinatorInput, ae.Type())
			require.Empty(t, c.called(), "bad input touches nothing")
		})
	}
}

func requireAborted(t *testing.T, err error, contains string) {
	t.Helper()
	require.Error(t, err)
	var ae *temporal.ApplicationError
	require.True(t, errors.As(err, &ae), "error %v", err)
	require.Equal(t, checkpoint.ErrCheckpointAborted, ae.Type())
	require.True(t, strings.Contains(err.Error(), contains), "error %q does not say %q", err, contains)
}

// A checkpoint parks its rollouts with a lease ending at deadline + settle
// + lease grace (the default, or the input's), and prepares its servers
// with a lease that ends no sooner; one that stays paused gives its
// rollouts no lease.
func TestCheckpointParksWithALease(t *testing.T) {
	for _, tc := range []struct {
		name  string
		grace string
		want  time.Duration
		stay  bool
	}{
		{"default grace", "", checkpoint.DefaultLeaseGrace, false},
		{"given grace", "45s", 45 * time.Second, false},
		{"stays paused", "45s", 45 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCoord()
			in := checkpointInput()
			in.LeaseGrace, in.StayPaused = tc.grace, tc.stay
			_, _, err := runCheckpoint(t, c, in, nil)
			require.NoError(t, err)
			park := c.inputs[checkpoint.ParkMembersName].(checkpoint.ParkMembersInput)
			prep := c.inputs[checkpoint.PrepareParticipantsName].(checkpoint.PrepareParticipantsInput)
			if tc.stay {
				require.True(t, park.LeaseUntil.IsZero(), "a paused set's rollouts hold until resumed")
			} else {
				require.True(t, park.LeaseUntil.Equal(park.Deadline.Add(checkpoint.CheckpointSettle+tc.want)), "lease_until %s", park.LeaseUntil)
			}
			require.Equal(t, 2*time.Minute+checkpoint.CheckpointSettle+tc.want, prep.Lease,
				"the servers' lease is counted from the prepare to deadline + settle + grace")
		})
	}
}
