package coordinator

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/testsupport/temporalfake"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// A commit that runs into the last half grace of its parks' lease renews
// each parked rollout's lease (a park of the same checkpoint, its lease a
// grace later), again every half grace; one that ends in time, or whose
// parks have no lease, sends nothing.
func TestCommitRenewsParkLeases(t *testing.T) {
	type sent struct {
		id  string
		req rollout.ParkRequest
	}
	var mu sync.Mutex
	var got []sent
	c := &Coordinator{Client: &temporalfake.Client{Signal: func(workflowID, _, name string, arg any) error {
		require.Equal(t, rollout.SignalPark, name)
		mu.Lock()
		got = append(got, sent{workflowID, arg.(rollout.ParkRequest)})
		mu.Unlock()
		return nil
	}}}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(got)
	}
	ids := []string{"a", "b"}
	deadline := time.Now()

	stop := c.renewLeases(context.Background(), checkpoint.CommitCheckpointInput{CheckpointID: "ck1", Deadline: deadline,
		LeaseUntil: time.Now().Add(time.Hour), LeaseGrace: time.Hour}, ids)
	stop()
	stop = c.renewLeases(context.Background(), checkpoint.CommitCheckpointInput{CheckpointID: "ck1", Deadline: deadline,
		LeaseGrace: 10 * time.Millisecond}, ids)
	stop()
	require.Zero(t, count(), "a commit that ends in time, or with no lease, renews nothing")

	start := time.Now()
	stop = c.renewLeases(context.Background(), checkpoint.CommitCheckpointInput{CheckpointID: "ck1", Deadline: deadline,
		LeaseUntil: start.Add(20 * time.Millisecond), LeaseGrace: 40 * time.Millisecond}, ids)
	require.Eventually(t, func() bool { return count() >= 2*len(ids) }, 30*time.Second, 5*time.Millisecond)
	stop()
	mu.Lock()
	defer mu.Unlock()
	seen := map[string]int{}
	for i, s := range got {
		seen[s.id]++
		require.Equal(t, "ck1", s.req.CheckpointID)
		require.True(t, s.req.Deadline.Equal(deadline))
		require.True(t, s.req.LeaseUntil.After(start.Add(20*time.Millisecond)), "a renewal moves the lease on")
		if i >= len(ids) {
			require.False(t, s.req.LeaseUntil.Before(got[i-len(ids)].req.LeaseUntil), "each round moves it further")
		}
	}
	require.Equal(t, map[string]int{rollout.WorkflowID("a"): seen[rollout.WorkflowID("a")], rollout.WorkflowID("b"): seen[rollout.WorkflowID("b")]}, seen)
	require.GreaterOrEqual(t, seen[rollout.WorkflowID("a")], 2)
}
