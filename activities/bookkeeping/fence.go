package bookkeeping

import (
	"context"

	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/internal/visibility"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// FenceActivities hold the activity a rollout consults its set's fence
// record with. It reads Temporal itself; register a pointer to it on the
// worker beside Activities.
type FenceActivities struct {
	Client visibility.Describer
}

// CheckSetFence reads the set's fence record and says whether the run
// chain that started at in.StartedAt is of a world a restore rolled back.
// It fails (and is retried) when the record cannot be read: a run never
// goes on unchecked.
func (a *FenceActivities) CheckSetFence(ctx context.Context, in rollout.CheckSetFenceInput) (rollout.CheckSetFenceResult, error) {
	if err := rollout.ValidateSet(in.Set); err != nil {
		return rollout.CheckSetFenceResult{}, temporal.NewNonRetryableApplicationError(err.Error(), rollout.ErrBadInput, nil)
	}
	f, err := visibility.ReadSetFence(ctx, a.Client, in.Set)
	if err != nil {
		return rollout.CheckSetFenceResult{}, err
	}
	w, fenced := f.FencesRun(in.StartedAt)
	if !fenced {
		return rollout.CheckSetFenceResult{}, nil
	}
	return rollout.CheckSetFenceResult{Fenced: true, Window: &w}, nil
}
