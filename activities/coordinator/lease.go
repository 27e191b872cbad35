package coordinator

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/turnstile-rl/turnstile/internal/fanout"
	"github.com/turnstile-rl/turnstile/internal/sleep"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// renewLeases keeps the parks of the rollouts ids alive while a long
// commit runs: from half a grace before the parks' lease ends, and every
// half grace after that, it sends each one a park of the same checkpoint
// whose lease ends a grace later. A commit that ends in time sends
// nothing. A checkpoint whose parks have no lease (stay-paused) renews
// nothing. The returned stop ends the renewals and waits for them.
func (c *Coordinator) renewLeases(ctx context.Context, in checkpoint.CommitCheckpointInput, ids []string) (stop func()) {
	if in.LeaseUntil.IsZero() || in.LeaseGrace <= 0 || len(ids) == 0 {
		return func() {}
	}
	tc, err := c.temporal()
	if err != nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		next := in.LeaseUntil.Add(-in.LeaseGrace / 2)
		for {
			if sleep.For(ctx, time.Until(next)) != nil {
				return
			}
			now := time.Now()
			req := rollout.ParkRequest{CheckpointID: in.CheckpointID, Deadline: in.Deadline, LeaseUntil: now.Add(in.LeaseGrace)}
			// A rollout that closed or cannot be reached just misses a
			// renewal: its own lease decides.
			_ = fanout.Each(ctx, len(ids), c.signalLimit(), func(ctx context.Context, i int) error {
				_ = tc.SignalWorkflow(ctx, rollout.WorkflowID(ids[i]), "", rollout.SignalPark, req)
				return nil
			})
			next = now.Add(in.LeaseGrace / 2)
		}
	}()
	return func() {
		cancel()
		wg.Wait()
	}
}

// parkedIDs are the rollout ids of the staged park records, sorted.
func parkedIDs(records map[string][]byte) []string {
	ids := make([]string, 0, len(records))
	for id := range records {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}
