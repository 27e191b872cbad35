package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/internal/retention"
	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
)

// scheduleFields name the gateway's fields in the client library's
// messages about schedules.
var scheduleFields = map[string]string{"--every": "every", "--tag": "tag", "--keep": "keep"}

// startWatchdog is POST /v1/sets/{set}/watchdog: automatic recovery of the
// set's servers. A watchdog already running is joined (its settings stay):
// a repeat answers existing.
func (s *Server) startWatchdog(w http.ResponseWriter, r *http.Request) error {
	set, err := pathSet(r)
	if err != nil {
		return err
	}
	var req WatchdogRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	a, err := s.autoRecover(req)
	if err != nil {
		return err
	}
	// A watchdog that does not answer its query yet (its first workflow
	// task has not run) exists, and is joined like a running one; Temporal
	// out of reach fails the start below.
	cur, found, qerr := s.backend.WatchdogStatus(r.Context(), set)
	existing := qerr != nil || found && cur.Phase != "stopped" && cur.Phase != "done"
	st, err := s.backend.StartWatchdog(r.Context(), set, a)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusAccepted, StartedResponse{ID: set, WorkflowID: st.WorkflowID, RunID: st.RunID, Existing: existing})
}

// autoRecover checks req and turns it into the library's settings, the
// root being the gateway's checkpoint root.
func (s *Server) autoRecover(req WatchdogRequest) (trainer.AutoRecover, error) {
	if err := checkRequestID(req.RequestID); err != nil {
		return trainer.AutoRecover{}, err
	}
	if s.cfg.CheckpointRoot == "" {
		return trainer.AutoRecover{}, unavailable("this gateway was started without --checkpoint-root")
	}
	a := trainer.AutoRecover{Participants: req.Participants, Standby: req.Standby, Root: s.cfg.CheckpointRoot, Misses: req.Misses}
	var err error
	for _, d := range []struct {
		field, v string
		to       *time.Duration
	}{{"every", req.Every, &a.Every}, {"timeout", req.Timeout, &a.Timeout}, {"bound", req.Bound, &a.Bound}} {
		if *d.to, err = duration(d.field, d.v); err != nil {
			return a, err
		}
	}
	if req.Misses < 0 {
		return a, badRequest("misses", fmt.Sprintf("misses %d is negative", req.Misses))
	}
	if len(req.Participants) == 0 {
		return a, badRequest("participants", "participants is empty: name the environment servers the set's rollouts use")
	}
	if err := s.checkParticipants(req.Participants); err != nil {
		return a, err
	}
	if err := s.cfg.Destinations.CheckParticipants(req.Standby); err != nil {
		return a, badRequest("standby", err.Error())
	}
	if _, err := a.WatchdogInput("check", "/", "check"); err != nil {
		return a, watchdogInvalid(err)
	}
	return a, nil
}

// watchdogFields are the fields of WatchdogRequest the library's messages
// name (as "auto_recover.<field>").
var watchdogFields = []string{"participants", "standby", "every", "timeout", "misses", "bound"}

// watchdogInvalid is a 400 of the library's message about a watchdog's
// settings, in the request's terms.
func watchdogInvalid(err error) error {
	msg := strings.ReplaceAll(strings.TrimPrefix(err.Error(), "auto_recover: "), "auto_recover.", "")
	field, _, _ := strings.Cut(msg, " ")
	field = strings.TrimRight(field, ":")
	if !slices.Contains(watchdogFields, field) {
		field = ""
	}
	return badRequest(field, msg)
}

// getWatchdog is GET /v1/sets/{set}/watchdog.
func (s *Server) getWatchdog(w http.ResponseWriter, r *http.Request) error {
	set, err := pathSet(r)
	if err != nil {
		return err
	}
	st, ok, err := s.backend.WatchdogStatus(r.Context(), set)
	if err != nil {
		return err
	}
	if !ok {
		return &apiError{status: notFound, code: CodeNotFound, msg: "set " + set + " has no watchdog (POST /v1/sets/{set}/watchdog turns automatic recovery on)"}
	}
	out := WatchdogResponse{Set: set, Phase: st.Phase, Watched: []string{}, StandbyUsed: st.State.StandbyUsed,
		Declarations: st.State.Declarations, ScheduleHeld: st.State.ScheduleHeld, Rounds: st.State.Rounds}
	for _, ws := range st.State.Watched {
		out.Watched = append(out.Watched, ws.URL)
	}
	if out.Declarations == nil {
		out.Declarations = []checkpoint.Declaration{}
	}
	return writeJSON(w, http.StatusOK, out)
}

// stopWatchdog is DELETE /v1/sets/{set}/watchdog: idempotent (a set
// without a running watchdog is no error).
func (s *Server) stopWatchdog(w http.ResponseWriter, r *http.Request) error {
	set, err := pathSet(r)
	if err != nil {
		return err
	}
	if err := decodeStop(r); err != nil {
		return err
	}
	if err := s.backend.StopWatchdog(r.Context(), set); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, StoppedResponse{Set: set, Stopped: true})
}

// createSchedule is POST /v1/sets/{set}/schedule. A repeat of a create
// (the schedule exists with the same every and keep) answers it with
// existing, its tag as it is now (a trainer restarted after it moved the
// tag on creates again safely); other settings are a conflict.
func (s *Server) createSchedule(w http.ResponseWriter, r *http.Request) error {
	set, err := pathSet(r)
	if err != nil {
		return err
	}
	var req ScheduleRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	sr, err := s.scheduleRequest(set, req)
	if err != nil {
		return err
	}
	_, err = s.backend.CreateSchedule(r.Context(), sr)
	existing := alreadyExists(err)
	if err != nil && !existing {
		return err
	}
	sch, err := s.backend.DescribeSchedule(r.Context(), set)
	if err != nil {
		return scheduleError(set, err)
	}
	if existing && (sch.Every != sr.Every || sch.Keep != sr.Keep) {
		field := "every"
		if sch.Every == sr.Every {
			field = "keep"
		}
		return &apiError{status: conflict, code: CodeConflict, field: field,
			msg: fmt.Sprintf("set %s already has a checkpoint schedule of every %s, keep %d: delete it first to change it", set, sch.Every, sch.Keep)}
	}
	return writeJSON(w, http.StatusOK, scheduleResponse(sch, existing))
}

// DefaultScheduleTimeout bounds each scheduled cut when a request names
// no timeout (the starter's default).
const DefaultScheduleTimeout = 60 * time.Second

func (s *Server) scheduleRequest(set string, req ScheduleRequest) (trainer.ScheduleRequest, error) {
	if err := checkRequestID(req.RequestID); err != nil {
		return trainer.ScheduleRequest{}, err
	}
	if s.cfg.CheckpointRoot == "" {
		return trainer.ScheduleRequest{}, unavailable("this gateway was started without --checkpoint-root")
	}
	sr := trainer.ScheduleRequest{Set: set, Root: s.cfg.CheckpointRoot, Participants: req.Participants, Tag: req.Tag, Keep: req.Keep, Paused: req.Paused,
		Timeout: DefaultScheduleTimeout}
	var err error
	if req.Every == "" {
		return sr, badRequest("every", "every is missing: want a Go duration such as \"10m\"")
	}
	if sr.Every, err = duration("every", req.Every); err != nil {
		return sr, err
	}
	if req.Timeout != "" {
		if sr.Timeout, err = duration("timeout", req.Timeout); err != nil {
			return sr, err
		}
	}
	if req.Keep < 0 {
		return sr, badRequest("keep", fmt.Sprintf("keep %d is negative", req.Keep))
	}
	if err := sr.Validate(); err != nil {
		return sr, invalid(err, scheduleFields)
	}
	return sr, s.checkParticipants(req.Participants)
}

// getSchedule is GET /v1/sets/{set}/schedule.
func (s *Server) getSchedule(w http.ResponseWriter, r *http.Request) error {
	set, err := pathSet(r)
	if err != nil {
		return err
	}
	return s.writeSchedule(w, r, set)
}

// writeSchedule answers set's schedule as it is now.
func (s *Server) writeSchedule(w http.ResponseWriter, r *http.Request, set string) error {
	sch, err := s.backend.DescribeSchedule(r.Context(), set)
	if err != nil {
		return scheduleError(set, err)
	}
	return writeJSON(w, http.StatusOK, scheduleResponse(sch, false))
}

// tagSchedule is POST /v1/sets/{set}/schedule/tag: idempotent (the tag is
// set, not added).
func (s *Server) tagSchedule(w http.ResponseWriter, r *http.Request) error {
	set, err := pathSet(r)
	if err != nil {
		return err
	}
	var req ScheduleTagRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if err := checkRequestID(req.RequestID); err != nil {
		return err
	}
	if req.Tag != "" {
		if err := checkpoint.ValidateName("tag", req.Tag); err != nil {
			return badRequest("tag", err.Error())
		}
	}
	if err := s.backend.SetScheduleTag(r.Context(), set, req.Tag); err != nil {
		return scheduleError(set, err)
	}
	return s.writeSchedule(w, r, set)
}

// pauseSchedule is POST /v1/sets/{set}/schedule/pause, unpauseSchedule
// .../unpause: idempotent.
func (s *Server) pauseSchedule(w http.ResponseWriter, r *http.Request) error {
	return s.noteSchedule(w, r, Backend.PauseSchedule)
}

func (s *Server) unpauseSchedule(w http.ResponseWriter, r *http.Request) error {
	return s.noteSchedule(w, r, Backend.UnpauseSchedule)
}

// maxNoteBytes bounds a pause note (Temporal keeps it with the schedule).
const maxNoteBytes = 1024

func (s *Server) noteSchedule(w http.ResponseWriter, r *http.Request, do func(Backend, context.Context, string, string) error) error {
	set, err := pathSet(r)
	if err != nil {
		return err
	}
	var req ScheduleNoteRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if err := checkRequestID(req.RequestID); err != nil {
		return err
	}
	if len(req.Note) > maxNoteBytes {
		return badRequest("note", fmt.Sprintf("note of %d bytes: want at most %d", len(req.Note), maxNoteBytes))
	}
	if err := do(s.backend, r.Context(), set, req.Note); err != nil {
		return scheduleError(set, err)
	}
	return s.writeSchedule(w, r, set)
}

// triggerSchedule is POST /v1/sets/{set}/schedule/trigger: a checkpoint
// now (skipped while the previous one runs).
func (s *Server) triggerSchedule(w http.ResponseWriter, r *http.Request) error {
	set, err := pathSet(r)
	if err != nil {
		return err
	}
	var req ScheduleTriggerRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if err := checkRequestID(req.RequestID); err != nil {
		return err
	}
	if err := s.backend.TriggerSchedule(r.Context(), set); err != nil {
		return scheduleError(set, err)
	}
	return s.writeSchedule(w, r, set)
}

// deleteSchedule is DELETE /v1/sets/{set}/schedule: its checkpoints stay.
// Idempotent: a set without a schedule answers stopped too.
func (s *Server) deleteSchedule(w http.ResponseWriter, r *http.Request) error {
	set, err := pathSet(r)
	if err != nil {
		return err
	}
	if err := decodeStop(r); err != nil {
		return err
	}
	if err := s.backend.DeleteSchedule(r.Context(), set); err != nil && !isNotFound(err) {
		return err
	}
	return writeJSON(w, http.StatusOK, StoppedResponse{Set: set, Stopped: true})
}

func scheduleResponse(sch trainer.Schedule, existing bool) ScheduleResponse {
	out := ScheduleResponse{ID: sch.ID, Set: sch.Set, Every: sch.Every.String(), Tag: sch.Tag, Keep: sch.Keep, Paused: sch.Paused,
		Note: sch.Note, Fired: sch.Fired, Skipped: sch.Skipped, Recent: []ScheduledRun{}, Next: sch.Next, Existing: existing}
	for _, wid := range sch.Recent {
		id, _ := checkpoint.ScheduledCheckpointID(wid)
		out.Recent = append(out.Recent, ScheduledRun{CheckpointID: id, WorkflowID: wid})
	}
	if out.Next == nil {
		out.Next = []time.Time{}
	}
	return out
}

// scheduleError is err, a schedule that does not exist being a 404.
func scheduleError(set string, err error) error {
	if isNotFound(err) {
		return &apiError{status: notFound, code: CodeNotFound, msg: "set " + set + " has no checkpoint schedule (POST /v1/sets/{set}/schedule creates one)"}
	}
	return err
}

func isNotFound(err error) bool {
	var nf *serviceerror.NotFound
	return errors.As(err, &nf)
}

func alreadyExists(err error) bool {
	var ae *serviceerror.AlreadyExists
	return errors.Is(err, temporal.ErrScheduleAlreadyRunning) || errors.As(err, &ae)
}

// decodeStop reads a StopRequest.
func decodeStop(r *http.Request) error {
	var req StopRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	return checkRequestID(req.RequestID)
}

// pin is POST /v1/sets/{set}/pins: idempotent (a pinned checkpoint pinned
// again stays pinned).
func (s *Server) pin(w http.ResponseWriter, r *http.Request) error {
	set, err := pathSet(r)
	if err != nil {
		return err
	}
	var req PinRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if err := checkRequestID(req.RequestID); err != nil {
		return err
	}
	if err := checkpoint.ValidateName("tag", req.Tag); err != nil {
		return badRequest("tag", err.Error())
	}
	if s.cfg.Pin == nil {
		return unavailable("this gateway was started without --checkpoint-root: it cannot pin checkpoints")
	}
	ids, err := s.cfg.Pin(r.Context(), set, req.Tag)
	if errors.Is(err, retention.ErrNothingToPin) {
		return &apiError{status: notFound, code: CodeNotFound, field: "tag", msg: fmt.Sprintf("set %s has no committed checkpoint tagged %q (or of that id)", set, req.Tag)}
	}
	if err != nil {
		return fmt.Errorf("pin %q of set %s: %w", req.Tag, set, err)
	}
	return writeJSON(w, http.StatusOK, PinResponse{Set: set, Tag: req.Tag, Pinned: ids})
}
