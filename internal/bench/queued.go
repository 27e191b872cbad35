package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/api/serviceerror"

	"github.com/turnstile-rl/turnstile/trainer"
	setwf "github.com/turnstile-rl/turnstile/workflows/set"
)

// submitSet submits n long counter rollouts (a dataset of n rows, one
// rollout each, every one mid-episode for the whole scenario) on the slow
// policy through the set's admission at maxInFlight, as a trainer does
// (trainer.Submit), and returns their rollout ids in submission order (the
// order the admission starts them).
func (s *stack) submitSet(ctx context.Context, name string, n, maxInFlight int) ([]string, error) {
	rows := make([]trainer.DatasetRow, n)
	task := json.RawMessage(fmt.Sprintf(`{"target":%d}`, longTask))
	for i := range rows {
		rows[i] = trainer.DatasetRow{Env: "counter", Task: task}
	}
	res, err := trainer.New(s.client, workerQueue).Submit(ctx, trainer.SubmitRequest{
		Set: name, Rows: rows, Repeats: 1, ModelURL: s.slowURL, MaxTurns: longTask + 1,
		MaxInFlight: maxInFlight, RequestID: name,
	})
	if err != nil {
		return nil, fmt.Errorf("submit %d rollouts to set %s: %w", n, name, err)
	}
	ids := make([]string, len(res.Inputs))
	for i, in := range res.Inputs {
		ids[i] = in.RolloutID
	}
	return ids, nil
}

// awaitAdmitted waits until set's admission runs want rollouts and
// visibility lists every one past its first model call, and returns how
// many the admission runs.
func (s *stack) awaitAdmitted(ctx context.Context, name string, want int) (int, error) {
	ts := trainer.New(s.client, workerQueue)
	var st trainer.AdmissionStatus
	err := waitUntil(ctx, inFlightTimeout, 250*time.Millisecond, func() (bool, error) {
		var ok bool
		var err error
		st, ok, err = ts.Admission(ctx, name)
		return err == nil && ok && st.Running >= want, err
	})
	if err != nil {
		return st.Running, fmt.Errorf("admission of %s: %d of %d running: %w", name, st.Running, want, err)
	}
	if _, err := s.awaitInFlight(ctx, name, want); err != nil {
		return st.Running, err
	}
	st, _, err = ts.Admission(ctx, name)
	return st.Running, err
}

// terminateAdmission ends set's admission, so it starts no more of the
// set's rollouts (a restore starts a new one from the checkpoint's queue).
func (s *stack) terminateAdmission(ctx context.Context, name string) error {
	err := s.client.TerminateWorkflow(ctx, setwf.AdmissionWorkflowID(name), "", "bench: scenario over")
	var nf *serviceerror.NotFound
	if err != nil && !errors.As(err, &nf) {
		return fmt.Errorf("terminate the admission of %s: %w", name, err)
	}
	return nil
}

// cleanSet ends what is left of a busy set: its admission (admitted), then
// every running rollout of it.
func (s *stack) cleanSet(ctx context.Context, name string, admitted bool) {
	if admitted {
		if err := s.terminateAdmission(ctx, name); err != nil {
			s.logf("warning: %v", err)
		}
	}
	s.terminateSet(ctx, name)
}
