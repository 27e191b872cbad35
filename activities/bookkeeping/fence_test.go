package bookkeeping_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/turnstile-rl/turnstile/activities/bookkeeping"
	"github.com/turnstile-rl/turnstile/internal/testsupport/temporalfake"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
	"github.com/turnstile-rl/turnstile/workflows/set"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// fenceStore is set s's fence record as Temporal holds it: none until a
// restore fences the set at fencedAt; down makes every describe fail.
type fenceStore struct {
	mu       sync.Mutex
	fencedAt time.Time
	down     bool
}

func (f *fenceStore) describe(workflowID, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.down:
		return nil, serviceerror.NewUnavailable("down")
	case workflowID != set.SetFenceWorkflowID("s") || f.fencedAt.IsZero():
		return nil, serviceerror.NewNotFound(workflowID)
	}
	memo := set.SetFence{Set: "s", Windows: []rollout.FenceWindow{{RestoreID: "r1", CheckpointID: "k1", From: t0}}}
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
		StartTime: timestamppb.New(f.fencedAt),
		Memo:      &commonpb.Memo{Fields: map[string]*commonpb.Payload{set.MemoSetFence: temporalfake.Payload(memo)}},
	}}, nil
}

func (f *fenceStore) set(fencedAt time.Time, down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fencedAt, f.down = fencedAt, down
}

// clock is a test clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// SetFences answers from a read of the record for less than the TTL, so
// the seeds of a set's rollouts cost one describe between them; a restore
// that fences the set is seen by every check made FenceReadTTL after it; a
// record that cannot be read fails the check, and is not remembered.
func TestSetFencesReadsOncePerTTL(t *testing.T) {
	ctx := context.Background()
	store := &fenceStore{}
	tc := &temporalfake.Client{Describe: store.describe}
	clk := &clock{now: t0}
	f := &bookkeeping.SetFences{Client: tc, Now: clk.Now}
	started := t0.Add(10 * time.Second)

	for range 3 {
		_, fenced, err := f.FencedRun(ctx, "s", started)
		require.NoError(t, err)
		require.False(t, fenced, "a set never restored fences nothing")
	}
	require.Len(t, tc.Described(), 1, "one read for the three checks")

	// A restore fences the set; an answer from the earlier read may be
	// given for at most FenceReadTTL after that read.
	store.set(t0.Add(20*time.Second), false)
	clk.advance(set.FenceReadTTL / 2)
	_, fenced, err := f.FencedRun(ctx, "s", started)
	require.NoError(t, err)
	require.False(t, fenced, "within the TTL: the earlier read")
	clk.advance(set.FenceReadTTL / 2)
	w, fenced, err := f.FencedRun(ctx, "s", started)
	require.NoError(t, err)
	require.True(t, fenced, "past the TTL: read again")
	require.Equal(t, "r1", w.RestoreID)
	require.Len(t, tc.Described(), 2)
	_, fenced, err = f.FencedRun(ctx, "s", t0.Add(21*time.Second))
	require.NoError(t, err)
	require.False(t, fenced, "a chain started after the fence")

	// A record that cannot be read is an error, and the next check reads
	// again.
	clk.advance(set.FenceReadTTL)
	store.set(t0.Add(20*time.Second), true)
	_, _, err = f.FencedRun(ctx, "s", started)
	require.Error(t, err)
	store.set(t0.Add(20*time.Second), false)
	_, fenced, err = f.FencedRun(ctx, "s", started)
	require.NoError(t, err)
	require.True(t, fenced)
	require.Len(t, tc.Described(), 4)
}

// Concurrent checks of one set share one read.
func TestSetFencesConcurrentChecksShareARead(t *testing.T) {
	release := make(chan struct{})
	var reads sync.WaitGroup
	reads.Add(1)
	tc := &temporalfake.Client{Describe: func(workflowID, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
		reads.Done()
		<-release
		return nil, serviceerror.NewNotFound(workflowID)
	}}
	f := &bookkeeping.SetFences{Client: tc}
	var checks sync.WaitGroup
	for range 8 {
		checks.Add(1)
		go func() {
			defer checks.Done()
			_, fenced, err := f.FencedRun(context.Background(), "s", t0)
			require.NoError(t, err)
			require.False(t, fenced)
		}()
	}
	reads.Wait() // the first check's read is in flight
	close(release)
	checks.Wait()
	require.Len(t, tc.Described(), 1)
}
