package model

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// StoreResult stores a result the rollout is about to hold for
// acknowledgement in the transcript store, under the digest of its canonical
// JSON (rollout.ResultJSON): its receipt's SHA256. Storing it again is a
// no-op. A result whose receipt does not digest it is refused, for good.
func (a *Activities) StoreResult(ctx context.Context, in rollout.StoreResultInput) error {
	rc := in.Result.Receipt
	if rc == nil {
		return temporal.NewNonRetryableApplicationError("store result: the result has no receipt", rollout.ErrInvalidInput, nil)
	}
	if a.Store == nil {
		return errors.New("store result: the worker has no transcript store")
	}
	data, err := rollout.ResultJSON(in.Result)
	if err != nil {
		return temporal.NewNonRetryableApplicationError(err.Error(), rollout.ErrInvalidInput, nil)
	}
	d, err := a.Store.Put(ctx, data)
	if err != nil {
		return fmt.Errorf("store the result of rollout %s: %w", in.Result.RolloutID, err)
	}
	if string(d) != "sha256:"+rc.SHA256 {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"store the result of rollout %s: it digests to %s, its receipt says sha256:%s", in.Result.RolloutID, d, rc.SHA256),
			rollout.ErrInvalidInput, nil)
	}
	return nil
}
