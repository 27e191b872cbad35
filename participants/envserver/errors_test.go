package envserver

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// TestHTTPError pins the one mapping from the server's errors to the wire:
// the statuses the protocol documents next to each code.
func TestHTTPError(t *testing.T) {
	envErr := &envs.Error{Code: "bad_tool", Message: "no such tool"}
	cases := []struct {
		name   string
		err    error
		status int
		detail protocol.ErrorDetail
	}{
		{"malformed", refuse(protocol.CodeMalformed, "missing field %s", "tool"), http.StatusBadRequest,
			protocol.ErrorDetail{Code: protocol.CodeMalformed, Message: "missing field tool"}},
		{"unauthorized", refuse(protocol.CodeUnauthorized, "no"), http.StatusUnauthorized,
			protocol.ErrorDetail{Code: protocol.CodeUnauthorized, Message: "no"}},
		{"stale attempt, wrapped", fmt.Errorf("fence: %w", refuse(protocol.CodeStaleAttempt, "old")), http.StatusConflict,
			protocol.ErrorDetail{Code: protocol.CodeStaleAttempt, Message: "old"}},
		{"invalid checkpoint", refuse(protocol.CodeInvalidCheckpoint, "torn"), http.StatusUnprocessableEntity,
			protocol.ErrorDetail{Code: protocol.CodeInvalidCheckpoint, Message: "torn"}},
		{"parked", refuse(protocol.CodeParked, "later"), http.StatusServiceUnavailable,
			protocol.ErrorDetail{Code: protocol.CodeParked, Message: "later"}},
		{"environment refusal", envRefusal("apply x", envErr), http.StatusUnprocessableEntity,
			protocol.ErrorDetail{Code: "bad_tool", Message: "no such tool"}},
		{"environment failure", envRefusal("apply x", errors.New("boom")), http.StatusInternalServerError,
			protocol.ErrorDetail{Code: protocol.CodeInternal, Message: "apply x: boom"}},
		{"plain error", errors.New("boom"), http.StatusInternalServerError,
			protocol.ErrorDetail{Code: protocol.CodeInternal, Message: "boom"}},
		{"unmapped code", refuse("no_such_code", "x"), http.StatusInternalServerError,
			protocol.ErrorDetail{Code: protocol.CodeInternal, Message: `refusal with unmapped code "no_such_code": x`}},
	}
	for _, tc := range cases {
		status, detail := httpError(tc.err)
		require.Equal(t, tc.status, status, "%s: got %d %+v, want %d %+v", tc.name, status, detail, tc.status, tc.detail)
		require.Equal(t, tc.detail, detail, "%s: got %d %+v, want %d %+v", tc.name, status, detail, tc.status, tc.detail)
	}
}

// TestEveryCodeHasAStatus: a code added to the protocol without a status
// would be answered 500 internal.
func TestEveryCodeHasAStatus(t *testing.T) {
	codes := []string{
		protocol.CodeMalformed, protocol.CodeUnknownEnv, protocol.CodeUnknownSession, protocol.CodeSessionRetired,
		protocol.CodeRevisionMismatch, protocol.CodeRequestConflict, protocol.CodeStaleAttempt, protocol.CodeAttemptNotInstalled, protocol.CodeParked,
		protocol.CodeNotFound, protocol.CodeInternal, protocol.CodeControlDisabled, protocol.CodeUnauthorized,
		protocol.CodeCheckpointConflict, protocol.CodeStaleCheckpoint, protocol.CodeInvalidPhase,
		protocol.CodePrepareTimeout, protocol.CodePrepareAborted, protocol.CodeInvalidCheckpoint, protocol.CodeLocationConflict,
	}
	for _, c := range codes {
		_, ok := codeStatus[c]
		assert.True(t, ok, "code %q has no HTTP status", c)
	}
	assert.Len(t, codeStatus, len(codes), "codeStatus maps %d codes, the protocol has %d", len(codeStatus), len(codes))
}
