package gateway

import (
	"context"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
)

// automationState is the fake's watchdogs and checkpoint schedules, by
// set, answering as the client library does (a missing schedule is
// Temporal's NotFound, a second create its ErrScheduleAlreadyRunning).
type automationState struct {
	watchdogs map[string]trainer.AutoRecover
	phases    map[string]string
	schedules map[string]trainer.Schedule
	requests  map[string]trainer.ScheduleRequest
}

func (f *fakeBackend) StartWatchdog(_ context.Context, set string, a trainer.AutoRecover) (trainer.Started, error) {
	f.called("StartWatchdog")
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.auto.watchdogs == nil {
		f.auto.watchdogs, f.auto.phases = map[string]trainer.AutoRecover{}, map[string]string{}
	}
	if f.auto.phases[set] != "watching" {
		f.auto.watchdogs[set], f.auto.phases[set] = a, "watching"
	}
	return trainer.Started{WorkflowID: checkpoint.WatchdogWorkflowID(set), RunID: "run-1"}, nil
}

func (f *fakeBackend) StopWatchdog(_ context.Context, set string) error {
	f.called("StopWatchdog")
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.auto.phases[set]; ok {
		f.auto.phases[set] = "stopped"
	}
	return nil
}

func (f *fakeBackend) WatchdogStatus(_ context.Context, set string) (checkpoint.WatchdogStatus, bool, error) {
	f.called("WatchdogStatus")
	f.mu.Lock()
	defer f.mu.Unlock()
	a, ok := f.auto.watchdogs[set]
	if !ok {
		return checkpoint.WatchdogStatus{}, false, nil
	}
	st := checkpoint.WatchdogStatus{Set: set, Phase: f.auto.phases[set]}
	for _, u := range a.Participants {
		st.State.Watched = append(st.State.Watched, checkpoint.WatchedServer{URL: u})
	}
	return st, true, nil
}

func (f *fakeBackend) CreateSchedule(_ context.Context, r trainer.ScheduleRequest) (string, error) {
	f.called("CreateSchedule")
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.auto.schedules == nil {
		f.auto.schedules, f.auto.requests = map[string]trainer.Schedule{}, map[string]trainer.ScheduleRequest{}
	}
	if _, ok := f.auto.schedules[r.Set]; ok {
		return "", temporal.ErrScheduleAlreadyRunning
	}
	id := trainer.ScheduleID(r.Set)
	f.auto.schedules[r.Set] = trainer.Schedule{ID: id, Set: r.Set, Every: r.Every, Tag: r.Tag, Keep: r.Keep, Paused: r.Paused}
	f.auto.requests[r.Set] = r
	return id, nil
}

// schedule changes set's schedule with change, or answers NotFound.
func (f *fakeBackend) schedule(set string, change func(*trainer.Schedule)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.auto.schedules[set]
	if !ok {
		return serviceerror.NewNotFound("schedule not found")
	}
	change(&s)
	f.auto.schedules[set] = s
	return nil
}

func (f *fakeBackend) DescribeSchedule(_ context.Context, set string) (trainer.Schedule, error) {
	f.called("DescribeSchedule")
	var out trainer.Schedule
	err := f.schedule(set, func(s *trainer.Schedule) { out = *s })
	return out, err
}

func (f *fakeBackend) SetScheduleTag(_ context.Context, set, tag string) error {
	f.called("SetScheduleTag")
	return f.schedule(set, func(s *trainer.Schedule) { s.Tag = tag })
}

func (f *fakeBackend) PauseSchedule(_ context.Context, set, note string) error {
	f.called("PauseSchedule")
	return f.schedule(set, func(s *trainer.Schedule) { s.Paused, s.Note = true, note })
}

func (f *fakeBackend) UnpauseSchedule(_ context.Context, set, note string) error {
	f.called("UnpauseSchedule")
	return f.schedule(set, func(s *trainer.Schedule) { s.Paused, s.Note = false, note })
}

func (f *fakeBackend) TriggerSchedule(_ context.Context, set string) error {
	f.called("TriggerSchedule")
	return f.schedule(set, func(s *trainer.Schedule) {
		s.Fired++
		s.Recent = append(s.Recent, checkpoint.CheckpointWorkflowID("every-"+set+"-2026-01-02T15:04:05Z"))
	})
}

func (f *fakeBackend) DeleteSchedule(_ context.Context, set string) error {
	f.called("DeleteSchedule")
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.auto.schedules[set]; !ok {
		return serviceerror.NewNotFound("schedule not found")
	}
	delete(f.auto.schedules, set)
	return nil
}
