package protocol

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/turnstile-rl/turnstile/envs"
)

// This file is the wire contract of the checkpoint control plane: the routes a
// coordinator (the Checkpoint and Restore workflows' activities, operators)
// calls to take a coordinated cut of an environment server and to restore it.
// Every route requires "Authorization: Bearer <token>"; a server without a
// configured token answers every control route 404 control_disabled.

// Control-plane routes.
const (
	ControlPrefix            = "/v1/control/"
	RouteControlCapabilities = "GET /v1/control/capabilities" // → Capabilities
	RouteControlStatus       = "GET /v1/control/status"       // → ControlStatus
	RouteControlPrepare      = "POST /v1/control/prepare"     // PrepareRequest → PrepareResponse
	RouteControlCommit       = "POST /v1/control/commit"      // CommitRequest → CommitResponse
	RouteControlRestore      = "POST /v1/control/restore"     // RestoreRequest → RestoreResponse
	RouteControlResume       = "POST /v1/control/resume"      // ResumeRequest → ResumeResponse
	RouteControlRetire       = "POST /v1/control/retire"      // RetireRequest → RetireResponse
	// RouteControlAuthorise installs an attempt for a fresh start (a
	// start-over): AuthoriseRequest → AuthoriseResponse.
	RouteControlAuthorise = "POST /v1/control/sessions/{rollout_id}/authorise"
)

// ControlTokenEnvVar names the environment variable that holds the control
// token of cmd/envserver (its --control-token flag overrides it).
const ControlTokenEnvVar = "TURNSTILE_CONTROL_TOKEN"

// ControlSchemaVersion is the version of the control protocol and of the
// checkpoint records this server writes; a restore refuses any other.
const ControlSchemaVersion = 1

// ComponentEnvironmentServer is the component name an environment server
// reports in its capabilities.
const ComponentEnvironmentServer = "environment_server"

// Features an environment server advertises. The list only grows; a
// coordinator checks for what it relies on.
const (
	// FeatureAbsoluteDeadline: prepare takes an absolute deadline.
	FeatureAbsoluteDeadline = "absolute_deadline_v1"
	// FeatureRetireStraggler: retire drops one execution, even one whose
	// mutation is still running, so a timed-out prepare can be retried.
	FeatureRetireStraggler = "retire_straggler_v1"
	// FeatureReceiptsInCheckpoint: mutation receipts are committed and
	// restored, so a replacement attempt re-sending an applied request gets
	// the stored response.
	FeatureReceiptsInCheckpoint = "receipts_in_checkpoint_v1"
	// FeatureRestartOnlyDiscard: restart-only sessions are not restored;
	// their rollouts start over as the new attempt.
	FeatureRestartOnlyDiscard = "restart_only_discard_v1"
	// FeatureRestoreSessions: a restore is a control session of its own,
	// named by RestoreRequest.RestoreID, so a live server can restore a
	// checkpoint it took, and the same checkpoint more than once; only
	// the rollouts the attempt map names are touched.
	FeatureRestoreSessions = "restore_sessions_v1"
	// FeatureAuthoriseStartOver: data-plane requests never raise the fence
	// (attempt_not_installed); RouteControlAuthorise installs an attempt
	// for a start-over.
	FeatureAuthoriseStartOver = "authorise_start_over_v1"
	// FeaturePrepareLease: a prepared or committed checkpoint session that
	// hears nothing more of its checkpoint for its lease (the prepare's
	// lease_ms, DefaultLeaseMillis when omitted) resumes by itself, so a
	// coordinator that vanished holds admission for a bounded time.
	FeaturePrepareLease = "prepare_lease_v1"
)

// Bounds of a prepare's lease_ms.
const (
	// DefaultLeaseMillis is the lease of a prepare that gives none: ten
	// minutes.
	DefaultLeaseMillis = 10 * 60 * 1000
	// MaxLeaseMillis bounds lease_ms: one day.
	MaxLeaseMillis = 24 * 60 * 60 * 1000
)

// Features are the features this version of the protocol knows, each
// documented in docs/protocol/RULES.md R17; the Go environment server
// implements them all.
func Features() []string {
	return []string{FeatureAbsoluteDeadline, FeatureRetireStraggler, FeatureReceiptsInCheckpoint,
		FeatureRestartOnlyDiscard, FeatureRestoreSessions, FeatureAuthoriseStartOver, FeaturePrepareLease}
}

// RequiredFeatures are the features a coordinator relies on: it refuses a
// participant whose capabilities lack one (docs/protocol/RULES.md R17).
// FeatureRetireStraggler is not among them: the coordinator never retires;
// an operator does, after a prepare timeout.
func RequiredFeatures() []string {
	return []string{FeatureAbsoluteDeadline, FeatureReceiptsInCheckpoint, FeatureRestartOnlyDiscard,
		FeatureRestoreSessions, FeatureAuthoriseStartOver}
}

// CheckCapabilities says what a coordinator cannot work with in a
// participant's capabilities: another component, another schema version,
// no name, or a required feature missing. Nil means it can.
func CheckCapabilities(caps Capabilities) error {
	var missing []string
	for _, f := range RequiredFeatures() {
		if !slices.Contains(caps.Features, f) {
			missing = append(missing, f)
		}
	}
	switch {
	case caps.Component != ComponentEnvironmentServer:
		return fmt.Errorf("component %q, want %q", caps.Component, ComponentEnvironmentServer)
	case caps.SchemaVersion != ControlSchemaVersion:
		return fmt.Errorf("schema_version %d, want %d", caps.SchemaVersion, ControlSchemaVersion)
	case strings.TrimSpace(caps.Name) == "":
		return errors.New("no name (a restore matches participants by name)")
	case len(missing) > 0:
		return fmt.Errorf("features %v lack %v (a coordinator needs all of %v)", caps.Features, missing, RequiredFeatures())
	}
	return nil
}

// Phase is where the server is in the checkpoint protocol.
type Phase string

// Phases. Resume (which is also the abort) returns to PhaseIdle from any of
// them.
const (
	PhaseIdle       Phase = "idle"
	PhasePreparing  Phase = "preparing"  // admission closed, draining in-flight mutations
	PhasePrepared   Phase = "prepared"   // the cut is frozen
	PhaseCommitting Phase = "committing" // the frozen cut is being written
	PhaseCommitted  Phase = "committed"  // the cut is written
	PhaseRestoring  Phase = "restoring"
	PhaseRestored   Phase = "restored" // installed as the new attempts, paused until resume
)

// Admission states reported by status.
const (
	AdmissionOpen   = "open"
	AdmissionClosed = "closed"
)

// Sections of an environment server's checkpoint (package artifact).
const (
	// SectionServer holds one record, key ServerRecordKey: the server's
	// identity and the record schema version.
	SectionServer = "server"
	// SectionSessions holds one record per session, keyed by rollout id.
	SectionSessions = "sessions"
	// SectionReceipts holds one record per stored mutation response, keyed
	// by the JSON array [rollout id, request id].
	SectionReceipts = "receipts"
	// SectionFences holds the highest accepted attempt of every rollout the
	// server has seen, keyed by rollout id.
	SectionFences = "fences"
	// ServerRecordKey is the key of the one record of SectionServer.
	ServerRecordKey = "server"
)

// Control-plane error codes, sent in the usual ErrorBody.
const (
	CodeControlDisabled    = "control_disabled"    // 404: no control token configured
	CodeUnauthorized       = "unauthorized"        // 401: missing or wrong bearer token
	CodeCheckpointConflict = "checkpoint_conflict" // 409: another checkpoint or restore is active, or a replay with different arguments
	CodeStaleCheckpoint    = "stale_checkpoint"    // 409: the checkpoint (or restore) id was retired by a resume
	CodeInvalidPhase       = "invalid_phase"       // 409: the operation is not allowed in this phase
	CodePrepareTimeout     = "prepare_timeout"     // 409: in-flight mutations did not finish by the deadline
	CodeInvalidCheckpoint  = "invalid_checkpoint"  // 422: the checkpoint is corrupt, torn, foreign or refused by an environment
	CodeLocationConflict   = "location_conflict"   // 409: the commit location holds something else
	CodePrepareAborted     = "prepare_aborted"     // 409: a resume or the caller going away aborted a prepare before the cut was frozen
	// A restore whose attempt map does not raise a rollout above its saved
	// attempt is refused with CodeStaleAttempt (409).
)

// EnvCapability is one hosted environment as capabilities report it.
type EnvCapability struct {
	Name  string     `json:"name"`
	Mode  envs.Mode  `json:"mode"` // envs.EffectiveMode of the declared mode
	Style envs.Style `json:"style"`
}

// Capabilities describes the participant to a coordinator.
type Capabilities struct {
	Component     string          `json:"component"`
	Name          string          `json:"name"`
	SchemaVersion int             `json:"schema_version"`
	Envs          []EnvCapability `json:"envs"` // ordered by name
	Features      []string        `json:"features"`
	Phase         Phase           `json:"phase"`
	CheckpointID  string          `json:"checkpoint_id,omitempty"`
	// RestoreID names the active restore session (CheckpointID is then the
	// checkpoint it restores).
	RestoreID string `json:"restore_id,omitempty"`
}

// InFlight is one mutation running on the server.
type InFlight struct {
	RolloutID string `json:"rollout_id"`
	Attempt   int    `json:"attempt"`
	Count     int    `json:"count"`
	// Retired: the attempt was retired; the mutation's result is discarded
	// and a prepare does not wait for it.
	Retired bool `json:"retired,omitempty"`
}

// ControlStatus is the server's checkpoint state. It is always answered,
// whatever the phase, so a draining server stays observable.
type ControlStatus struct {
	Phase        Phase  `json:"phase"`
	CheckpointID string `json:"checkpoint_id,omitempty"`
	// RestoreID names the active restore session (CheckpointID is then the
	// checkpoint it restores).
	RestoreID string `json:"restore_id,omitempty"`
	Admission string `json:"admission"` // AdmissionOpen or AdmissionClosed
	Sessions  int    `json:"sessions"`  // live sessions
	// CutSessions is the number of sessions in the frozen cut (prepared and
	// committed phases).
	CutSessions int `json:"cut_sessions,omitempty"`
	// InFlight lists the mutations running now, by rollout and attempt: after
	// a prepare timeout these are the stragglers to retire.
	InFlight []InFlight `json:"in_flight"`
}

// SessionSummary is one session of a cut: the membership a coordinator
// reconciles with what Temporal visibility shows.
type SessionSummary struct {
	RolloutID string    `json:"rollout_id"`
	Attempt   int       `json:"attempt"`
	Revision  int64     `json:"revision"`
	Env       string    `json:"env"`
	Mode      envs.Mode `json:"mode"`
	Retired   bool      `json:"retired"` // verified: only its receipts are kept
	// Diverged, in a restore's restarted list, says why the replay of a
	// replay session did not rebuild it (RULES.md R27): it starts over.
	Diverged string `json:"diverged,omitempty"`
}

// PrepareRequest closes admission and freezes the cut.
type PrepareRequest struct {
	CheckpointID string `json:"checkpoint_id"`
	// Deadline is absolute (RFC 3339): a relative budget would re-anchor at
	// every hop and the hops together could exceed the coordinator's limit.
	Deadline time.Time `json:"deadline"`
	// LeaseMillis is how long the session, once prepared (and again once
	// committed), waits for the next operation of this checkpoint before it
	// resumes by itself (R28); omitted or 0: DefaultLeaseMillis.
	LeaseMillis int64 `json:"lease_ms,omitempty"`
}

// Lease is the request's lease, DefaultLeaseMillis when it gives none.
func (r PrepareRequest) Lease() time.Duration {
	if r.LeaseMillis == 0 {
		return DefaultLeaseMillis * time.Millisecond
	}
	return time.Duration(r.LeaseMillis) * time.Millisecond
}

// PrepareResponse is the frozen cut's membership.
type PrepareResponse struct {
	Phase        Phase            `json:"phase"`
	CheckpointID string           `json:"checkpoint_id"`
	Sessions     []SessionSummary `json:"sessions"` // ordered by rollout id
}

// CommitRequest writes the frozen cut.
type CommitRequest struct {
	CheckpointID string `json:"checkpoint_id"`
	// Location is the absolute path of the directory to write the checkpoint
	// into (created if missing, refused if it holds anything else).
	Location string `json:"location"`
}

// CommitResponse describes the written checkpoint. A retried commit
// validates what is on disk and returns the same answer.
type CommitResponse struct {
	Phase          Phase  `json:"phase"`
	CheckpointID   string `json:"checkpoint_id"`
	Location       string `json:"location"`
	ManifestDigest string `json:"manifest_digest"`
	Sessions       int    `json:"sessions"`
	Records        int    `json:"records"`
	Bytes          int64  `json:"bytes"` // all files, manifest included
}

// RestoreRequest installs a committed checkpoint as new attempts.
type RestoreRequest struct {
	// CheckpointID is the checkpoint to read at Location.
	CheckpointID string `json:"checkpoint_id"`
	// RestoreID names this restore's control session, the key of the phase
	// fence (empty means CheckpointID): the same restore id replays, a
	// resumed one is retired (stale_checkpoint), and a new restore id
	// restores the same checkpoint again on the same live server.
	RestoreID string `json:"restore_id,omitempty"`
	Location  string `json:"location"`
	// Attempts maps the rollouts this restore owns to their new attempt,
	// each above its saved attempt and above any attempt this server has
	// seen. Only these rollouts are touched:
	//   - in the checkpoint with state (or verified): installed as the new
	//     attempt, replacing whatever the server holds now;
	//   - in the checkpoint without state (restart-only, stateless): fence
	//     raised, any session they hold now dropped; they start over;
	//   - absent from the checkpoint (e.g. started after the cut): fence
	//     raised, any session they hold now dropped (Fenced).
	// Unfinished sessions of the checkpoint it does not name (another set's
	// rollouts on the same server) are left as the server holds them now
	// (Untouched); a verified one is installed only on a server that never
	// saw the rollout, so its verdict survives a server that died.
	Attempts map[string]int `json:"attempts"`
	// Deadline optionally bounds the wait for in-flight mutations (absolute,
	// RFC 3339); without it the request's own lifetime bounds it.
	Deadline *time.Time `json:"deadline,omitempty"`
}

// RestoreResponse says what was installed.
type RestoreResponse struct {
	Phase          Phase  `json:"phase"`
	CheckpointID   string `json:"checkpoint_id"`
	RestoreID      string `json:"restore_id,omitempty"`
	ManifestDigest string `json:"manifest_digest"`
	// Restored are the sessions installed with their state (export_restore)
	// or their receipts (verified), at their new attempt.
	Restored []SessionSummary `json:"restored"`
	// Restarted are the rollouts whose environment cannot export state, and
	// replay sessions whose replay diverged (Diverged says why): only their
	// fence was raised, and they start over as the new attempt. A replay
	// session that replayed is in Restored.
	Restarted []SessionSummary `json:"restarted"`
	// Fenced are the rollouts of the attempt map absent from the checkpoint:
	// their fence was raised and any session of an older attempt dropped.
	Fenced []FenceSummary `json:"fenced,omitempty"`
	// Untouched are the sessions of the checkpoint the attempt map does not
	// name and that were not installed: left as the server holds them.
	Untouched []string `json:"untouched,omitempty"`
}

// FenceSummary is one rollout a restore only fenced.
type FenceSummary struct {
	RolloutID string `json:"rollout_id"`
	Attempt   int    `json:"attempt"` // the lowest attempt accepted from now on
	// Dropped: the server held a session of an older attempt (live or
	// verified); it was dropped with its receipts.
	Dropped bool `json:"dropped,omitempty"`
}

// ResumeRequest reopens admission; it is also the abort of a checkpoint or
// restore in any phase. It ends the session named RestoreID, or
// CheckpointID when RestoreID is empty; after it, that id is retired.
type ResumeRequest struct {
	CheckpointID string `json:"checkpoint_id"`
	RestoreID    string `json:"restore_id,omitempty"`
}

// ResumeResponse is the answer to resume.
type ResumeResponse struct {
	Phase        Phase  `json:"phase"`
	CheckpointID string `json:"checkpoint_id"`
	RestoreID    string `json:"restore_id,omitempty"`
}

// RetireRequest ends one execution: attempt Attempt of RolloutID is done,
// its session is dropped, and any later request from it (or an older
// attempt) is refused stale_attempt.
type RetireRequest struct {
	RolloutID string `json:"rollout_id"`
	Attempt   int    `json:"attempt"`
}

// AuthoriseRequest installs Attempt of the rollout named in the path for a
// fresh start: the fence rises to Attempt and any session of an older
// attempt is dropped. The path names the rollout.
type AuthoriseRequest struct {
	Attempt int `json:"attempt"`
}

// AuthoriseResponse is the answer to authorise.
type AuthoriseResponse struct {
	RolloutID string `json:"rollout_id"`
	Attempt   int    `json:"attempt"`
	// Fence is the highest attempt installed now (Attempt).
	Fence int `json:"fence"`
	// Changed: the fence was raised by this call; false when Attempt was
	// already installed (an idempotent repeat).
	Changed bool `json:"changed"`
	// Dropped: a session of an older attempt was dropped.
	Dropped bool `json:"dropped"`
	// Pending: a mutation of an older attempt is still running; its result
	// will be discarded when it returns.
	Pending bool `json:"pending"`
}

// RetireResponse is the answer to retire.
type RetireResponse struct {
	RolloutID string `json:"rollout_id"`
	// Fence is the lowest attempt the server accepts from now on.
	Fence int `json:"fence"`
	// Discarded: a session of the retired attempt was dropped (now or, for
	// a mutation still running, as soon as it returns).
	Discarded bool `json:"discarded"`
	// Pending: a mutation of the retired attempt is still running; its
	// result will be discarded when it returns.
	Pending bool `json:"pending"`
}

// ValidateParticipants checks the environment servers' base URLs a
// checkpoint or restore names: at least one, each an http(s) URL with a
// host, none twice (a trailing slash does not make a second server). It
// returns them trimmed, in the order given: the order numbers the servers'
// artifacts in the checkpoint.
func ValidateParticipants(urls []string) ([]string, error) {
	if len(urls) == 0 {
		return nil, errors.New("at least one environment server URL is required")
	}
	seen := make(map[string]bool, len(urls))
	out := make([]string, 0, len(urls))
	for i, raw := range urls {
		u := strings.TrimRight(strings.TrimSpace(raw), "/")
		parsed, err := url.Parse(u)
		if u == "" || err != nil || (parsed.Scheme != "http" && parsed.Scheme != "https") || parsed.Host == "" {
			return nil, fmt.Errorf("participant %d: %q is not an http:// or https:// URL", i, raw)
		}
		if seen[u] {
			return nil, fmt.Errorf("participant %d: %s is listed twice", i, u)
		}
		seen[u] = true
		out = append(out, u)
	}
	return out, nil
}
