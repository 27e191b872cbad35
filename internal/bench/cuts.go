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

// cuts checkpoints and restores one set of in-flight rollouts per size,
// then one set submitted through its admission per queued size.
func (s *stack) cuts(ctx context.Context, stamp string) ([]Cut, error) {
	var out []Cut
	for _, n := range s.cfg.CheckpointSizes {
		c, err := s.cut(ctx, fmt.Sprintf("ck%d-%s", n, stamp), n, 0)
		if err != nil {
			return out, fmt.Errorf("checkpoint of %d rollouts: %w", n, err)
		}
		out = append(out, c)
	}
	m := s.cfg.maxInFlight()
	for _, n := range s.cfg.QueuedSizes {
		c, err := s.cut(ctx, fmt.Sprintf("q%d-%s", n, stamp), n, m)
		if err != nil {
			return out, fmt.Errorf("checkpoint of %d rollouts queued at max_in_flight %d: %w", n, m, err)
		}
		out = append(out, c)
	}
	return out, nil
}

// cutName is how the log names a busy set.
func cutName(n, maxInFlight int) string {
	if maxInFlight == 0 {
		return fmt.Sprint(n)
	}
	return fmt.Sprintf("%d queued (max_in_flight %d)", n, maxInFlight)
}

// cut runs one busy set: n rollouts started at once (maxInFlight 0) or
// submitted through the set's admission at maxInFlight; a checkpoint once
// every running one is past its first turn; every run killed; a restore.
func (s *stack) cut(ctx context.Context, set string, n, maxInFlight int) (Cut, error) {
	out := Cut{Rollouts: n, MaxInFlight: maxInFlight}
	name := cutName(n, maxInFlight)
	mark := s.markMetrics(ctx, "checkpoint "+name)
	defer mark.end(ctx)
	running, ids := n, []string(nil)
	s.logf("checkpoint %s: submitting %d long rollouts on the slow policy", name, n)
	submitted := time.Now()
	var err error
	if maxInFlight == 0 {
		err = s.startSet(ctx, set, n)
		for i := range n {
			ids = append(ids, fmt.Sprintf("%s-%05d", set, i))
		}
	} else {
		running = min(n, maxInFlight)
		if ids, err = s.submitSet(ctx, set, n, maxInFlight); err == nil {
			ids = ids[:running] // admitted in order: these have histories
		}
	}
	out.SubmitMS = ms(time.Since(submitted))
	defer s.cleanSet(context.WithoutCancel(ctx), set, maxInFlight > 0)
	if err != nil {
		return out, err
	}
	var inFlight int
	if maxInFlight == 0 {
		inFlight, err = s.awaitInFlight(ctx, set, running)
	} else {
		inFlight, err = s.awaitAdmitted(ctx, set, running)
	}
	if err != nil {
		return out, err
	}
	out.InFlight, out.PastFirstTurnMS = inFlight, -1
	if inFlight >= running {
		out.PastFirstTurnMS = ms(time.Since(submitted))
	}
	s.logf("checkpoint %s: submitted in %.0f ms, every running rollout past its first turn after %.0f ms", name, out.SubmitMS, out.PastFirstTurnMS)
	return s.cutAndRestore(ctx, set, name, ids, out)
}

// cutAndRestore checkpoints set, kills every run of it and the worker, and
// restores it.
func (s *stack) cutAndRestore(ctx context.Context, set, name string, ids []string, out Cut) (Cut, error) {
	n := out.Rollouts
	ts := trainer.New(s.client, workerQueue)
	root := filepath.Join(s.cfg.OutDir, "checkpoints")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return out, err
	}
	s.logf("checkpoint %s: cutting %d in-flight rollouts", name, out.InFlight)
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
	out.CutMS, out.Bytes, out.Parked, out.Queued = float64(res.CutMillis), res.Bytes, res.Parked, res.Queued
	out.BeyondSlowestMS = out.CutMS - ms(s.cfg.SlowPolicy+s.cfg.SlowJitter)
	out.ReleasedMS = s.awaitRunning(ctx, set, t0, n, `RolloutPhase = "parked"`, 0)
	out.QueuedMS = s.firstTaskWait(ctx, checkpoint.CheckpointWorkflowID(set))

	s.logf("checkpoint %s: cut %.0f ms, manifest after %.0f ms, %d bytes, %d parked, %d queued", name, out.CutMS, out.ManifestMS, out.Bytes, out.Parked, out.Queued)
	if out.TurnP50MS, out.TurnP95MS, err = s.turnLatency(ctx, ids); err != nil {
		return out, err
	}
	s.logf("checkpoint %s: turn latency p50 %.0f ms, p95 %.0f ms; killing every run and the worker", name, out.TurnP50MS, out.TurnP95MS)
	if err := s.killSet(ctx, set, out.MaxInFlight > 0); err != nil {
		return out, err
	}
	t1 := time.Now()
	rctx, cancel := context.WithTimeout(ctx, restoreTimeout)
	defer cancel()
	rres, err := ts.Restore(rctx, trainer.RestoreRequest{CheckpointID: set, Root: root, Participants: []string{s.envURL}}, true)
	if err != nil && ctx.Err() == nil && rctx.Err() != nil {
		// A saturated data plane starves restored runs' first workflow
		// tasks; the figure is then "more than restoreTimeout".
		s.logf("warning: restore of %s rollouts not all running after %s", name, restoreTimeout)
		out.RestoreMS = -1
		return out, nil
	}
	if err != nil {
		return out, err
	}
	out.RestoreMS, out.Restored = ms(time.Since(t1)), rres.Restored
	out.RestoreReleasedMS = s.awaitRunning(ctx, set, t1, n, `RolloutPhase != "parked"`, rres.Restored)
	s.logf("checkpoint %s: restore of %d rollouts (%d queued again) to all running in %.0f ms, released after %.0f ms", name, rres.Restored, rres.Queued, out.RestoreMS, out.RestoreReleasedMS)
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

// turnLatency reads the histories of up to taskSample of the rollouts ids
// (spread over them) and returns the p50 and p95 of their turns: from
// one model call's scheduling to the next's. A turn during which the run
// took a signal or an update (a park, a resume) is left out: it measures
// the checkpoint, not the turn.
func (s *stack) turnLatency(ctx context.Context, ids []string) (p50, p95 float64, err error) {
	var turns []float64
	step := max(len(ids)/taskSample, 1)
	for i := 0; i < len(ids); i += step {
		id := rollout.WorkflowID(ids[i])
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

// killSet kills what runs the set: its admission (admitted) and every run
// of it are terminated and the turnstile worker restarted, so the restore
// starts from the checkpoint alone.
func (s *stack) killSet(ctx context.Context, name string, admitted bool) error {
	if admitted {
		if err := s.terminateAdmission(ctx, name); err != nil {
			return err
		}
	}
	s.terminateSet(ctx, name)
	if s.cfg.CPUProfile {
		// Stopped, not killed: a worker writes its CPU profile as it
		// stops, and the profile of the busy set's cut is what this row
		// is profiled for. Its runs were terminated above either way.
		s.worker.Stop(15 * time.Second)
	} else {
		s.worker.Kill()
	}
	if err := s.startWorker(ctx); err != nil {
		return fmt.Errorf("restart the worker: %w", err)
	}
	return nil
}
