package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// HoldSchedule pauses (in.Hold) or releases the set's checkpoint schedule
// for the watchdog. It is idempotent: a pause the watchdog made is known by
// its note (checkpoint.WatchdogPauseNote), so a retried hold reports it
// held, and only such a pause is released. A schedule paused by someone
// else is left as it is, and a set without a schedule holds nothing.
func (c *Coordinator) HoldSchedule(ctx context.Context, in checkpoint.HoldScheduleInput) (checkpoint.HoldScheduleResult, error) {
	if err := rollout.ValidateSet(in.Set); err != nil {
		return checkpoint.HoldScheduleResult{}, rollout.BadInput("%v", err)
	}
	tc, err := c.temporal()
	if err != nil {
		return checkpoint.HoldScheduleResult{}, err
	}
	h := tc.ScheduleClient().GetHandle(ctx, checkpoint.ScheduleID(in.Set))
	d, err := h.Describe(ctx)
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return checkpoint.HoldScheduleResult{}, nil
	}
	if err != nil {
		return checkpoint.HoldScheduleResult{}, fmt.Errorf("describe schedule %s: %w", h.GetID(), err)
	}
	paused, ours := schedulePause(d)
	note := checkpoint.WatchdogPauseNote + in.Note
	switch {
	case in.Hold && paused:
		return checkpoint.HoldScheduleResult{Held: ours}, nil
	case in.Hold:
		if err := h.Pause(ctx, client.SchedulePauseOptions{Note: note}); err != nil {
			return checkpoint.HoldScheduleResult{}, fmt.Errorf("pause schedule %s: %w", h.GetID(), err)
		}
		return checkpoint.HoldScheduleResult{Held: true}, nil
	case ours:
		if err := h.Unpause(ctx, client.ScheduleUnpauseOptions{Note: note}); err != nil {
			return checkpoint.HoldScheduleResult{}, fmt.Errorf("unpause schedule %s: %w", h.GetID(), err)
		}
	}
	return checkpoint.HoldScheduleResult{}, nil
}

// schedulePause says whether a schedule is paused, and whether by the
// watchdog.
func schedulePause(d *client.ScheduleDescription) (paused, ours bool) {
	if d == nil || d.Schedule.State == nil {
		return false, false
	}
	st := d.Schedule.State
	return st.Paused, st.Paused && strings.HasPrefix(st.Note, checkpoint.WatchdogPauseNote)
}
