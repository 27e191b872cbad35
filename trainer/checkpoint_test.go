package trainer

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/internal/testsupport/temporalfake"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

func validCheckpoint() CheckpointRequest {
	return CheckpointRequest{
		Set: "s1", CheckpointID: "ck1", Root: "ckpt", Participants: []string{"http://127.0.0.1:8091/"},
		Timeout: 90 * time.Second,
	}
}

func TestCheckpointInput(t *testing.T) {
	deadline := time.Date(2030, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))
	tests := []struct {
		name string
		edit func(*CheckpointRequest)
		want checkpoint.CheckpointInput
	}{
		{"relative root, timeout", func(*CheckpointRequest) {}, checkpoint.CheckpointInput{
			CheckpointID: "ck1", Set: "s1", Root: "/work/dir/ckpt", Participants: []string{"http://127.0.0.1:8091"}, Timeout: "1m30s",
		}},
		{"absolute root, deadline, stay paused", func(r *CheckpointRequest) {
			r.Root, r.Timeout, r.Deadline, r.StayPaused = "/data/../ck/", 0, deadline, true
			r.Participants = []string{"http://a:1", "https://b:2"}
		}, checkpoint.CheckpointInput{
			CheckpointID: "ck1", Set: "s1", Root: "/ck", Participants: []string{"http://a:1", "https://b:2"},
			Deadline: deadline.UTC(), StayPaused: true,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := validCheckpoint()
			tt.edit(&r)
			got, err := r.CheckpointInput("/work/dir")
			require.NoError(t, err)
			require.Equal(t, tt.want.CheckpointID, got.CheckpointID, "got %+v\nwant %+v", got, tt.want)
			require.Equal(t, tt.want.Set, got.Set, "got %+v\nwant %+v", got, tt.want)
			require.Equal(t, tt.want.Root, got.Root, "got %+v\nwant %+v", got, tt.want)
			require.Equal(t, strings.Join(tt.want.Participants, " "), strings.Join(got.Participants, " "), "got %+v\nwant %+v", got, tt.want)
			require.Equal(t, tt.want.Timeout, got.Timeout, "got %+v\nwant %+v", got, tt.want)
			require.True(t, got.Deadline.Equal(tt.want.Deadline), "got %+v\nwant %+v", got, tt.want)
			require.Equal(t, tt.want.StayPaused, got.StayPaused, "got %+v\nwant %+v", got, tt.want)
		})
	}
}

func TestCheckpointInputRejects(t *testing.T) {
	tests := []struct {
		name string
		edit func(*CheckpointRequest)
		cwd  string
		want string
	}{
		{"bad set", func(r *CheckpointRequest) { r.Set = "a b" }, "/w", "want 1-100 letters"},
		{"empty id", func(r *CheckpointRequest) { r.CheckpointID = "" }, "/w", "--id"},
		{"id with a slash", func(r *CheckpointRequest) { r.CheckpointID = "a/b" }, "/w", "--id"},
		{"empty root", func(r *CheckpointRequest) { r.Root = " " }, "/w", "--root"},
		{"relative cwd", func(*CheckpointRequest) {}, "w", "not absolute"},
		{"no participants", func(r *CheckpointRequest) { r.Participants = nil }, "/w", "at least one"},
		{"not a URL", func(r *CheckpointRequest) { r.Participants = []string{"127.0.0.1:8091"} }, "/w", "not an http"},
		{"listed twice", func(r *CheckpointRequest) { r.Participants = []string{"http://a:1", "http://a:1/"} }, "/w", "listed twice"},
		{"timeout and deadline", func(r *CheckpointRequest) { r.Deadline = time.Now() }, "/w", "not both"},
		{"no timeout", func(r *CheckpointRequest) { r.Timeout = 0 }, "/w", "--timeout"},
		{"negative timeout", func(r *CheckpointRequest) { r.Timeout = -time.Second }, "/w", "--timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := validCheckpoint()
			tt.edit(&r)
			_, err := r.CheckpointInput(tt.cwd)
			require.ErrorContains(t, err, tt.want, "err = %v, want it to mention %q", err, tt.want)
		})
	}
}

func TestCoordinatorStartOptions(t *testing.T) {
	ck := CheckpointStartOptions("ck1", "q")
	require.Equal(t, "checkpoint/ck1", ck.ID, "checkpoint options %+v", ck)
	require.Equal(t, "q-control", ck.TaskQueue, "checkpoint options %+v", ck)
	require.Equal(t, enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL, ck.WorkflowIDConflictPolicy, "checkpoint options %+v", ck)
	require.Equal(t, enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY, ck.WorkflowIDReusePolicy, "checkpoint options %+v", ck)
	require.True(t, ck.WorkflowExecutionErrorWhenAlreadyStarted, "checkpoint options %+v", ck)
	rs := RestoreStartOptions(checkpoint.RestoreInput{CheckpointID: "ck1"}, "q")
	require.Equal(t, "restore/ck1", rs.ID, "restore options %+v", rs)
	require.Equal(t, "q-control", rs.TaskQueue, "restore options %+v", rs)
	require.Equal(t, enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL, rs.WorkflowIDConflictPolicy, "restore options %+v", rs)
	assert.Equal(t, "restore/again", RestoreStartOptions(checkpoint.RestoreInput{CheckpointID: "ck1", RestoreID: "again"}, "q").ID, "restore with an id")
	key := temporal.NewSearchAttributeKeyKeyword(rollout.SACheckpointID)
	for _, o := range []client.StartWorkflowOptions{ck, rs} {
		id, _ := o.TypedSearchAttributes.GetKeyword(key)
		assert.Equal(t, "ck1", id, "%s: CheckpointId %q, want ck1", o.ID, id)
	}
}

func TestRestoreInput(t *testing.T) {
	r := RestoreRequest{CheckpointID: "ck1", RestoreID: "r2", Root: "ckpt", Participants: []string{"http://a:1"}}
	got, err := r.RestoreInput("/w", "q")
	require.NoError(t, err)
	require.Equal(t, "ck1", got.CheckpointID, "got %+v", got)
	require.Equal(t, "r2", got.RestoreID, "got %+v", got)
	require.Equal(t, "/w/ckpt", got.Root, "got %+v", got)
	require.Equal(t, "q", got.TaskQueue, "got %+v", got)
	require.Len(t, got.Participants, 1, "got %+v", got)
	for _, bad := range []RestoreRequest{
		{CheckpointID: "", Root: "x", Participants: []string{"http://a:1"}},
		{CheckpointID: "ck1", Root: "", Participants: []string{"http://a:1"}},
		{CheckpointID: "ck1", Root: "x", Participants: []string{"ftp://a"}},
		{CheckpointID: "ck1", RestoreID: "a/b", Root: "x", Participants: []string{"http://a:1"}},
	} {
		_, err := bad.RestoreInput("/w", "q")
		assert.Error(t, err, "%+v accepted", bad)
	}
}

func TestStartCoordinator(t *testing.T) {
	in := checkpoint.CheckpointInput{CheckpointID: "ck1"}
	opts := CheckpointStartOptions("ck1", "q")
	tests := []struct {
		name     string
		run      temporalfake.Run // what the start gives
		startErr error            // or the start fails
		wait     bool
		wantErr  string
		want     int
	}{
		{"no wait", temporalfake.Run{RunID: "run-1", Err: errors.New("must not be awaited")}, nil, false, "", 0},
		{"wait", temporalfake.Run{RunID: "run-1", Value: checkpoint.CheckpointResult{Members: 7}}, nil, true, "", 7},
		{"wait fails", temporalfake.Run{RunID: "run-1", Err: errors.New("connection lost")}, nil, true, "wait for checkpoint/ck1: connection lost", 0},
		{"already started", temporalfake.Run{}, serviceerror.NewWorkflowExecutionAlreadyStarted("exists", "", "r"), true, "already running or was already completed", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var (
				res checkpoint.CheckpointResult
				log bytes.Buffer
			)
			announce := func(s Started) {
				fmt.Fprintf(&log, "started %s (run %s) on task queue %s\n", s.WorkflowID, s.RunID, s.TaskQueue)
			}
			var got []any // what the start sent
			c := &temporalfake.Client{Execute: func(o client.StartWorkflowOptions, wf any, args ...any) (client.WorkflowRun, error) {
				got = append([]any{o.ID, wf}, args...)
				if tt.startErr != nil {
					return nil, tt.startErr
				}
				return tt.run, nil
			}}
			err := startCoordinator(t.Context(), c, coordinatorStart{opts: opts, name: checkpoint.CheckpointWorkflowName, in: in, wait: tt.wait, onStart: announce}, &res)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr, "err = %v, want %q", err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, res.Members, "members = %d, want %d", res.Members, tt.want)
			require.Equal(t, "checkpoint/ck1", got[0], "started %v", got)
			require.Equal(t, checkpoint.CheckpointWorkflowName, got[1], "started %v", got)
			require.Equal(t, "ck1", got[2].(checkpoint.CheckpointInput).CheckpointID, "started %v", got)
			assert.Contains(t, log.String(), "started checkpoint/ck1 (run run-1)", "log %q", log.String())
		})
	}
}

// Checkpoint and Restore run on the control plane's task queue, so a cut
// never waits behind the rollouts' tasks, whichever door starts them: the
// starter's (Checkpoint, Restore) and the gateway's (StartCheckpoint,
// StartRestore, under a request id); the restored rollouts still go to the
// rollouts' queue.
func TestCoordinatorsStartOnTheControlQueue(t *testing.T) {
	rec := &temporalfake.Client{
		Execute: func(client.StartWorkflowOptions, any, ...any) (client.WorkflowRun, error) {
			return temporalfake.Run{}, nil
		},
		Describe: func(workflowID, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
			return nil, serviceerror.NewNotFound(workflowID)
		},
	}
	c := New(rec, "q")
	ck := CheckpointRequest{Set: "s1", CheckpointID: "ck1", Root: "/ckpt", Participants: []string{"http://127.0.0.1:8091"}, Timeout: time.Minute}
	rs := RestoreRequest{CheckpointID: "ck1", Root: "/ckpt", Participants: []string{"http://127.0.0.1:8091"}}
	_, err := c.Checkpoint(t.Context(), ck, false)
	require.NoError(t, err)
	_, err = c.Restore(t.Context(), rs, false)
	require.NoError(t, err)
	_, _, err = c.StartCheckpoint(t.Context(), ck, "req-ck")
	require.NoError(t, err)
	_, _, err = c.StartRestore(t.Context(), rs, "req-rs")
	require.NoError(t, err)
	want := []string{"checkpoint/ck1 on q-control", "restore/ck1 on q-control", "checkpoint/ck1 on q-control", "restore/ck1 on q-control"}
	var queues []string
	for _, o := range rec.Starts() {
		queues = append(queues, o.ID+" on "+o.TaskQueue)
	}
	assert.Equal(t, want, queues, "coordinators started on the wrong task queues")
	in, err := RestoreRequest{CheckpointID: "ck1", Root: "/ckpt", Participants: []string{"http://127.0.0.1:8091"}}.RestoreInput("/", c.TaskQueue())
	require.NoError(t, err, "restored rollouts go to %q (%v), want q", in.TaskQueue, err)
	require.Equal(t, "q", in.TaskQueue, "restored rollouts go to %q (%v), want q", in.TaskQueue, err)
}
