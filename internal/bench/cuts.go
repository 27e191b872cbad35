package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/turnstile-rl/turnstile/internal/fanout"
	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// longTask is the counter target of a checkpointed rollout: far more turns
// than it can run during the scenario, so every one is mid-episode.
const longTask = 5000

// restoreTimeout bounds the wait for a restore to release every rollout.
const restoreTimeout = 10 * time.Minute

// inFlightTimeout bounds the wait for every rollout of a set to be past its
// first model call.
const inFlightTimeout = 3 * time.Minute

// cuts checkpoints and restores one set of in-flight rollouts per size.
func (s *stack) cuts(ctx context.Context, stamp string) ([]Cut, error) {
	var out []Cut
	for _, n := range s.cfg.CheckpointSizes {
		c, err := s.cut(ctx, fmt.Sprintf("ck%d-%s", n, stamp), n)
		if err != nil {
			return out, fmt.Errorf("checkpoint of %d rollouts: %w", n, err)
		}
		out = append(out, c)
	}
	return out, nil
}

func (s *stack) cut(ctx context.Context, set string, n int) (Cut, error) {
	out := Cut{Rollouts: n}
	s.logf("checkpoint %d: starting %d long rollouts on the slow policy", n, n)
	submitted := time.Now()
	if err := s.startSet(ctx, set, n); err != nil {
		return out, err
	}
	out.SubmitMS = ms(time.Since(submitted))
	defer s.terminateSet(context.WithoutCancel(ctx), set)
	inFlight, err := s.awaitInFlight(ctx, set, n)
	if err != nil {
		return out, err
	}
	out.InFlight, out.PastFirstTurnMS = inFlight, -1
	if inFlight >= n {
		out.PastFirstTurnMS = ms(time.Since(submitted))
	}
	s.logf("checkpoint %d: started in %.0f ms, every rollout past its first turn after %.0f ms", n, out.SubmitMS, out.PastFirstTurnMS)

	ts := trainer.New(s.client, workerQueue)
	root := filepath.Join(s.cfg.OutDir, "checkpoints")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return out, err
	}
	s.logf("checkpoint %d: cutting %d in-flight rollouts", n, inFlight)
	t0 := time.Now()
	res, err := ts.Checkpoint(ctx, trainer.CheckpointRequest{
		Set: set, CheckpointID: set, Root: root, Participants: []string{s.envURL}, Timeout: s.cfg.CheckpointTimeout,
	}, true)
	if err != nil {
		return out, err
	}
	out.CheckpointMS = ms(time.Since(t0))
	if fi, err := os.Stat(filepath.Join(checkpoint.CheckpointDir(root, set), checkpoint.AggregateManifestName)); err == nil {
		out.ManifestMS = ms(fi.ModTime().Sub(t0))
	}
	out.CutMS, out.Bytes, out.Parked = float64(res.CutMillis), res.Bytes, res.Parked
	out.BeyondSlowestMS = out.CutMS - ms(s.cfg.SlowPolicy+s.cfg.SlowJitter)
	out.ReleasedMS = s.awaitRunning(ctx, set, t0, n, `RolloutPhase = "parked"`, 0)
	out.QueuedMS = s.firstTaskWait(ctx, checkpoint.CheckpointWorkflowID(set))

	s.logf("checkpoint %d: cut %.0f ms, manifest after %.0f ms, %d bytes", n, out.CutMS, out.ManifestMS, out.Bytes)
	if out.TurnP50MS, out.TurnP95MS, err = s.turnLatency(ctx, set, n); err != nil {
		return out, err
	}
	s.logf("checkpoint %d: turn latency p50 %.0f ms, p95 %.0f ms; killing every run and the worker", n, out.TurnP50MS, out.TurnP95MS)
	if err := s.killSet(ctx, set); err != nil {
		return out, err
	}
	t1 := time.Now()
	rctx, cancel := context.WithTimeout(ctx, restoreTimeout)
	defer cancel()
	rres, err := ts.Restore(rctx, trainer.RestoreRequest{CheckpointID: set, Root: root, Participants: []string{s.envURL}}, true)
	if err != nil && ctx.Err() == nil && rctx.Err() != nil {
		// A saturated data plane starves restored runs' first workflow
		// tasks; the figure is then "more than restoreTimeout".
		s.logf("warning: restore of %d rollouts not all running after %s", n, restoreTimeout)
		out.RestoreMS = -1
		return out, nil
	}
	if err != nil {
		return out, err
	}
	out.RestoreMS, out.Restored = ms(time.Since(t1)), rres.Restored
	out.RestoreReleasedMS = s.awaitRunning(ctx, set, t1, n, `RolloutPhase != "parked"`, rres.Restored)
	s.logf("checkpoint %d: restore of %d rollouts to all running in %.0f ms, released after %.0f ms", n, rres.Restored, out.RestoreMS, out.RestoreReleasedMS)
	return out, nil
}

func (s *stack) startSet(ctx context.Context, set string, n int) error {
	return fanout.Each(ctx, n, startConcurrency, func(ctx context.Context, i int) error {
		_, err := s.startRun(ctx, turnstileKind, spec{set: set, i: i, turns: longTask, policyURL: s.slowURL})
		return err
	})
}

// awaitInFlight waits until visibility lists every rollout of set past its
// first model call, and returns how many it lists. Visibility may lag
// behind a loaded server: after inFlightTimeout the cut is taken of those
// listed, and the report says how many they were.
func (s *stack) awaitInFlight(ctx context.Context, set string, n int) (int, error) {
	query := fmt.Sprintf(`%s AND %s >= 1 AND ExecutionStatus = "Running"`, rollout.SetQuery(set), rollout.SARolloutTurn)
	var got int64
	err := waitUntil(ctx, inFlightTimeout, time.Second, func() (bool, error) {
		resp, err := s.client.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: query})
		if err != nil {
			return false, err
		}
		got = resp.GetCount()
		return got >= int64(n), nil
	})
	switch {
	case err == nil:
		return int(got), nil
	case errors.Is(err, errNotDone) && got > 0:
		s.logf("warning: %d of %d rollouts listed in flight after %s; cutting them as they are", got, n, inFlightTimeout)
		return int(got), nil
	default:
		return int(got), fmt.Errorf("%d of %d rollouts in flight: %w", got, n, err)
	}
}

// awaitRunning waits until visibility counts want running runs of set
// matching extra (0: none), and returns the wall time since t0 (-1 when
// that took longer than restoreTimeout).
func (s *stack) awaitRunning(ctx context.Context, set string, t0 time.Time, n int, extra string, want int) float64 {
	query := fmt.Sprintf(`%s AND ExecutionStatus = "Running" AND %s`, rollout.SetQuery(set), extra)
	err := waitUntil(ctx, restoreTimeout, 250*time.Millisecond, func() (bool, error) {
		resp, err := s.client.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: query})
		if err != nil {
			return false, err
		}
		if want == 0 {
			return resp.GetCount() == 0, nil
		}
		return resp.GetCount() >= int64(want), nil
	})
	if err != nil {
		s.logf("warning: checkpoint %d: %s: %v", n, query, err)
		return -1
	}
	return ms(time.Since(t0))
}

// firstTaskWait is how long the first workflow task of workflowID waited
// to start (0 when the history cannot be read).
func (s *stack) firstTaskWait(ctx context.Context, workflowID string) float64 {
	iter := s.client.GetWorkflowHistory(ctx, workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var started time.Time
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			return 0
		}
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
			started = ev.GetEventTime().AsTime()
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED:
			return ms(ev.GetEventTime().AsTime().Sub(started))
		}
	}
	return 0
}

// terminateSet ends every running workflow of set, so the next scenario
// runs on an idle server.
func (s *stack) terminateSet(ctx context.Context, set string) {
	query := rollout.SetQuery(set) + ` AND ExecutionStatus = "Running"`
	err := waitUntil(ctx, 5*time.Minute, time.Second, func() (bool, error) {
		var ids []string
		var token []byte
		for {
			resp, err := s.client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token, PageSize: 1000})
			if err != nil {
				return false, err
			}
			for _, e := range resp.GetExecutions() {
				ids = append(ids, e.GetExecution().GetWorkflowId())
			}
			if token = resp.GetNextPageToken(); len(token) == 0 {
				break
			}
		}
		if len(ids) == 0 {
			return true, nil
		}
		err := fanout.Each(ctx, len(ids), startConcurrency, func(ctx context.Context, i int) error {
			err := s.client.TerminateWorkflow(ctx, ids[i], "", "bench: scenario over")
			if _, gone := err.(*serviceerror.NotFound); gone {
				return nil
			}
			return err
		})
		return false, err
	})
	if err != nil {
		s.logf("warning: set %s not fully terminated: %v", set, err)
	}
}

// errNotDone: a wait's condition did not hold in time.
var errNotDone = errors.New("not done")

// waitUntil polls cond every interval until it holds, fails, or timeout.
func waitUntil(ctx context.Context, timeout, interval time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w after %s", errNotDone, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval): // polling visibility, which has no push
		}
	}
}

// turnLatency reads the histories of up to taskSample of set's n rollouts
// (spread over the set) and returns the p50 and p95 of their turns: from
// one model call's scheduling to the next's. A turn during which the run
// took a signal or an update (a park, a resume) is left out: it measures
// the checkpoint, not the turn.
func (s *stack) turnLatency(ctx context.Context, set string, n int) (p50, p95 float64, err error) {
	var turns []float64
	step := max(n/taskSample, 1)
	for i := 0; i < n; i += step {
		id := rollout.WorkflowID(fmt.Sprintf("%s-%05d", set, i))
		iter := s.client.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		var last time.Time
		interrupted := false
		for iter.HasNext() {
			ev, err := iter.Next()
			if err != nil {
				return 0, 0, fmt.Errorf("turn latency: history of %s: %w", id, err)
			}
			switch {
			case ev.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED,
				ev.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
				interrupted = true
			case ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() == rollout.CallModelName:
				at := ev.GetEventTime().AsTime()
				if !last.IsZero() && !interrupted {
					turns = append(turns, ms(at.Sub(last)))
				}
				last, interrupted = at, false
			}
		}
	}
	return median(turns), percentile(turns, 0.95), nil
}

// killSet kills what runs the set: every run of it is terminated and the
// turnstile worker restarted, so the restore starts from the checkpoint
// alone.
func (s *stack) killSet(ctx context.Context, set string) error {
	s.terminateSet(ctx, set)
	s.worker.Kill()
	if err := s.startWorker(ctx); err != nil {
		return fmt.Errorf("restart the worker: %w", err)
	}
	return nil
}
