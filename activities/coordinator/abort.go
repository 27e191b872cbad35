package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/workflows/checkpoint"

	"github.com/turnstile-rl/turnstile/internal/storage"
)

// abortedMarker in the staging directory tells a late commit that the
// checkpoint was aborted: it must not write a manifest.
const abortedMarker = checkpoint.StagingDir + "/ABORTED"

// AbortCheckpoint makes a failed checkpoint harmless: it marks the staging
// directory aborted (a late commit then writes no manifest), removes any
// aggregate manifest, resumes every participant (resume is the abort) and
// releases every member that may have parked. It tries every step even when
// one fails, and reports all failures. A participant nothing listens at is
// no failure: it is named in the result (it holds nothing, and failing the
// abort for it only left the set parked).
func (c *Coordinator) AbortCheckpoint(ctx context.Context, in checkpoint.AbortCheckpointInput) (checkpoint.AbortCheckpointResult, error) {
	dir, err := c.checkDir(ctx, in.Root, in.CheckpointID)
	if err != nil {
		return checkpoint.AbortCheckpointResult{}, err
	}
	if err := checkParticipantURLs(in.Participants); err != nil {
		return checkpoint.AbortCheckpointResult{}, err
	}
	var res checkpoint.AbortCheckpointResult
	var errs []error
	if err := writeFileAtomic(ctx, at(dir, abortedMarker), []byte(in.CheckpointID+"\n")); err != nil {
		errs = append(errs, fmt.Errorf("mark aborted: %w", err))
	}
	removed, err := removeManifest(ctx, dir)
	res.ManifestRemoved = removed
	if err != nil {
		errs = append(errs, fmt.Errorf("remove manifest: %w", err))
	}
	// Participants first, so released rollouts find admission open; each
	// call is bounded and none of their failures keeps the rollouts parked.
	// A dead participant is reported, not an error: retrying the abort
	// cannot resume it, and it holds nothing.
	start := time.Now()
	dead, perr := c.resumeEach(ctx, in.CheckpointID, in.Participants)
	res.Unreachable = dead
	// A participant that answered with an error (a 5xx, a refusal) fails
	// the abort, to be retried as before; one that answered nothing is
	// asked again below.
	var left []string
	failed := 0
	for i, err := range perr {
		switch {
		case err == nil:
		case noAnswer(err):
			left = append(left, in.Participants[i])
		default:
			failed++
			errs = append(errs, fmt.Errorf("resume participants of checkpoint %s: %w", in.CheckpointID, err))
		}
	}
	n, err := c.releaseMembers(ctx, dir, in.CheckpointID)
	res.Rollouts = n
	if err != nil {
		errs = append(errs, err)
	}
	if err := c.releaseStagedAdmission(ctx, dir, in.CheckpointID); err != nil {
		errs = append(errs, err)
	}
	// A participant that answered nothing (hung, or cut off by the network)
	// may still hold admission closed: it is asked again, the rollouts
	// already released, until the window passes. Then the abort gives up
	// for good (a retry of the whole abort would only wait again).
	left, err = c.resumeLeft(ctx, in.CheckpointID, left, start)
	res.Participants = len(in.Participants) - len(dead) - failed - len(left)
	if err != nil {
		errs = append(errs, fmt.Errorf("resume participants of checkpoint %s: %w", in.CheckpointID, err))
	}
	if len(errs) > 0 {
		err := fmt.Errorf("abort of checkpoint %s: %w", in.CheckpointID, errors.Join(errs...))
		if len(left) > 0 {
			return res, temporal.NewNonRetryableApplicationError(fmt.Sprintf("%v (asked to resume for %s)", err, time.Since(start).Round(time.Second)),
				checkpoint.ErrParticipantHung, nil)
		}
		return res, err
	}
	return res, nil
}

// releaseMembers releases every member of the checkpoint, not only those
// known parked: a park may have been accepted without its answer reaching
// the coordinator.
func (c *Coordinator) releaseMembers(ctx context.Context, dir storage.Store, checkpointID string) (int, error) {
	l, err := readRolloutList(ctx, at(dir, checkpoint.ListMembers), checkpointID)
	switch {
	case errors.Is(err, storage.ErrNotExist):
		return 0, nil // membership never frozen: no rollout was asked to park
	case err != nil:
		return 0, err
	}
	tc, err := c.temporal()
	if err != nil {
		return 0, err
	}
	n, _, err := c.releaseRollouts(ctx, tc, checkpointID, l.Rollouts)
	return n, err
}

// releaseStagedAdmission releases the admission of the checkpoint's set,
// which its freeze may have held (a release of an admission not held for
// the checkpoint changes nothing).
func (c *Coordinator) releaseStagedAdmission(ctx context.Context, dir storage.Store, checkpointID string) error {
	name, err := stagedSet(ctx, dir, checkpointID)
	if err != nil || name == "" {
		return err // prepare never staged: nothing was held
	}
	tc, err := c.temporal()
	if err != nil {
		return err
	}
	return releaseAdmission(ctx, tc, name, checkpointID)
}

// removeManifest removes the aggregate manifest, durably, and reports
// whether there was one.
func removeManifest(ctx context.Context, dir storage.Store) (bool, error) {
	if _, err := dir.Stat(ctx, checkpoint.AggregateManifestName); errors.Is(err, storage.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	if err := dir.Remove(ctx, checkpoint.AggregateManifestName); err != nil {
		return false, err
	}
	return true, storage.Sync(ctx, dir)
}
