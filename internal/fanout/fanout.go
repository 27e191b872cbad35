// Package fanout runs one function over many items with bounded
// concurrency: the coordinator's steps and the client library fan out over
// the rollouts of a set (thousands of updates, starts and queries) without
// opening thousands of calls at once.
package fanout

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sync/errgroup"
)

// maxReported bounds how many errors Each joins into its result, so a set
// of 10,000 failing items gives a readable error.
const maxReported = 8

// Each calls fn(ctx, i) for i in [0, n) with at most limit calls at once
// (limit < 1 means 1). The first error cancels ctx for the calls still
// running and stops the ones not yet begun. It returns every error joined,
// without the cancellations the first one caused in its siblings, so a
// report names all the items that really failed; or ctx's own error when it
// was cancelled from outside.
func Each(ctx context.Context, n, limit int, fn func(ctx context.Context, i int) error) error {
	if limit < 1 {
		limit = 1
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(limit)
	var (
		mu   sync.Mutex
		errs []error
	)
	for i := 0; i < n && gctx.Err() == nil; i++ {
		g.Go(func() error {
			if gctx.Err() != nil {
				return gctx.Err()
			}
			err := fn(gctx, i)
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			return err
		})
	}
	if err := g.Wait(); err == nil {
		return ctx.Err()
	}
	return withoutCancellations(errs)
}

// withoutCancellations joins errs, leaving out the cancellations that the
// first error caused (unless nothing else is left).
func withoutCancellations(errs []error) error {
	var real []error
	for _, e := range errs {
		if !errors.Is(e, context.Canceled) {
			real = append(real, e)
		}
	}
	switch {
	case len(real) == 0 && len(errs) > 0:
		return errs[0]
	case len(real) == 0:
		return context.Canceled
	case len(real) > maxReported:
		return fmt.Errorf("%w (and %d more errors)", errors.Join(real[:maxReported]...), len(real)-maxReported)
	}
	return errors.Join(real...)
}
