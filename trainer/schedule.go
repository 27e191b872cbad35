package trainer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	tclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// ScheduleRequest asks for a checkpoint of a set on a Temporal Schedule.
type ScheduleRequest struct {
	Set          string
	Root         string
	Participants []string
	// Every is the interval between checkpoints (at least MinScheduleEvery).
	Every time.Duration
	// Timeout bounds each cut, as a Checkpoint's.
	Timeout time.Duration
	// Tag is recorded with each checkpoint (the trainer step or policy
	// version); SetScheduleTag changes it as the trainer moves on.
	Tag string
	// Keep > 0 applies the set's retention after each checkpoint.
	Keep int
	// Paused creates the schedule paused.
	Paused bool
}

// MinScheduleEvery is the shortest interval a checkpoint schedule takes.
const MinScheduleEvery = time.Second

// SchedulePrefix starts the ID of every checkpoint schedule.
const SchedulePrefix = checkpoint.SchedulePrefix

// ScheduleID is the ID of set's checkpoint schedule: one per set.
func ScheduleID(set string) string { return checkpoint.ScheduleID(set) }

// scheduledPrefix is the checkpoint id prefix of a set's scheduled
// checkpoints; Temporal appends each fire's time to the workflow ID.
func scheduledPrefix(set string) string { return "every-" + set }

// Schedule is a checkpoint schedule as Temporal describes it.
type Schedule struct {
	ID     string        `json:"id"`
	Set    string        `json:"set"`
	Every  time.Duration `json:"every_ns"`
	Tag    string        `json:"tag,omitempty"`
	Keep   int           `json:"keep,omitempty"`
	Paused bool          `json:"paused"`
	Note   string        `json:"note,omitempty"`
	// Fired counts the checkpoints the schedule started; Skipped those it
	// skipped because the previous one still ran.
	Fired   int `json:"fired"`
	Skipped int `json:"skipped"`
	// Recent are the workflow IDs of its most recent checkpoints, oldest
	// first; Next the times of its next fires.
	Recent []string    `json:"recent,omitempty"`
	Next   []time.Time `json:"next,omitempty"`
}

// scheduleInput turns r into the input each fire starts the Checkpoint
// workflow with.
func (r ScheduleRequest) scheduleInput(cwd string) (checkpoint.CheckpointInput, error) {
	if r.Every < MinScheduleEvery {
		return checkpoint.CheckpointInput{}, fmt.Errorf("--every %s: want at least %s", r.Every, MinScheduleEvery)
	}
	if err := rollout.ValidateSet(r.Set); err != nil {
		return checkpoint.CheckpointInput{}, err
	}
	in, err := CheckpointRequest{
		Set: r.Set, CheckpointID: scheduledPrefix(r.Set), Root: r.Root, Participants: r.Participants,
		Timeout: r.Timeout, Tag: r.Tag, Keep: r.Keep,
	}.CheckpointInput(cwd)
	if err != nil {
		return checkpoint.CheckpointInput{}, err
	}
	in.CheckpointID, in.Scheduled = "", true
	return in, nil
}

// Validate checks r as CreateSchedule would, without Temporal; the error
// names what was wrong.
func (r ScheduleRequest) Validate() error {
	cwd, err := os.Getwd()
	if err != nil {
		return fmt.Errorf("working directory: %w", err)
	}
	_, err = r.scheduleInput(cwd)
	return err
}

// CreateSchedule creates set's checkpoint schedule: every r.Every a
// Checkpoint workflow starts on the control task queue, its checkpoint id
// "every-<set>-<fire time>"; a fire while the previous checkpoint still
// runs is skipped. It shows in the Web UI and in `temporal schedule list`,
// and pauses like any schedule.
func (c *Client) CreateSchedule(ctx context.Context, r ScheduleRequest) (string, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	in, err := r.scheduleInput(cwd)
	if err != nil {
		return "", err
	}
	id := ScheduleID(r.Set)
	_, err = c.tc.ScheduleClient().Create(ctx, tclient.ScheduleOptions{
		ID:   id,
		Spec: tclient.ScheduleSpec{Intervals: []tclient.ScheduleIntervalSpec{{Every: r.Every}}},
		Action: &tclient.ScheduleWorkflowAction{
			ID:        checkpoint.CheckpointWorkflowID(scheduledPrefix(r.Set)),
			Workflow:  checkpoint.CheckpointWorkflowName,
			Args:      []any{in},
			TaskQueue: checkpoint.ControlTaskQueue(c.taskQueue),
		},
		Overlap:       enumspb.SCHEDULE_OVERLAP_POLICY_SKIP,
		CatchupWindow: time.Minute,
		Paused:        r.Paused,
		Note:          "checkpoints of set " + r.Set,
		Memo:          map[string]any{"set": r.Set},
	})
	if err != nil {
		return "", fmt.Errorf("create schedule %s: %w", id, err)
	}
	return id, nil
}

// PauseSchedule pauses set's checkpoint schedule; note says why.
func (c *Client) PauseSchedule(ctx context.Context, set, note string) error {
	h, err := c.scheduleHandle(ctx, set)
	if err != nil {
		return err
	}
	if err := h.Pause(ctx, tclient.SchedulePauseOptions{Note: note}); err != nil {
		return fmt.Errorf("pause schedule %s: %w", h.GetID(), err)
	}
	return nil
}

// UnpauseSchedule resumes set's checkpoint schedule.
func (c *Client) UnpauseSchedule(ctx context.Context, set, note string) error {
	h, err := c.scheduleHandle(ctx, set)
	if err != nil {
		return err
	}
	if err := h.Unpause(ctx, tclient.ScheduleUnpauseOptions{Note: note}); err != nil {
		return fmt.Errorf("unpause schedule %s: %w", h.GetID(), err)
	}
	return nil
}

// TriggerSchedule fires set's checkpoint schedule now (skipped if a
// checkpoint of it still runs).
func (c *Client) TriggerSchedule(ctx context.Context, set string) error {
	h, err := c.scheduleHandle(ctx, set)
	if err != nil {
		return err
	}
	if err := h.Trigger(ctx, tclient.ScheduleTriggerOptions{Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_SKIP}); err != nil {
		return fmt.Errorf("trigger schedule %s: %w", h.GetID(), err)
	}
	return nil
}

// DeleteSchedule deletes set's checkpoint schedule; its checkpoints stay.
func (c *Client) DeleteSchedule(ctx context.Context, set string) error {
	h, err := c.scheduleHandle(ctx, set)
	if err != nil {
		return err
	}
	if err := h.Delete(ctx); err != nil {
		return fmt.Errorf("delete schedule %s: %w", h.GetID(), err)
	}
	return nil
}

// SetScheduleTag changes the tag set's next scheduled checkpoints carry
// (the trainer moved to a new step or policy version).
func (c *Client) SetScheduleTag(ctx context.Context, set, tag string) error {
	if tag != "" {
		if err := checkpoint.ValidateName("--tag", tag); err != nil {
			return err
		}
	}
	h, err := c.scheduleHandle(ctx, set)
	if err != nil {
		return err
	}
	err = h.Update(ctx, tclient.ScheduleUpdateOptions{DoUpdate: func(u tclient.ScheduleUpdateInput) (*tclient.ScheduleUpdate, error) {
		s := u.Description.Schedule
		act, in, err := scheduleAction(s)
		if err != nil {
			return nil, err
		}
		in.Tag = tag
		act.Args = []any{in}
		return &tclient.ScheduleUpdate{Schedule: &s}, nil
	}})
	if err != nil {
		return fmt.Errorf("tag schedule %s: %w", h.GetID(), err)
	}
	return nil
}

// DescribeSchedule describes set's checkpoint schedule.
func (c *Client) DescribeSchedule(ctx context.Context, set string) (Schedule, error) {
	h, err := c.scheduleHandle(ctx, set)
	if err != nil {
		return Schedule{}, err
	}
	d, err := h.Describe(ctx)
	if err != nil {
		return Schedule{}, fmt.Errorf("describe schedule %s: %w", h.GetID(), err)
	}
	_, in, err := scheduleAction(d.Schedule)
	if err != nil {
		return Schedule{}, fmt.Errorf("schedule %s: %w", h.GetID(), err)
	}
	out := Schedule{ID: h.GetID(), Set: in.Set, Tag: in.Tag, Keep: in.Keep,
		Fired: d.Info.NumActions, Skipped: d.Info.NumActionsSkippedOverlap, Next: d.Info.NextActionTimes}
	if sp := d.Schedule.Spec; sp != nil && len(sp.Intervals) > 0 {
		out.Every = sp.Intervals[0].Every
	}
	if st := d.Schedule.State; st != nil {
		out.Paused, out.Note = st.Paused, st.Note
	}
	for _, a := range d.Info.RecentActions {
		if a.StartWorkflowResult != nil {
			out.Recent = append(out.Recent, a.StartWorkflowResult.WorkflowID)
		}
	}
	return out, nil
}

// ListSchedules describes every checkpoint schedule (visibility may lag a
// schedule created a moment ago).
func (c *Client) ListSchedules(ctx context.Context) ([]Schedule, error) {
	it, err := c.tc.ScheduleClient().List(ctx, tclient.ScheduleListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	var out []Schedule
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return nil, fmt.Errorf("list schedules: %w", err)
		}
		set, ok := strings.CutPrefix(e.ID, SchedulePrefix)
		if !ok {
			continue
		}
		s, err := c.DescribeSchedule(ctx, set)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func (c *Client) scheduleHandle(ctx context.Context, set string) (tclient.ScheduleHandle, error) {
	if err := rollout.ValidateSet(set); err != nil {
		return nil, err
	}
	return c.tc.ScheduleClient().GetHandle(ctx, ScheduleID(set)), nil
}

// scheduleAction is a checkpoint schedule's action and the Checkpoint input
// it starts.
func scheduleAction(s tclient.Schedule) (*tclient.ScheduleWorkflowAction, checkpoint.CheckpointInput, error) {
	act, ok := s.Action.(*tclient.ScheduleWorkflowAction)
	if !ok || len(act.Args) != 1 {
		return nil, checkpoint.CheckpointInput{}, errors.New("not a checkpoint schedule: its action does not start one workflow with one input")
	}
	var in checkpoint.CheckpointInput
	switch a := act.Args[0].(type) {
	case checkpoint.CheckpointInput:
		in = a
	case *commonpb.Payload:
		if err := converter.GetDefaultDataConverter().FromPayload(a, &in); err != nil {
			return nil, checkpoint.CheckpointInput{}, fmt.Errorf("not a checkpoint schedule: action input: %w", err)
		}
	default:
		return nil, checkpoint.CheckpointInput{}, fmt.Errorf("not a checkpoint schedule: action input is %T", a)
	}
	if !in.Scheduled || act.Workflow != checkpoint.CheckpointWorkflowName {
		return nil, checkpoint.CheckpointInput{}, errors.New("not a checkpoint schedule: its action is no scheduled Checkpoint")
	}
	return act, in, nil
}
