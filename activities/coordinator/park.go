package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/internal/storage"
)

// ParkMembers asks every member to park at its next boundary, by signal,
// and keeps its park record, read by query once it has parked. It holds the
// releases of the set's acknowledgement ledger meanwhile: a held result
// the ledger recorded as acknowledged before is left out of the records,
// as acknowledged (see ackCut). Every
// rollout is asked first, then the records are read, so the rollouts park
// concurrently however many there are. A member that already completed and
// closed is skipped: its result was delivered. A member with no workflow is
// an error naming it; one held for another checkpoint refuses. A retried
// activity asks again (a second park for the same checkpoint changes
// nothing) and reads the same records.
func (c *Coordinator) ParkMembers(ctx context.Context, in checkpoint.ParkMembersInput) (checkpoint.ParkMembersResult, error) {
	dir, err := c.checkDir(ctx, in.Root, in.CheckpointID)
	if err != nil {
		return checkpoint.ParkMembersResult{}, err
	}
	tc, err := c.temporal()
	if err != nil {
		return checkpoint.ParkMembersResult{}, err
	}
	members, err := readRolloutList(ctx, at(dir, checkpoint.ListMembers), in.CheckpointID)
	if err != nil {
		return checkpoint.ParkMembersResult{}, fmt.Errorf("read membership: %w", err)
	}
	cut, err := c.holdAcks(ctx, tc, in.Set, in.CheckpointID, in.Deadline)
	if err != nil {
		return checkpoint.ParkMembersResult{}, fmt.Errorf("park members of checkpoint %s: %w", in.CheckpointID, err)
	}
	res, err := c.parkAndStage(ctx, dir, tc, in, members.Rollouts, cut)
	if eerr := cut.end(ctx); eerr != nil && err == nil {
		err = fmt.Errorf("park members of checkpoint %s: %w", in.CheckpointID, eerr)
	}
	if err != nil {
		return checkpoint.ParkMembersResult{}, err
	}
	c.Failpoints.Hit(failpoint.CoordinatorAfterPark)
	return res, nil
}

// parkAndStage parks the members, leaves out the records of results the
// set's ledger had acknowledged by the cut, and stages the rest and the
// list of every parked rollout (all of them are resumed).
func (c *Coordinator) parkAndStage(ctx context.Context, dir storage.Store, tc client.Client, in checkpoint.ParkMembersInput, ids []string, cut *ackCut) (checkpoint.ParkMembersResult, error) {
	p := &parking{c: c, tc: tc, in: in, ids: ids, closed: make([]bool, len(ids))}
	if err := p.ask(ctx); err != nil {
		return checkpoint.ParkMembersResult{}, fmt.Errorf("park members of checkpoint %s: %w", in.CheckpointID, err)
	}
	records, res, err := p.collect(ctx)
	if err != nil {
		return checkpoint.ParkMembersResult{}, fmt.Errorf("park members of checkpoint %s: %w", in.CheckpointID, err)
	}
	parked := make([]string, 0, len(records))
	for id := range records {
		parked = append(parked, id)
	}
	sort.Strings(parked)
	acked, err := cut.acknowledged(ctx, records)
	if err != nil {
		return checkpoint.ParkMembersResult{}, fmt.Errorf("park members of checkpoint %s: %w", in.CheckpointID, err)
	}
	kept := make(map[string][]byte, len(records))
	for id, raw := range records {
		if !acked[id] {
			kept[id] = raw
		}
	}
	res.Acknowledged = len(acked)
	res.CompletedUnacked -= len(acked)
	if res.RecordsDigest, err = writeRecords(ctx, at(dir, checkpoint.StagingRecords), kept); err != nil {
		return checkpoint.ParkMembersResult{}, err
	}
	if _, err := writeJSONAtomic(ctx, at(dir, checkpoint.ListParked), rolloutList{CheckpointID: in.CheckpointID, Set: in.Set, Rollouts: parked}); err != nil {
		return checkpoint.ParkMembersResult{}, err
	}
	return res, nil
}

// parking is one ParkMembers call: the members, and which of them turned
// out to have completed and closed before they could park.
type parking struct {
	c      *Coordinator
	tc     client.Client
	in     checkpoint.ParkMembersInput
	ids    []string
	closed []bool
	parkingState
}

// closedOrMissing explains a failed update to rollout id: closed (true, nil)
// when its workflow has completed; an error naming it when it has no
// workflow; otherwise the update's own error.
func (c *Coordinator) closedOrMissing(ctx context.Context, tc client.Client, id string, updateErr error) (bool, error) {
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	ri, err := describeRollout(ctx, tc, id)
	if err != nil {
		return false, fmt.Errorf("rollout %s: %v (and then: %w)", id, updateErr, err)
	}
	switch {
	case !ri.Exists:
		return false, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("rollout %s is a member but workflow %s does not exist", id, rollout.WorkflowID(id)), checkpoint.ErrMemberMissing, nil)
	case !ri.Running:
		return true, nil
	}
	var ae *temporal.ApplicationError
	if errors.As(updateErr, &ae) {
		// The rollout itself answered no: asking again will not change it.
		return false, temporal.NewNonRetryableApplicationError(fmt.Sprintf("rollout %s refused: %v", id, updateErr), checkpoint.ErrMemberRefused, nil)
	}
	return false, fmt.Errorf("rollout %s: %w", id, updateErr)
}
