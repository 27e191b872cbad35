// Package heartbeat keeps a long activity call alive: it heartbeats on a
// ticker until the call returns, so a worker that dies mid-call is noticed
// after the heartbeat timeout and a cancellation reaches the call (Temporal
// delivers it through heartbeats).
package heartbeat

import (
	"context"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
)

// Every heartbeats every interval, with details, until the returned stop is
// called or ctx ends. stop waits for the ticker goroutine to finish.
func Every(ctx context.Context, every time.Duration, details ...any) (stop func()) {
	return Run(ctx, every, func(ctx context.Context) { activity.RecordHeartbeat(ctx, details...) })
}

// Run calls beat every interval until the returned stop is called or ctx
// ends, for a call whose heartbeat details change as it goes. stop waits
// for the ticker goroutine to finish.
func Run(ctx context.Context, every time.Duration, beat func(context.Context)) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				beat(ctx)
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}
