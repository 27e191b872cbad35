package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workers"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// Poller settings of the turnstile worker the admission scenario compares
// (PollerModes).
const (
	PollersFixed       = "fixed"
	PollersAutoscaling = "autoscaling"
)

// PollerModes are the worker environments of each poller setting.
var PollerModes = map[string][]string{
	PollersFixed:       {workers.EnvPollerAutoscaling + "=false"},
	PollersAutoscaling: {workers.EnvPollerAutoscaling + "=true"},
}

// AdmissionRow is one set of short rollouts, more submitted than admitted,
// run to the end through the set's admission.
type AdmissionRow struct {
	// Pollers names the worker's poller setting ("": its own).
	Pollers     string `json:"pollers,omitempty"`
	MaxInFlight int    `json:"max_in_flight"`
	Submitted   int    `json:"submitted"`
	Turns       int    `json:"turns"`
	// TurnsPerSec is Turns over the wall time from the submission to the
	// last rollout closed.
	TurnsPerSec float64 `json:"turns_per_s"`
	// FirstTaskP50MS and FirstTaskP95MS: from a rollout's start to its
	// first workflow task started, over a sample of the set's rollouts.
	// An admitted rollout starts eagerly (its first task handed to the
	// worker with the start), so its later workflow tasks are where a
	// poller setting shows: TaskWaitP50MS and TaskWaitP95MS are every
	// workflow task's schedule-to-start over the same sample.
	FirstTaskP50MS float64 `json:"first_task_wait_p50_ms"`
	FirstTaskP95MS float64 `json:"first_task_wait_p95_ms"`
	TaskWaitP50MS  float64 `json:"workflow_task_wait_p50_ms"`
	TaskWaitP95MS  float64 `json:"workflow_task_wait_p95_ms"`
	WallMS         float64 `json:"wall_ms"`
}

// firstTaskSample is how many rollouts' first tasks a row reads.
const firstTaskSample = 100

// admission runs cfg.AdmissionSubmitted short rollouts through a set's
// admission at each of cfg.AdmissionLevels, once per poller setting, and
// leaves the worker on its own settings.
func (s *stack) admission(ctx context.Context, stamp string) ([]AdmissionRow, error) {
	modes := s.cfg.AdmissionPollers
	if len(modes) == 0 {
		modes = []string{""}
	}
	var out []AdmissionRow
	for _, mode := range modes {
		if mode != "" {
			if err := s.restartWorker(ctx, PollerModes[mode]); err != nil {
				return out, err
			}
		}
		for _, m := range s.cfg.AdmissionLevels {
			row, err := s.admissionRow(ctx, fmt.Sprintf("adm%d%s-%s", m, mode, stamp), mode, m)
			if err != nil {
				return out, err
			}
			out = append(out, row)
		}
	}
	if modes[0] != "" {
		return out, s.restartWorker(ctx, nil)
	}
	return out, nil
}

func (s *stack) admissionRow(ctx context.Context, name, mode string, maxInFlight int) (AdmissionRow, error) {
	n := s.cfg.AdmissionSubmitted
	row := AdmissionRow{Pollers: mode, MaxInFlight: maxInFlight, Submitted: n}
	label := fmt.Sprintf("admission %d at max_in_flight %d, pollers %s", n, maxInFlight, pollerLabel(mode))
	mark := s.markMetrics(ctx, label)
	defer mark.end(ctx)
	tc := trainer.New(s.client, workerQueue)
	t0 := time.Now()
	res, err := tc.Submit(ctx, trainer.SubmitRequest{
		Set: name, Count: n, Envs: []string{"counter"}, Seed: 1, MaxInFlight: maxInFlight, RequestID: name,
	})
	if err != nil {
		return row, fmt.Errorf("%s: submit: %w", label, err)
	}
	if err := tc.Wait(ctx, trainer.WaitRequest{Set: name, Inputs: res.Inputs}); err != nil {
		return row, fmt.Errorf("%s: wait: %w", label, err)
	}
	wall := time.Since(t0)
	if row.Turns, err = counterTurns(res.Inputs); err != nil {
		return row, err
	}
	row.WallMS, row.TurnsPerSec = ms(wall), float64(row.Turns)/wall.Seconds()
	var waits []float64
	var d taskDurations
	step := max(n/firstTaskSample, 1)
	for i := 0; i < n; i += step {
		id := rollout.WorkflowID(res.Inputs[i].RolloutID)
		waits = append(waits, s.firstTaskWait(ctx, id))
		if err := s.readTasks(ctx, runTimes{id: id}, &d); err != nil {
			return row, err
		}
	}
	row.FirstTaskP50MS, row.FirstTaskP95MS = median(waits), percentile(waits, 0.95)
	row.TaskWaitP50MS, row.TaskWaitP95MS = median(d.wfWait), percentile(d.wfWait, 0.95)
	s.logf("%s: %.1f turns/s (%d turns in %s), first task waited p50 %.1f ms, p95 %.1f ms; every workflow task p50 %.1f ms, p95 %.1f ms",
		label, row.TurnsPerSec, row.Turns, wall.Round(time.Millisecond), row.FirstTaskP50MS, row.FirstTaskP95MS, row.TaskWaitP50MS, row.TaskWaitP95MS)
	return row, nil
}

func pollerLabel(mode string) string {
	if mode == "" {
		return "as configured"
	}
	return mode
}

// counterTurns is the model calls of counter rollouts run to the end by
// the scripted policy: one per step to the target, and the final answer.
func counterTurns(inputs []rollout.Input) (int, error) {
	total := 0
	for _, in := range inputs {
		var task struct {
			Target int `json:"target"`
		}
		if err := json.Unmarshal(in.Task, &task); err != nil {
			return 0, fmt.Errorf("task of %s: %w", in.RolloutID, err)
		}
		total += task.Target + 1
	}
	return total, nil
}
