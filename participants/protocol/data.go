// Package protocol is the wire contract every participant of a checkpoint
// shares: the data- and control-plane request and response types, the error
// codes and envelope, both clients and the request-id helpers. It holds no
// server and no logger, so the deterministic workflow code can import the
// request-id helpers without dragging either into its dependency graph; the
// environment server lives in package envserver.
//
// This file is the data plane: what clients (activities, tests, operators)
// send to and receive from an environment server as JSON over HTTP.
package protocol

import (
	"encoding/json"

	"github.com/turnstile-rl/turnstile/envs"
)

// Data-plane routes of the environment server.
const (
	RouteHealth   = "GET /healthz"
	RouteEnvs     = "GET /v1/envs"                           // []envs.Spec
	RouteStats    = "GET /v1/stats"                          // Stats
	RouteStart    = "POST /v1/sessions"                      // StartRequest → StartResponse
	RouteOperate  = "POST /v1/sessions/{rollout_id}/operate" // OperateRequest → OperateResponse
	RouteVerify   = "POST /v1/sessions/{rollout_id}/verify"  // VerifyRequest → VerifyResponse
	RouteSessions = "GET /v1/sessions/{rollout_id}"          // SessionInfo (read only)
)

// DataTokenEnvVar names the environment variable that holds the data-plane
// token: cmd/envserver's default for --data-token, and what workers send.
const DataTokenEnvVar = "TURNSTILE_DATA_TOKEN"

// Identity is who sends a request: the fencing token travels with every call.
type Identity struct {
	RolloutID string `json:"rollout_id"`
	Attempt   int    `json:"attempt"`
	// RequestID names the logical position (rollout, turn, tool-call index),
	// never the attempt or run, so a replacement attempt re-sending a mutation
	// gets the stored response instead of a second application.
	RequestID string `json:"request_id"`
}

// StartRequest seeds a session. A start from a higher attempt than the
// session's replaces it with a fresh episode (a start-over), once the
// control plane installed that attempt (ControlClient.Authorise, or a
// restore); before, it is refused CodeAttemptNotInstalled.
type StartRequest struct {
	Identity
	Env  string          `json:"env"`
	Seed int64           `json:"seed"`
	Task json.RawMessage `json:"task"`
}

// StartResponse is the seeded session.
type StartResponse struct {
	Revision int64      `json:"revision"`
	Spec     envs.Spec  `json:"spec"`
	Start    envs.Start `json:"start"`
	Replayed bool       `json:"replayed,omitempty"`
}

// OperateRequest is one mutation (a tool call or a gym step).
type OperateRequest struct {
	Identity
	ExpectedRevision int64           `json:"expected_revision"`
	Tool             string          `json:"tool"`
	Arguments        json.RawMessage `json:"arguments"`
}

// OperateResponse is the stored response of a mutation; a replay returns the
// same bytes with Replayed set.
type OperateResponse struct {
	Revision int64        `json:"revision"`
	Outcome  envs.Outcome `json:"outcome"`
	Replayed bool         `json:"replayed,omitempty"`
}

// VerifyRequest scores and retires the session (terminal).
type VerifyRequest struct {
	Identity
	ExpectedRevision int64 `json:"expected_revision"`
}

// VerifyResponse is the verdict.
type VerifyResponse struct {
	Revision int64        `json:"revision"`
	Verdict  envs.Verdict `json:"verdict"`
	Replayed bool         `json:"replayed,omitempty"`
}

// SessionInfo describes a session for operators and tests.
type SessionInfo struct {
	RolloutID string `json:"rollout_id"`
	Env       string `json:"env"`
	Attempt   int    `json:"attempt"`
	Revision  int64  `json:"revision"`
	Retired   bool   `json:"retired"`
}

// Stats are the server's counters.
type Stats struct {
	Applied  int64 `json:"applied"`  // mutations (start, operate, verify) executed
	Replayed int64 `json:"replayed"` // stored responses returned instead
	Refused  int64 `json:"refused"`  // requests a route answered with a 4xx (no route: not counted)
	Parked   int64 `json:"parked"`   // requests answered "parked" (admission closed)
	// Reapplied are mutations a restore re-applied to rebuild a session of
	// a replay environment (RULES.md R27): never counted as applied.
	Reapplied int64 `json:"reapplied,omitempty"`
	Sessions  int   `json:"sessions"` // live sessions
}
