package envserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// Refusal is a request the server refuses: Code is the protocol's error code
// the client receives and Msg says why. The sessions, the admission gate and
// the phase fence return it without knowing HTTP; httpError, at the edge,
// picks the status.
type Refusal struct {
	Code string
	Msg  string
}

func (r *Refusal) Error() string { return r.Code + ": " + r.Msg }

// refuse returns a *Refusal as an error, so a nil check on the result is
// never fooled by a typed nil.
func refuse(code, format string, args ...any) error {
	return &Refusal{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// isRefusal says whether err is a refusal with code.
func isRefusal(err error, code string) bool {
	var r *Refusal
	return errors.As(err, &r) && r.Code == code
}

// envRefusal classifies an environment's error: an *envs.Error is the
// environment refusing the request and goes to the client with its own code
// and message (httpError finds it through the wrapping); anything else is an
// internal failure.
func envRefusal(what string, err error) error {
	var ee *envs.Error
	if errors.As(err, &ee) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return refuse(protocol.CodeInternal, "%s: %v", what, err)
}

// codeStatus is the HTTP status of every code the server refuses with; the
// protocol package documents the same table next to the codes.
var codeStatus = map[string]int{
	protocol.CodeMalformed:           http.StatusBadRequest,
	protocol.CodeUnauthorized:        http.StatusUnauthorized,
	protocol.CodeNotFound:            http.StatusNotFound,
	protocol.CodeUnknownEnv:          http.StatusNotFound,
	protocol.CodeUnknownSession:      http.StatusNotFound,
	protocol.CodeControlDisabled:     http.StatusNotFound,
	protocol.CodeSessionRetired:      http.StatusConflict,
	protocol.CodeRevisionMismatch:    http.StatusConflict,
	protocol.CodeRequestConflict:     http.StatusConflict,
	protocol.CodeStaleAttempt:        http.StatusConflict,
	protocol.CodeAttemptNotInstalled: http.StatusConflict,
	protocol.CodeCheckpointConflict:  http.StatusConflict,
	protocol.CodeStaleCheckpoint:     http.StatusConflict,
	protocol.CodeInvalidPhase:        http.StatusConflict,
	protocol.CodePrepareTimeout:      http.StatusConflict,
	protocol.CodePrepareAborted:      http.StatusConflict,
	protocol.CodeLocationConflict:    http.StatusConflict,
	protocol.CodeInvalidCheckpoint:   http.StatusUnprocessableEntity,
	protocol.CodeInternal:            http.StatusInternalServerError,
	protocol.CodeParked:              http.StatusServiceUnavailable,
}

// httpError maps an error of the server to the status and error body it is
// answered with. It is the one place where HTTP statuses are chosen: a
// *Refusal by its code, an environment's *envs.Error as 422 with the
// environment's code, anything else as 500 internal.
func httpError(err error) (int, protocol.ErrorDetail) {
	var r *Refusal
	if errors.As(err, &r) {
		if status, ok := codeStatus[r.Code]; ok {
			return status, protocol.ErrorDetail{Code: r.Code, Message: r.Msg}
		}
		// A code without a status is a bug here, not the client's fault.
		return http.StatusInternalServerError, protocol.ErrorDetail{Code: protocol.CodeInternal,
			Message: fmt.Sprintf("refusal with unmapped code %q: %s", r.Code, r.Msg)}
	}
	var ee *envs.Error
	if errors.As(err, &ee) {
		return http.StatusUnprocessableEntity, protocol.ErrorDetail{Code: ee.Code, Message: ee.Message}
	}
	return http.StatusInternalServerError, protocol.ErrorDetail{Code: protocol.CodeInternal, Message: err.Error()}
}

// writeErrorBody writes the protocol's JSON error envelope.
func writeErrorBody(w http.ResponseWriter, status int, detail protocol.ErrorDetail) {
	b, _ := json.Marshal(protocol.ErrorBody{Error: detail})
	writeJSON(w, status, b)
}
