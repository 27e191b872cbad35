package coordinator

import (
	"context"

	"go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/workflows/set"

	"github.com/turnstile-rl/turnstile/internal/fanout"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"

	"github.com/turnstile-rl/turnstile/internal/failpoint"
)

// FreezeMembership lists every running rollout of the set through
// visibility and adds the rollouts the environment servers reported live
// sessions for, so a rollout started while the checkpoint began is a member
// too. The list goes to staging/members.json.
func (c *Coordinator) FreezeMembership(ctx context.Context, in checkpoint.FreezeMembershipInput) (checkpoint.FreezeMembershipResult, error) {
	dir, err := c.checkDir(ctx, in.Root, in.CheckpointID)
	if err != nil {
		return checkpoint.FreezeMembershipResult{}, err
	}
	if err := rollout.ValidateSet(in.Set); err != nil {
		return checkpoint.FreezeMembershipResult{}, rollout.BadInput("%v", err)
	}
	tc, err := c.temporal()
	if err != nil {
		return checkpoint.FreezeMembershipResult{}, err
	}
	sp, err := readStagedParticipants(ctx, dir, in.CheckpointID)
	if err != nil {
		return checkpoint.FreezeMembershipResult{}, err
	}
	// The set's admission stops starting rollouts first: what it runs is
	// known exactly (members, visibility lag or not), and what it has not
	// started is recorded as not started.
	admitted, err := c.freezeAdmission(ctx, dir, tc, in)
	if err != nil {
		return checkpoint.FreezeMembershipResult{}, err
	}
	visible := map[string]bool{}
	prog := newProgress(ctx, "list", 0)
	defer prog.stop()
	err = listSet(ctx, tc, in.Set, `ExecutionStatus = "Running"`, func(r visibleRun) {
		visible[r.RolloutID] = true
		prog.add()
	})
	if err != nil {
		return checkpoint.FreezeMembershipResult{}, err
	}
	// Sessions visibility did not list: a verified (retired) session holds
	// only receipts of a finished rollout; the others are described, which
	// reads the run itself rather than the lagging index.
	var extra []string
	for _, p := range sp.Participants {
		for _, s := range p.Sessions {
			if !s.Retired && !visible[s.RolloutID] {
				extra = append(extra, s.RolloutID)
			}
		}
	}
	extra = sortedUnique(extra)
	member := make([]bool, len(extra))
	prog = newProgress(ctx, "describe", len(extra))
	defer prog.stop()
	err = fanout.Each(ctx, len(extra), c.limit(), func(ctx context.Context, i int) error {
		ri, err := describeRollout(ctx, tc, extra[i])
		if err != nil {
			return err
		}
		// A missing workflow stays a member: the park names it.
		member[i] = !ri.Exists || ri.Set == "" || ri.Set == in.Set
		prog.add()
		return nil
	})
	if err != nil {
		return checkpoint.FreezeMembershipResult{}, err
	}
	res := checkpoint.FreezeMembershipResult{FromVisibility: len(visible)}
	ids := make([]string, 0, len(visible)+len(extra)+len(admitted))
	for id := range visible {
		ids = append(ids, id)
	}
	for _, r := range admitted {
		if !visible[r.RolloutID] {
			ids = append(ids, r.RolloutID)
			res.FromAdmission++
		}
	}
	for i, id := range extra {
		if member[i] {
			ids = append(ids, id)
			res.FromParticipants++
		} else {
			res.Foreign++
		}
	}
	ids = sortedUnique(ids)
	res.Members = len(ids)
	res.Digest, err = writeJSONAtomic(ctx, at(dir, checkpoint.ListMembers), rolloutList{CheckpointID: in.CheckpointID, Set: in.Set, Rollouts: ids})
	if err != nil {
		return checkpoint.FreezeMembershipResult{}, err
	}
	c.Failpoints.Hit(failpoint.CoordinatorAfterFreeze)
	return res, nil
}

// freezeAdmission holds the set's admission for the checkpoint and stages
// its snapshot; it returns the rollouts the admission runs (none for a set
// without one).
func (c *Coordinator) freezeAdmission(ctx context.Context, dir storage.Store, tc client.Client, in checkpoint.FreezeMembershipInput) ([]set.RunningRollout, error) {
	snap, found, err := holdAdmission(ctx, tc, in.Set, in.CheckpointID)
	if err != nil || !found {
		return nil, err
	}
	if _, err := writeJSONAtomic(ctx, at(dir, checkpoint.StagingAdmission), snap); err != nil {
		return nil, err
	}
	return snap.Running, nil
}
