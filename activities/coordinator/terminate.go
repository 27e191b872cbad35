package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/turnstile-rl/turnstile/internal/fanout"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"

	"go.temporal.io/api/serviceerror"

	"github.com/turnstile-rl/turnstile/internal/failpoint"
)

// TerminateStale terminates every running run of a rollout of the set in
// the attempt map whose attempt is below its new attempt (runs of the
// replaced attempts, and of rollouts started after the cut). The
// environment servers already refuse that attempt; this stops its workflow
// code too.
func (c *Coordinator) TerminateStale(ctx context.Context, in checkpoint.TerminateStaleInput) (checkpoint.TerminateStaleResult, error) {
	rs, err := c.setUpRestore(ctx, restoreSetUp{root: in.Root, checkpointID: in.CheckpointID, restoreID: in.RestoreID,
		temporal: true, attempts: true})
	if err != nil {
		return checkpoint.TerminateStaleResult{}, err
	}
	tc, rid, af := rs.tc, rs.rid, rs.af
	ids := sortedKeys(af.Attempts)
	var mu sync.Mutex
	n := 0
	prog := newProgress(ctx, "terminate", len(ids))
	defer prog.stop()
	err = fanout.Each(ctx, len(ids), c.limit(), func(ctx context.Context, i int) error {
		defer prog.add()
		id, attempt := ids[i], af.Attempts[ids[i]]
		ri, err := describeRollout(ctx, tc, id)
		if err != nil {
			return err
		}
		// A rollout of another set whose session shared a server is only
		// fenced there; its workflow is not this restore's to end.
		if !ri.Running || ri.Set != af.Set || (ri.HasAttempt && int(ri.Attempt) >= attempt) {
			return nil
		}
		reason := fmt.Sprintf("superseded by the restore of checkpoint %s: attempt %d replaces attempt %d", in.CheckpointID, attempt, ri.Attempt)
		if rid != in.CheckpointID {
			reason = fmt.Sprintf("superseded by restore %s of checkpoint %s: attempt %d replaces attempt %d", rid, in.CheckpointID, attempt, ri.Attempt)
		}
		err = tc.TerminateWorkflow(ctx, rollout.WorkflowID(id), ri.RunID, reason)
		var nf *serviceerror.NotFound
		if err != nil && !errors.As(err, &nf) { // NotFound: it closed meanwhile
			return fmt.Errorf("terminate %s run %s: %w", rollout.WorkflowID(id), ri.RunID, err)
		}
		if err == nil {
			mu.Lock()
			n++
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		return checkpoint.TerminateStaleResult{}, fmt.Errorf("terminate stale runs of checkpoint %s: %w", in.CheckpointID, err)
	}
	c.Failpoints.Hit(failpoint.RestoreAfterTerminate)
	return checkpoint.TerminateStaleResult{Terminated: n}, nil
}

func sortedKeys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
