package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/internal/fanout"
	"github.com/turnstile-rl/turnstile/internal/visibility"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// Park and resume of a busy set go by signal, not by update: an update is
// answered only when the rollout's next workflow task completes, and on a
// busy data plane that task queues behind every other rollout's, so a
// fan-out of updates waited minutes for 1,000 rollouts. A signal is durable
// once the server has it; the parked rollouts' records are then read by
// query, only for the rollouts visibility lists as parked.

// DefaultSignalConcurrency bounds concurrent signals and queries of one
// coordinator activity when Coordinator.SignalConcurrency is zero. Each is a
// short server call that waits for no rollout, so a wider fan-out than the
// control calls' keeps 10,000 rollouts to seconds.
const DefaultSignalConcurrency = 64

// parkPoll is how often the park step looks for newly parked rollouts, and
// fullSweepEvery how many looks apart it describes every rollout still
// pending, whatever visibility says (visibility lags behind; a member may
// have closed). queryTimeout bounds one park record query: a query waits
// for the rollout's workflow task, and one that times out on a busy data
// plane is asked again next round.
const (
	parkPoll       = 500 * time.Millisecond
	fullSweepEvery = 6
	queryTimeout   = 5 * time.Second
)

func (c *Coordinator) signalLimit() int {
	if c.SignalConcurrency > 0 {
		return c.SignalConcurrency
	}
	return DefaultSignalConcurrency
}

// releaseRollouts signals every rollout of ids to resume from checkpointID.
// A rollout not held for it ignores the signal, so a retry is harmless. It
// counts the signalled rollouts and those whose workflow is closed or gone.
func (c *Coordinator) releaseRollouts(ctx context.Context, tc client.Client, checkpointID string, ids []string) (int, int, error) {
	var resumed, gone atomic.Int64
	prog := newProgress(ctx, "resume rollouts", len(ids))
	defer prog.stop()
	req := rollout.ResumeRequest{CheckpointID: checkpointID}
	err := fanout.Each(ctx, len(ids), c.signalLimit(), func(ctx context.Context, i int) error {
		defer prog.add()
		err := tc.SignalWorkflow(ctx, rollout.WorkflowID(ids[i]), "", rollout.SignalResume, req)
		var nf *serviceerror.NotFound
		switch {
		case errors.As(err, &nf):
			gone.Add(1) // closed or never started: nothing to release
		case err != nil:
			return fmt.Errorf("resume %s: %w", ids[i], err)
		default:
			resumed.Add(1)
		}
		return nil
	})
	return int(resumed.Load()), int(gone.Load()), err
}

// ask signals every member to park.
func (p *parking) ask(ctx context.Context) error {
	prog := newProgress(ctx, "ask to park", len(p.ids))
	defer prog.stop()
	return p.signal(ctx, allIndexes(len(p.ids)), prog)
}

// signal sends the park signal to the members of idx. A member whose
// workflow has closed is marked closed; one with no workflow fails the step,
// naming it.
func (p *parking) signal(ctx context.Context, idx []int, prog *progress) error {
	req := rollout.ParkRequest{CheckpointID: p.in.CheckpointID, Deadline: p.in.Deadline, LeaseUntil: p.in.LeaseUntil}
	return fanout.Each(ctx, len(idx), p.c.signalLimit(), func(ctx context.Context, k int) error {
		i := idx[k]
		if prog != nil {
			defer prog.add()
		}
		err := p.tc.SignalWorkflow(ctx, rollout.WorkflowID(p.ids[i]), "", rollout.SignalPark, req)
		if err == nil {
			return nil
		}
		gone, gerr := p.c.closedOrMissing(ctx, p.tc, p.ids[i], err)
		if gerr != nil {
			return gerr
		}
		if gone {
			p.mu.Lock()
			p.closed[i] = true
			p.mu.Unlock()
		}
		return nil
	})
}

func allIndexes(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// collect reads every member's park record once it has parked, checks it,
// and counts the members. Each round lists the set's rollouts parked for
// this checkpoint or holding a result, and queries only those not yet read;
// every fullSweepEvery rounds it queries every pending member.
func (p *parking) collect(ctx context.Context) (map[string][]byte, checkpoint.ParkMembersResult, error) {
	p.records = map[string][]byte{}
	res := checkpoint.ParkMembersResult{Members: len(p.ids)}
	prog := newProgress(ctx, "parked", len(p.ids))
	defer prog.stop()
	for round := 1; ; round++ {
		pending := p.pending()
		if len(pending) == 0 {
			break
		}
		var err error
		if round%fullSweepEvery != 0 {
			listed, lerr := p.listParked(ctx)
			pending, err = filterIndexes(pending, func(i int) bool { return listed[p.ids[i]] }), lerr
		} else {
			pending, err = p.describeParked(ctx, pending, prog)
		}
		if err != nil {
			return nil, res, err
		}
		if err := p.readRecords(ctx, pending, prog); err != nil {
			return nil, res, err
		}
		if len(p.pending()) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return nil, res, ctx.Err()
		case <-time.After(parkPoll):
		}
	}
	for _, raw := range p.records {
		if rec, _ := DecodeRecord(raw); rec.Result != nil {
			res.CompletedUnacked++
		}
	}
	for _, g := range p.closed {
		if g {
			res.Closed++
		}
	}
	res.Parked = len(p.records)
	return p.records, res, nil
}

// pending are the indexes of the members neither closed nor read.
func (p *parking) pending() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int
	for i, id := range p.ids {
		if _, ok := p.records[id]; !ok && !p.closed[i] {
			out = append(out, i)
		}
	}
	return out
}

func filterIndexes(idx []int, keep func(int) bool) []int {
	out := idx[:0:0]
	for _, i := range idx {
		if keep(i) {
			out = append(out, i)
		}
	}
	return out
}

// listParked lists the set's running rollouts parked for this checkpoint
// or holding a completed result.
func (p *parking) listParked(ctx context.Context) (map[string]bool, error) {
	extra := fmt.Sprintf(`ExecutionStatus = "Running" AND (%s = %q OR %s = %q)`,
		rollout.SACheckpointID, p.in.CheckpointID, rollout.SARolloutPhase, rollout.PhaseAwaitingAck)
	out := map[string]bool{}
	err := visibility.ListSet(ctx, p.tc, p.in.Set, extra, func(e *workflowpb.WorkflowExecutionInfo) error {
		if id, ok := rollout.IDOf(e.GetExecution().GetWorkflowId()); ok {
			out[id] = true
		}
		return nil
	})
	return out, err
}

// describeParked describes every member of idx (the server answers from
// the run's own state, without the worker and without visibility's lag):
// it marks the closed ones and returns those parked for a checkpoint or
// holding a result.
//
// A member running and parked for no checkpoint is signalled again: a run
// held for another checkpoint when the first signal came (a restored run
// not yet released by its restore or recovery) ignored it, and once
// released it would never park; the soak saw a checkpoint miss its deadline
// waiting on such runs. A second signal for this checkpoint is harmless.
func (p *parking) describeParked(ctx context.Context, idx []int, prog *progress) ([]int, error) {
	var mu sync.Mutex
	var out, again []int
	err := fanout.Each(ctx, len(idx), p.c.signalLimit(), func(ctx context.Context, k int) error {
		i := idx[k]
		ri, err := describeRollout(ctx, p.tc, p.ids[i])
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case !ri.Exists:
			return temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("rollout %s is a member but workflow %s does not exist", p.ids[i], rollout.WorkflowID(p.ids[i])), checkpoint.ErrMemberMissing, nil)
		case !ri.Running:
			p.mu.Lock()
			p.closed[i] = true
			p.mu.Unlock()
			prog.add()
		case ri.CheckpointID != "" || ri.Phase == string(rollout.PhaseAwaitingAck):
			// Parked for this checkpoint, holding a result, or held for
			// another checkpoint (its query refuses, and the step fails).
			out = append(out, i)
		default:
			again = append(again, i)
		}
		return nil
	})
	if err == nil && len(again) > 0 {
		err = p.signal(ctx, again, nil)
	}
	return out, err
}

// readRecords queries the park record of every member of idx; a member not
// parked yet stays pending.
func (p *parking) readRecords(ctx context.Context, idx []int, prog *progress) error {
	return fanout.Each(ctx, len(idx), p.c.signalLimit(), func(ctx context.Context, k int) error {
		i := idx[k]
		raw, closed, err := p.queryRecord(ctx, p.ids[i])
		if err != nil || (raw == nil && !closed) {
			return err
		}
		if closed {
			p.mu.Lock()
			p.closed[i] = true
			p.mu.Unlock()
			prog.add()
			return nil
		}
		rec, err := DecodeRecord(raw)
		if err == nil {
			err = checkRecord(rec, p.in.CheckpointID, p.in.Set, p.ids[i])
		}
		if err != nil {
			return temporal.NewNonRetryableApplicationError(fmt.Sprintf("park of %s: %v", p.ids[i], err), checkpoint.ErrCheckpointInvalid, nil)
		}
		p.mu.Lock()
		p.records[p.ids[i]] = raw
		p.mu.Unlock()
		prog.add()
		return nil
	})
}

// queryRecord asks rollout id for its park record: the record; or closed;
// or neither when it has not parked yet.
func (p *parking) queryRecord(ctx context.Context, id string) (json.RawMessage, bool, error) {
	qctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	resp, err := p.tc.QueryWorkflowWithOptions(qctx, &client.QueryWorkflowWithOptionsRequest{
		WorkflowID: rollout.WorkflowID(id), QueryType: rollout.QueryParkRecord, Args: []any{p.in.CheckpointID},
		QueryRejectCondition: enumspb.QUERY_REJECT_CONDITION_NOT_OPEN,
	})
	var qf *serviceerror.QueryFailed
	switch {
	case errors.As(err, &qf) && strings.HasPrefix(qf.Message, rollout.NotParkedYet):
		return nil, false, nil
	case errors.As(err, &qf) && strings.HasPrefix(qf.Message, rollout.HeldForOther):
		return nil, false, temporal.NewNonRetryableApplicationError(fmt.Sprintf("rollout %s refused: %s", id, qf.Message), checkpoint.ErrMemberRefused, nil)
	case err != nil && ctx.Err() == nil && isTimeout(err):
		return nil, false, nil // a busy data plane: ask again next round
	case err != nil:
		gone, gerr := p.c.closedOrMissing(ctx, p.tc, id, err)
		return nil, gone, gerr
	case resp.QueryRejected != nil:
		return nil, true, nil // closed: its result was delivered
	}
	var raw json.RawMessage
	if err := resp.QueryResult.Get(&raw); err != nil {
		return nil, false, fmt.Errorf("park record of %s: %w", id, err)
	}
	return raw, false, nil
}

// parkingState is what collect shares between its fan-out's goroutines.
type parkingState struct {
	mu      sync.Mutex
	records map[string][]byte
}

// isTimeout tells a query that ran out of time from one that failed.
func isTimeout(err error) bool {
	var de *serviceerror.DeadlineExceeded
	var ce *serviceerror.Canceled
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &de) || errors.As(err, &ce)
}
