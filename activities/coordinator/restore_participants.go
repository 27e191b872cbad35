package coordinator

import (
	"context"
	"fmt"
	"sync"

	"github.com/turnstile-rl/turnstile/internal/fanout"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"

	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// RestoreParticipants asks every environment server to install its
// artifact with the attempt map, in a control session named by the restore
// id: export_restore sessions become the new attempt, restart-only ones and
// the set's rollouts started after the cut only have their fence raised
// (what they hold now is dropped), another set's sessions are left alone,
// and the server stays paused until resumed. A server that answers the
// restore id is retired already resumed it in an earlier run of this
// restore.
func (c *Coordinator) RestoreParticipants(ctx context.Context, in checkpoint.RestoreParticipantsInput) (checkpoint.RestoreParticipantsResult, error) {
	rs, err := c.setUpRestore(ctx, restoreSetUp{root: in.Root, checkpointID: in.CheckpointID, restoreID: in.RestoreID,
		participants: in.Participants, checkParticipants: true, attempts: true})
	if err != nil {
		return checkpoint.RestoreParticipantsResult{}, err
	}
	indexes, err := participantIndexes(in.Participants, in.Indexes)
	if err != nil {
		return checkpoint.RestoreParticipantsResult{}, err
	}
	var mu sync.Mutex
	res := checkpoint.RestoreParticipantsResult{Participants: len(indexes)}
	prog := newProgress(ctx, "restore participants", len(indexes))
	defer prog.stop()
	err = fanout.Each(ctx, len(indexes), c.limit(), func(ctx context.Context, k int) error {
		defer prog.add()
		i := indexes[k]
		url := in.Participants[i]
		cc, err := c.control(url)
		if err != nil {
			return err
		}
		var resp protocol.RestoreResponse
		err = c.watched(ctx, url, "restore", func(ctx context.Context) error {
			var err error
			resp, err = cc.Restore(ctx, protocol.RestoreRequest{
				CheckpointID: in.CheckpointID, RestoreID: rs.rid, Location: checkpoint.ParticipantLocation(rs.dir.Location(), i), Attempts: rs.af.Attempts,
			})
			return err
		})
		if remoteCode(err) == protocol.CodeStaleCheckpoint {
			mu.Lock()
			res.AlreadyResumed++
			mu.Unlock()
			return nil
		}
		if err != nil {
			return controlError(url, "restore", err)
		}
		// Written before the step reports: the start step reads it, and a
		// participant resumed later answers stale_checkpoint instead.
		rf := replaysOf(in.CheckpointID, rs.rid, i, resp)
		if _, err := writeJSONAtomic(ctx, replaysPath(rs.rdir, i), rf); err != nil {
			return err
		}
		mu.Lock()
		res.Replayed += len(rf.Replayed)
		res.Diverged += len(rf.Diverged)
		res.Restored += len(resp.Restored)
		res.Restarted += len(resp.Restarted)
		res.Fenced += len(resp.Fenced)
		res.Untouched += len(resp.Untouched)
		mu.Unlock()
		return nil
	})
	if err != nil {
		return checkpoint.RestoreParticipantsResult{}, fmt.Errorf("restore participants of checkpoint %s (restore %s): %w", in.CheckpointID, rs.rid, err)
	}
	c.Failpoints.Hit(failpoint.RestoreAfterParticipants)
	return res, nil
}

// participantIndexes are the participants a restore step installs: all of
// them, or the ones indexes names (a scoped recovery), each in range once.
func participantIndexes(urls []string, indexes []int) ([]int, error) {
	if len(indexes) == 0 {
		all := make([]int, len(urls))
		for i := range all {
			all[i] = i
		}
		return all, nil
	}
	seen := map[int]bool{}
	for _, i := range indexes {
		if i < 0 || i >= len(urls) || seen[i] {
			return nil, rollout.BadInput("participant index %d: want each of 0..%d at most once", i, len(urls)-1)
		}
		seen[i] = true
	}
	return indexes, nil
}
