package fanout_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/fanout"
)

func TestEachBoundsConcurrencyAndStopsAtTheFirstError(t *testing.T) {
	var running, peak, calls atomic.Int64
	// Every item but 3 holds its slot until the failure cancels the batch:
	// an item released any other way would free a slot the loop may refill
	// before the failing item has cancelled, which is legitimate.
	err := fanout.Each(context.Background(), 50, 4, func(ctx context.Context, i int) error {
		calls.Add(1)
		n := running.Add(1)
		defer running.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		if i == 3 {
			return errors.New("item 3 failed")
		}
		<-ctx.Done()
		return ctx.Err()
	})
	require.EqualError(t, err, "item 3 failed", "err = %v, want the first real error alone", err)
	p := peak.Load()
	require.LessOrEqual(t, p, int64(4), "%d calls ran at once, limit 4", p)
	// Items admitted but not yet begun when item 3 failed are skipped, so
	// between 1 and 4 ran; without the stop, all 50 would have.
	c := calls.Load()
	require.GreaterOrEqual(t, c, int64(1), "%d items ran, want at most the 4 admitted before the first error", c)
	require.LessOrEqual(t, c, int64(4), "%d items ran, want at most the 4 admitted before the first error", c)
}

func TestEachRunsEveryItem(t *testing.T) {
	seen := make([]atomic.Bool, 100)
	require.NoError(t, fanout.Each(context.Background(), len(seen), 7, func(_ context.Context, i int) error {
		seen[i].Store(true)
		return nil
	}))
	for i := range seen {
		require.True(t, seen[i].Load(), "item %d never ran", i)
	}
}

func TestEachJoinsEveryRealError(t *testing.T) {
	const n = 20
	var entered atomic.Int64
	all := make(chan struct{})
	err := fanout.Each(context.Background(), n, n, func(_ context.Context, i int) error {
		// Every item is inside fn before any fails, so each failure is real
		// rather than a sibling's cancellation.
		if entered.Add(1) == n {
			close(all)
		}
		<-all
		if i%2 == 0 {
			return fmt.Errorf("item %d failed", i)
		}
		return nil
	})
	require.Error(t, err, "no error from 10 failing items")
	got := err.Error()
	require.Equal(t, 8, strings.Count(got, "failed"), "err = %q, want 8 failures joined and the other 2 counted", got)
	require.Contains(t, got, "(and 2 more errors)", "err = %q, want 8 failures joined and the other 2 counted", got)
}

func TestEachReportsAnOuterCancellation(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := fanout.Each(ctx, 5, 2, func(context.Context, int) error { return nil })
	require.ErrorIs(t, err, context.Canceled, "err = %v, want context.Canceled", err)
}
