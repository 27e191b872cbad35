package coordinator

import (
	"context"
	"sync"

	"go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/internal/fanout"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// probeWindow is how many consecutive submission ids past the highest known
// one a restore describes before it concludes the submission ends there: a
// submission starts its rollouts in index order with bounded concurrency,
// so the runs visibility has not indexed yet sit just above the ones it has.
const probeWindow = 256

// probeSubmitted adds to visible the runs of the set's submission
// (rollout.SubmittedID(set, i)) that visibility does not list yet — a
// rollout started just before the restore. Visibility lags; a describe of
// the workflow ID does not. It describes, window by window, every id of the
// submission not already known, and stops after a window past the highest
// known index in which no workflow exists.
func (c *Coordinator) probeSubmitted(ctx context.Context, tc client.Client, set string, lc *loadedCheckpoint, visible map[string]seenRuns) error {
	highest := -1
	note := func(id string) {
		if i, ok := rollout.SubmittedIndex(set, id); ok {
			highest = max(highest, i)
		}
	}
	for id := range visible {
		note(id)
	}
	for id := range lc.parked {
		note(id)
	}
	for id := range lc.sessions {
		note(id)
	}
	var mu sync.Mutex
	for base := 0; ; base += probeWindow {
		found := false
		err := fanout.Each(ctx, probeWindow, c.limit(), func(ctx context.Context, k int) error {
			id := rollout.SubmittedID(set, base+k)
			mu.Lock()
			_, known := visible[id]
			mu.Unlock()
			if known {
				return nil
			}
			ri, err := describeRollout(ctx, tc, id)
			if err != nil || !ri.Exists || ri.Set != set {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			seen := seenRuns{attempt: -1, running: ri.Running}
			if ri.HasAttempt {
				seen.attempt = int(ri.Attempt)
			}
			visible[id], found = seen, true
			highest = max(highest, base+k)
			return nil
		})
		if err != nil {
			return err
		}
		if !found && base > highest {
			return nil
		}
	}
}
