package coordinator

import (
	"context"
	"fmt"
	"slices"

	"github.com/turnstile-rl/turnstile/internal/fanout"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"

	"github.com/turnstile-rl/turnstile/internal/failpoint"
)

// ResumeParticipants reopens admission at every environment server and
// retires the checkpoint id there. Resume is idempotent and is also the
// abort of a prepare, commit or restore.
func (c *Coordinator) ResumeParticipants(ctx context.Context, in checkpoint.ResumeParticipantsInput) (checkpoint.ResumeParticipantsResult, error) {
	if err := checkpoint.ValidateName("checkpoint_id", in.CheckpointID); err != nil {
		return checkpoint.ResumeParticipantsResult{}, rollout.BadInput("%v", err)
	}
	if err := c.checkParticipants(in.Participants); err != nil {
		return checkpoint.ResumeParticipantsResult{}, err
	}
	prog := newProgress(ctx, "resume participants", len(in.Participants))
	defer prog.stop()
	err := fanout.Each(ctx, len(in.Participants), c.limit(), func(ctx context.Context, i int) error {
		url := in.Participants[i]
		cc, err := c.control(url)
		if err != nil {
			return err
		}
		if err := c.watched(ctx, url, "resume", func(ctx context.Context) error {
			_, err := cc.Resume(ctx, in.CheckpointID)
			return err
		}); err != nil {
			return controlError(url, "resume", err)
		}
		prog.add()
		return nil
	})
	if err != nil {
		return checkpoint.ResumeParticipantsResult{}, fmt.Errorf("resume participants of checkpoint %s: %w", in.CheckpointID, err)
	}
	c.Failpoints.Hit(failpoint.CoordinatorAfterResumeParticipants)
	return checkpoint.ResumeParticipantsResult{Resumed: len(in.Participants)}, nil
}

// ResumeRollouts signals every rollout of the list to resume. A rollout
// that is not held for the checkpoint ignores it, so a retry is harmless.
func (c *Coordinator) ResumeRollouts(ctx context.Context, in checkpoint.ResumeRolloutsInput) (checkpoint.ResumeRolloutsResult, error) {
	dir, err := c.checkDir(ctx, in.Root, in.CheckpointID)
	if err != nil {
		return checkpoint.ResumeRolloutsResult{}, err
	}
	if !slices.Contains([]string{checkpoint.ListParked, checkpoint.ListMembers, checkpoint.ListStarted}, in.List) {
		return checkpoint.ResumeRolloutsResult{}, rollout.BadInput("list %q: want one of %s, %s, %s", in.List, checkpoint.ListParked, checkpoint.ListMembers, checkpoint.ListStarted)
	}
	tc, err := c.temporal()
	if err != nil {
		return checkpoint.ResumeRolloutsResult{}, err
	}
	l, err := readRolloutList(ctx, at(dir, in.List), in.CheckpointID)
	if err != nil {
		return checkpoint.ResumeRolloutsResult{}, fmt.Errorf("read rollouts to resume: %w", err)
	}
	resumed, gone, err := c.releaseRollouts(ctx, tc, in.CheckpointID, l.Rollouts)
	if err != nil {
		return checkpoint.ResumeRolloutsResult{}, fmt.Errorf("resume rollouts of checkpoint %s: %w", in.CheckpointID, err)
	}
	// The set's admission starts queued rollouts again.
	if err := releaseAdmission(ctx, tc, l.Set, in.CheckpointID); err != nil {
		return checkpoint.ResumeRolloutsResult{}, err
	}
	return checkpoint.ResumeRolloutsResult{Resumed: resumed, Gone: gone}, nil
}

// ResumeRestoredParticipants reopens admission at every environment server
// and retires the restore id there, so a re-run of this restore installs
// nothing twice. Resume is idempotent.
func (c *Coordinator) ResumeRestoredParticipants(ctx context.Context, in checkpoint.ResumeRestoredParticipantsInput) (checkpoint.ResumeParticipantsResult, error) {
	if err := checkpoint.ValidateName("checkpoint_id", in.CheckpointID); err != nil {
		return checkpoint.ResumeParticipantsResult{}, rollout.BadInput("%v", err)
	}
	rid, err := restoreIDOf(in.CheckpointID, in.RestoreID)
	if err != nil {
		return checkpoint.ResumeParticipantsResult{}, err
	}
	if err := c.checkParticipants(in.Participants); err != nil {
		return checkpoint.ResumeParticipantsResult{}, err
	}
	prog := newProgress(ctx, "resume participants", len(in.Participants))
	defer prog.stop()
	err = fanout.Each(ctx, len(in.Participants), c.limit(), func(ctx context.Context, i int) error {
		url := in.Participants[i]
		cc, err := c.control(url)
		if err != nil {
			return err
		}
		if err := c.watched(ctx, url, "resume", func(ctx context.Context) error {
			_, err := cc.ResumeRestore(ctx, in.CheckpointID, rid)
			return err
		}); err != nil {
			return controlError(url, "resume", err)
		}
		prog.add()
		return nil
	})
	if err != nil {
		return checkpoint.ResumeParticipantsResult{}, fmt.Errorf("resume participants of restore %s of checkpoint %s: %w", rid, in.CheckpointID, err)
	}
	c.Failpoints.Hit(failpoint.RestoreAfterResumeParticipants)
	return checkpoint.ResumeParticipantsResult{Resumed: len(in.Participants)}, nil
}

// ResumeRestoredRollouts signals every rollout of
// restore/<restore_id>/started.json to resume. A rollout that is not held
// for the checkpoint ignores it, so a retry is harmless.
func (c *Coordinator) ResumeRestoredRollouts(ctx context.Context, in checkpoint.ResumeRestoredRolloutsInput) (checkpoint.ResumeRolloutsResult, error) {
	rs, err := c.setUpRestore(ctx, restoreSetUp{root: in.Root, checkpointID: in.CheckpointID, restoreID: in.RestoreID,
		temporal: true})
	if err != nil {
		return checkpoint.ResumeRolloutsResult{}, err
	}
	tc, rid := rs.tc, rs.rid
	l, err := readRolloutList(ctx, startedPath(rs.rdir), in.CheckpointID)
	if err != nil {
		return checkpoint.ResumeRolloutsResult{}, fmt.Errorf("read rollouts to resume: %w", err)
	}
	resumed, gone, err := c.releaseRollouts(ctx, tc, in.CheckpointID, l.Rollouts)
	res := checkpoint.ResumeRolloutsResult{Resumed: resumed, Gone: gone}
	if err != nil {
		return checkpoint.ResumeRolloutsResult{}, fmt.Errorf("resume rollouts of restore %s of checkpoint %s: %w", rid, in.CheckpointID, err)
	}
	// The set's new admission (StartRestored's, held for the checkpoint)
	// starts the queued rollouts.
	if err := releaseAdmission(ctx, tc, l.Set, in.CheckpointID); err != nil {
		return checkpoint.ResumeRolloutsResult{}, err
	}
	return res, nil
}
