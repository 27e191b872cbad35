package trainer

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	workflowpb "go.temporal.io/api/workflow/v1"

	"github.com/turnstile-rl/turnstile/internal/testsupport/temporalfake"
	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

func TestControlToken(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string
		err  string
	}{
		{"set", map[string]string{protocol.ControlTokenEnvVar: "tok"}, "tok", ""},
		{"unset", nil, "", "TURNSTILE_CONTROL_TOKEN is not set"},
		{"blank", map[string]string{protocol.ControlTokenEnvVar: "  "}, "", "is not set"},
		{"whitespace", map[string]string{protocol.ControlTokenEnvVar: "tok\n"}, "", "whitespace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ControlToken(func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok })
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err, "err = %v, want %q", err, tt.err)
				return
			}
			require.NoError(t, err, "got %q, %v", got, err)
			require.Equal(t, tt.want, got, "got %q, %v", got, err)
		})
	}
}

// orderLog records the order of resumes across servers and rollouts.
type orderLog struct {
	mu     sync.Mutex
	events []string
}

func (o *orderLog) add(e string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, e)
}

type fakeControl struct {
	name string
	log  *orderLog
	err  error
}

func (f fakeControl) Resume(_ context.Context, id string) (protocol.ResumeResponse, error) {
	f.log.add("server " + f.name + " " + id)
	return protocol.ResumeResponse{Phase: protocol.PhaseIdle, CheckpointID: id}, f.err
}

func TestResumeSet(t *testing.T) {
	log := &orderLog{}
	// rollouts lists the set in two pages and answers updates, logging
	// each.
	rollouts := func(closed, reject map[string]bool) *temporalfake.Client {
		c := updater(closed, reject, func(id string) { log.add("rollout " + id) })
		c.Pages = [][]*workflowpb.WorkflowExecutionInfo{
			{info(t, "s1-0000", "r1", running, t0, 0, "parked"), info(t, "s1-0001", "r1", completed, t0, 0, "completed")},
			{info(t, "s1-0002", "r1", running, t0, 0, "parked"), info(t, "s1-0003", "r1", running, t0, 0, "parked")},
		}
		return c
	}
	servers := map[string]controlResumer{"http://a": fakeControl{"a", log, nil}, "http://b": fakeControl{"b", log, nil}}
	f := rollouts(map[string]bool{"rollout/s1-0003": true}, nil)
	sum, err := resumeSet(t.Context(), resumeTarget{servers, []string{"http://b", "http://a"}, f, f}, "s1", "ck1")
	require.NoError(t, err)
	assert.Equal(t, ResumeSummary{Participants: 2, Rollouts: 2, Closed: 1}, sum, "summary")
	require.Len(t, log.events, 5, "order %v: servers first, in the given order", log.events)
	require.Equal(t, "server b ck1", log.events[0], "order %v: servers first, in the given order", log.events)
	require.Equal(t, "server a ck1", log.events[1], "order %v: servers first, in the given order", log.events)
	_, ok := f.UpdateOf("rollout/s1-0001")
	assert.False(t, ok, "a closed rollout was sent a resume")
	o, _ := f.UpdateOf("rollout/s1-0002")
	require.Equal(t, rollout.UpdateResume, o.UpdateName, "update %+v", o)
	require.Equal(t, "ck1/resume", o.UpdateID, "update %+v", o)
	require.Equal(t, "ck1", o.Args[0].(rollout.ResumeRequest).CheckpointID, "update %+v", o)

	// A server that refuses stops before any rollout is released.
	log = &orderLog{}
	servers["http://a"] = fakeControl{"a", log, errors.New("401 unauthorized")}
	f = rollouts(nil, nil)
	_, err = resumeSet(t.Context(), resumeTarget{servers, []string{"http://a", "http://b"}, f, f}, "s1", "ck1")
	require.ErrorContains(t, err, "resume environment server http://a")
	require.Empty(t, f.Updates(), "a rollout was released after a server refused")

	// A rollout held for another checkpoint is reported; the others go on.
	servers["http://a"] = fakeControl{"a", log, nil}
	f = rollouts(nil, map[string]bool{"rollout/s1-0002": true})
	sum, err = resumeSet(t.Context(), resumeTarget{servers, []string{"http://a"}, f, f}, "s1", "ck1")
	require.ErrorContains(t, err, "rollout/s1-0002: rejected", "err = %v, summary %+v", err, sum)
	require.Equal(t, 2, sum.Rollouts, "err = %v, summary %+v", err, sum)
}
