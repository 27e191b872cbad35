package protocol

import "fmt"

// Error codes of the data plane. Each is sent as
// {"error":{"code":...,"message":...}} with the HTTP status noted.
const (
	CodeMalformed        = "malformed_request"   // 400
	CodeUnknownEnv       = "unknown_env"         // 404
	CodeUnknownSession   = "unknown_session"     // 404
	CodeSessionRetired   = "session_retired"     // 409
	CodeRevisionMismatch = "revision_mismatch"   // 409
	CodeRequestConflict  = "request_id_conflict" // 409: same request id, different body
	CodeStaleAttempt     = "stale_attempt"       // 409: attempt below the highest installed
	// CodeAttemptNotInstalled (409): a data-plane request's attempt is above
	// the highest the control plane installed for the rollout; only the
	// control plane moves the fence (docs/protocol/RULES.md R7).
	CodeAttemptNotInstalled = "attempt_not_installed"
	CodeParked              = "parked"    // 503: admission closed; retry the same request later
	CodeNotFound            = "not_found" // 404: the server has no such route
	// CodeInternal (500): the server or an environment failed in a way that
	// is not a refusal; the session is left unchanged.
	CodeInternal = "internal"
	// Environment refusals (envs.Code*) are sent with status 422.
)

// ErrorBody is the JSON error envelope.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail names what was wrong.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// RemoteError is an error answer from a participant, as seen by a client.
type RemoteError struct {
	Status  int
	Code    string
	Message string
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("participant answered %d %s: %s", e.Status, e.Code, e.Message)
}
