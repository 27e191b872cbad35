// Package sleep waits for a duration unless a context ends first: the one
// wait a retry loop, a pacer or a fault schedule needs.
package sleep

import (
	"context"
	"time"
)

// For waits d, or less when ctx ends; it returns ctx.Err() then, and nil
// after a full wait. A d of zero or less does not wait.
func For(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
