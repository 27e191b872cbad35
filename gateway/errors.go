package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strings"

	"go.temporal.io/api/serviceerror"

	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
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
		return &apiError{status: http.StatusConflict, code: CodeConflict, field: conflictErr.Field, msg: inJSONTerms(err.Error(), nil)}
	case errors.As(err, &notFoundErr):
		return &apiError{status: http.StatusNotFound, code: CodeNotFound, msg: err.Error()}
	case errors.As(err, &tooBig):
		return badRequest("", "request body larger than the gateway accepts")
	case trainer.IsRequestTooLarge(err):
		return badRequest("", err.Error()+" (Temporal refused the request as too large: repeating it cannot help)")
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

// maxMessageBytes bounds an error message: one that quotes an oversized
// value (a 10 MB field name or id) must not echo it back.
const maxMessageBytes = 2048

// writeError writes e as an ErrorBody.
func writeError(w http.ResponseWriter, e *apiError) {
	_ = writeJSON(w, e.status, ErrorBody{Error: ErrorDetail{Code: e.code, Message: rollout.Truncate(e.msg, maxMessageBytes),
		Field: rollout.Truncate(e.field, 256)}, Health: e.health})
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
// messages speak of to the JSON fields of the gateway's requests ("" for a
// flag with no field: the gateway's own settings).
var flagFields = map[string]string{
	"--set": "set", "--count": "count", "--env": "envs", "--seed": "seed", "--max-turns": "max_turns", "--policy": "policy",
	"--env-url": "env_url", "--model-url": "model_url", "--repeats": "repeats", "--tasks": "rows",
	"--env-server": "env_server", "--policy-endpoint": "policy_endpoint",
	"--model-timeout": "limits.model_call_timeout", "--env-timeout": "limits.env_call_timeout",
	"--model-retries": "limits.model_call_retries", "--deadline": "limits.deadline",
	"--id": "checkpoint_id", "--restore-id": "restore_id", "--participants": "participants",
	"--timeout": "timeout", "--root": "", "--transcript-dir": "",
}

// flagPattern is a flag in a message: "--" and a lower-case name, not
// inside a word.
var flagPattern = regexp.MustCompile(`(^|[^A-Za-z0-9_-])(--[a-z][a-z0-9-]*)`)

// participantIndex is how protocol.ValidateParticipants names a bad entry.
var participantIndex = regexp.MustCompile(`^participants: participant (\d+): `)

// invalid turns a validation error of the client library into a 400 whose
// field is the JSON field its message starts with. The library speaks in
// the starter's flags ("--count 0: want 1.."); the message is rewritten in
// the request's JSON fields ("count 0: want 1.."), so a client of the
// gateway never reads a flag it cannot pass.
func invalid(err error, overrides map[string]string) *apiError {
	fieldOf := func(flag string) (string, bool) {
		if f, ok := overrides[flag]; ok {
			return f, true
		}
		f, ok := flagFields[flag]
		return f, ok
	}
	msg := err.Error()
	token, _, _ := strings.Cut(msg, " ")
	token = strings.TrimRight(token, ":")
	field, ok := fieldOf(token)
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
	return badRequest(field, inJSONTerms(msg, overrides))
}

// inJSONTerms rewrites the starter's flags in a message of the client
// library as the JSON fields of the gateway's requests.
func inJSONTerms(msg string, overrides map[string]string) string {
	msg = flagPattern.ReplaceAllStringFunc(msg, func(m string) string {
		i := strings.Index(m, "--")
		f, ok := overrides[m[i:]]
		if !ok {
			f, ok = flagFields[m[i:]]
		}
		if ok && f != "" {
			return m[:i] + f
		}
		return m
	})
	return participantIndex.ReplaceAllString(msg, "participants[$1]: ")
}
