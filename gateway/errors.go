package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"go.temporal.io/api/serviceerror"

	"github.com/turnstile-rl/turnstile/trainer"
)

// apiError is an answer other than 2xx.
type apiError struct {
	status      int
	code, field string
	msg         string
	health      *Health
}

func (e *apiError) Error() string { return e.msg }

// badRequest is a 400 naming the field at fault.
func badRequest(field, msg string) *apiError {
	return &apiError{status: http.StatusBadRequest, code: CodeBadRequest, field: field, msg: msg}
}

// unavailable is a 503.
func unavailable(msg string) *apiError {
	return &apiError{status: http.StatusServiceUnavailable, code: CodeUnavailable, msg: msg}
}

// toAPIError maps an error to its answer: the client library's typed errors
// to their codes, Temporal being out of reach (and anything unexpected) to
// 503, since repeating the same request is safe.
func toAPIError(err error) *apiError {
	var (
		ae          *apiError
		conflictErr *trainer.ConflictError
		unavailErr  *trainer.UnavailableError
		notFoundErr *trainer.NotFoundError
		tooBig      *http.MaxBytesError
	)
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &conflictErr):
		return &apiError{status: http.StatusConflict, code: CodeConflict, msg: err.Error()}
	case errors.As(err, &notFoundErr):
		return &apiError{status: http.StatusNotFound, code: CodeNotFound, msg: err.Error()}
	case errors.As(err, &tooBig):
		return badRequest("", "request body larger than the gateway accepts")
	case errors.As(err, &unavailErr), isUnavailable(err):
		return unavailable(err.Error())
	}
	return unavailable(err.Error() + " (repeating the same request is safe)")
}

// isUnavailable reports Temporal or the deadline being out of reach.
func isUnavailable(err error) bool {
	var u *serviceerror.Unavailable
	var d *serviceerror.DeadlineExceeded
	return errors.As(err, &u) || errors.As(err, &d) || errors.Is(err, context.DeadlineExceeded)
}

// writeError writes e as an ErrorBody.
func writeError(w http.ResponseWriter, e *apiError) {
	_ = writeJSON(w, e.status, ErrorBody{Error: ErrorDetail{Code: e.code, Message: e.msg, Field: e.field}, Health: e.health})
}

// writeJSON writes v with status, HTML characters unescaped (trajectories
// carry code).
func writeJSON(w http.ResponseWriter, status int, v any) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// flagFields maps the starter flags the client library's validation
// messages start with to the JSON fields of the gateway's requests.
var flagFields = map[string]string{
	"--count": "count", "--env": "envs", "--seed": "seed", "--max-turns": "max_turns", "--policy": "policy",
	"--env-url": "env_url", "--model-url": "model_url", "--repeats": "repeats", "--tasks": "rows",
	"--env-server": "env_server", "--policy-endpoint": "policy_endpoint",
	"--model-timeout": "limits.model_call_timeout", "--env-timeout": "limits.env_call_timeout",
	"--model-retries": "limits.model_call_retries", "--deadline": "limits.deadline",
	"--id": "checkpoint_id", "--restore-id": "restore_id", "--participants": "participants",
	"--timeout": "timeout", "--root": "", "--transcript-dir": "",
}

// invalid turns a validation error of the client library into a 400 whose
// field is the JSON field its message names (the library speaks in the
// starter's flags: "--count 0: want 1..").
func invalid(err error, overrides map[string]string) *apiError {
	msg := err.Error()
	token, _, _ := strings.Cut(msg, " ")
	token = strings.TrimRight(token, ":")
	field, ok := overrides[token]
	if !ok {
		field, ok = flagFields[token]
	}
	switch {
	case ok:
	case strings.HasPrefix(token, "sampling."):
		field = token
	case token == "set":
		field = "set"
	}
	var de *trainer.DatasetError
	if errors.As(err, &de) {
		field = "rows"
	}
	return badRequest(field, msg)
}
