package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
)

// coordinatorFields name the gateway's fields in the client library's
// messages about checkpoints, restores and resumes.
var coordinatorFields = map[string]string{"--deadline": "deadline"}

// startCheckpoint is POST /v1/checkpoints.
func (s *Server) startCheckpoint(w http.ResponseWriter, r *http.Request) error {
	var req CheckpointRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	cr, err := s.checkpointRequest(req)
	if err != nil {
		return err
	}
	st, existing, err := s.backend.StartCheckpoint(r.Context(), cr, req.RequestID)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusAccepted, StartedResponse{ID: req.CheckpointID, WorkflowID: st.WorkflowID, RunID: st.RunID, Existing: existing})
}

func (s *Server) checkpointRequest(req CheckpointRequest) (trainer.CheckpointRequest, error) {
	if err := checkRequestID(req.RequestID); err != nil {
		return trainer.CheckpointRequest{}, err
	}
	if s.cfg.CheckpointRoot == "" {
		return trainer.CheckpointRequest{}, unavailable("this gateway was started without --checkpoint-root")
	}
	cr := trainer.CheckpointRequest{
		Set: req.Set, CheckpointID: req.CheckpointID, Root: s.cfg.CheckpointRoot, Participants: req.Participants, StayPaused: req.StayPaused,
	}
	var err error
	if cr.Timeout, err = duration("timeout", req.Timeout); err != nil {
		return cr, err
	}
	if req.Deadline != "" {
		if req.Timeout != "" {
			return cr, badRequest("deadline", "give timeout or deadline, not both")
		}
		if cr.Deadline, err = time.Parse(time.RFC3339Nano, req.Deadline); err != nil {
			return cr, badRequest("deadline", fmt.Sprintf("deadline %q: want an RFC 3339 time", req.Deadline))
		}
	}
	if _, err := cr.CheckpointInput(s.cfg.CheckpointRoot); err != nil {
		return cr, invalid(err, coordinatorFields)
	}
	return cr, s.checkParticipants(req.Participants)
}

// checkParticipants refuses participants the workers' settings do not
// admit as destinations of the control token: the coordinator would refuse
// them anyway, and the gateway sends it itself on a resume.
func (s *Server) checkParticipants(urls []string) error {
	if err := s.cfg.Destinations.CheckParticipants(urls); err != nil {
		return badRequest("participants", err.Error())
	}
	return nil
}

// controlTokenFor is the control token of the participant at url: its
// own, else the gateway's; refused when url is not a configured
// participant.
func (s *Server) controlTokenFor(url string) (string, error) {
	t, err := s.cfg.Destinations.Participant(url)
	return t.Secret, err
}

// getCheckpoint is GET /v1/checkpoints/{id}.
func (s *Server) getCheckpoint(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var res checkpoint.CheckpointResult
	run, err := s.backend.CoordinatorStatus(r.Context(), checkpoint.CheckpointWorkflowID(id), &res)
	var nf *trainer.NotFoundError
	if wid, scheduled := checkpoint.ScheduledCheckpointWorkflowID(id); scheduled && errors.As(err, &nf) {
		// A schedule's fire ran under its fire time, colons and all.
		run, err = s.backend.CoordinatorStatus(r.Context(), wid, &res)
	}
	if err != nil {
		return err
	}
	out := CheckpointStatus{ID: id, WorkflowID: run.WorkflowID, RunID: run.RunID, Status: run.Status, Error: run.Err}
	if run.Status == RunCompleted {
		out.Result = &res
	}
	return writeJSON(w, http.StatusOK, out)
}

// startRestore is POST /v1/restores.
func (s *Server) startRestore(w http.ResponseWriter, r *http.Request) error {
	var req RestoreRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if err := checkRequestID(req.RequestID); err != nil {
		return err
	}
	if s.cfg.CheckpointRoot == "" {
		return unavailable("this gateway was started without --checkpoint-root")
	}
	cr := trainer.RestoreRequest{CheckpointID: req.CheckpointID, RestoreID: req.RestoreID, Root: s.cfg.CheckpointRoot, Participants: req.Participants}
	if _, err := cr.RestoreInput(s.cfg.CheckpointRoot, "check"); err != nil {
		return invalid(err, coordinatorFields)
	}
	if err := s.checkParticipants(req.Participants); err != nil {
		return err
	}
	st, existing, err := s.backend.StartRestore(r.Context(), cr, req.RequestID)
	if err != nil {
		return err
	}
	id := req.RestoreID
	if id == "" {
		id = req.CheckpointID
	}
	return writeJSON(w, http.StatusAccepted, StartedResponse{ID: id, WorkflowID: st.WorkflowID, RunID: st.RunID, Existing: existing})
}

// getRestore is GET /v1/restores/{id}.
func (s *Server) getRestore(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	var res checkpoint.RestoreResult
	run, err := s.backend.CoordinatorStatus(r.Context(), checkpoint.RestoreWorkflowID(id), &res)
	if err != nil {
		return err
	}
	out := RestoreStatus{ID: id, WorkflowID: run.WorkflowID, RunID: run.RunID, Status: run.Status, Error: run.Err}
	if run.Status == RunCompleted {
		out.Result = &res
	}
	return writeJSON(w, http.StatusOK, out)
}

// resume is POST /v1/resumes: idempotent by construction (one update id per
// checkpoint).
func (s *Server) resume(w http.ResponseWriter, r *http.Request) error {
	var req ResumeRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if err := checkRequestID(req.RequestID); err != nil {
		return err
	}
	cr := trainer.ResumeRequest{Set: req.Set, CheckpointID: req.CheckpointID, Participants: req.Participants,
		ControlToken: s.cfg.ControlToken, TokenFor: s.controlTokenFor}
	if err := cr.Validate(); err != nil {
		return invalid(err, coordinatorFields)
	}
	if err := s.checkParticipants(req.Participants); err != nil {
		return err
	}
	for _, u := range req.Participants {
		if tok, _ := s.controlTokenFor(u); tok == "" {
			return unavailable(fmt.Sprintf("this gateway has no control token for participant %s (TURNSTILE_CONTROL_TOKEN, or TURNSTILE_CONTROL_TOKEN_<NAME> of a named server)", u))
		}
	}
	sum, err := s.backend.Resume(r.Context(), cr)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, sum)
}

// pathID is the {id} of r's path, checked.
func pathID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if err := checkpoint.ValidateName("id", id); err != nil {
		return "", badRequest("id", err.Error())
	}
	return id, nil
}
