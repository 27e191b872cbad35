// Package workflows holds the deterministic orchestration: the Rollout agent
// loop (tool-calling and Gymnasium step styles), Checkpoint and Restore. No
// I/O, no clocks, no map ranging: every side effect is an activity.
package workflows

import (
	"encoding/json"
	"time"

	"github.com/turnstile-rl/turnstile/activities"
	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/transcript"
)

// TaskQueue is the task queue rollouts and their activities run on.
const TaskQueue = "turnstile-rollouts"

// Workflow type names, as registered and as typed into the Temporal CLI.
const (
	RolloutWorkflowName = "Rollout"
)

// Message names of the Rollout workflow.
const (
	// QueryBoundary returns the rollout's current Boundary.
	QueryBoundary = "boundary"
	// QueryStatus returns the rollout's Status.
	QueryStatus = "status"
)

// Search attributes upserted by the Rollout workflow at every boundary, so an
// operator can filter rollouts in the Web UI or with `temporal workflow list
// --query 'RolloutSet="s1" AND RolloutPhase="model"'`.
const (
	SARolloutID      = "RolloutId"      // Keyword
	SARolloutSet     = "RolloutSet"     // Keyword
	SARolloutAttempt = "RolloutAttempt" // Int
	SARolloutTurn    = "RolloutTurn"    // Int
	SARolloutPhase   = "RolloutPhase"   // Keyword
)

// Phase is where a rollout is.
type Phase string

// Phases of a rollout.
const (
	PhaseSeeding     Phase = "seeding"
	PhaseModel       Phase = "model"
	PhaseEnvironment Phase = "environment"
	PhaseVerifying   Phase = "verifying"
	PhaseParked      Phase = "parked"
	PhaseAwaitingAck Phase = "awaiting_ack"
	PhaseCompleted   Phase = "completed"
	PhaseFailed      Phase = "failed"
)

// RolloutID returns the workflow ID of a rollout: one ID for every attempt,
// each attempt a new run.
func RolloutWorkflowID(rolloutID string) string { return "rollout/" + rolloutID }

// Limits bound a rollout.
type Limits struct {
	// MaxTurns is the number of model calls after which the rollout stops
	// (tool style) or is truncated (gym style). Default 16.
	MaxTurns int `json:"max_turns,omitempty"`
}

// RolloutInput starts one attempt of a rollout. It is plain JSON, so a user
// can type it into `temporal workflow start --type Rollout --input '…'`.
type RolloutInput struct {
	RolloutID string               `json:"rollout_id"`
	Set       string               `json:"set"`
	Attempt   int                  `json:"attempt"`
	Task      json.RawMessage      `json:"task"`
	Env       activities.EnvRef    `json:"env"`
	Policy    activities.PolicyRef `json:"policy"`
	Seed      int64                `json:"seed"`
	Limits    Limits               `json:"limits,omitempty"`
	// RequireAck holds the completed result until the pipeline acknowledges it.
	RequireAck bool `json:"require_ack,omitempty"`
	// Resume continues from a boundary (continue-as-new inside an attempt, or a
	// restored attempt); nil starts from the seed.
	Resume *Boundary `json:"resume,omitempty"`
	// HoldFor starts the run parked for this checkpoint id, until a resume
	// with the same id: a restore installs every attempt before any moves.
	HoldFor string `json:"hold_for,omitempty"`
	// Completed is a result completed by an earlier attempt and not yet
	// acknowledged when a checkpoint was cut: a restored run offers it again,
	// receipt unchanged, instead of running the rollout a second time.
	Completed *RolloutResult `json:"completed,omitempty"`
}

// Boundary is a rollout's state right after all of a turn's (or a tool
// call's) activities returned: the only place it may park or continue as new.
type Boundary struct {
	RolloutID string            `json:"rollout_id"`
	Attempt   int               `json:"attempt"`
	Turn      int               `json:"turn"` // model calls completed
	Head      transcript.Digest `json:"head"`
	Tools     transcript.Digest `json:"tools"`
	Style     envs.Style        `json:"style"`
	EnvMode   envs.Mode         `json:"env_mode"`
	Revision  int64             `json:"revision"` // environment state revision
	Seeded    bool              `json:"seeded"`
	// Pending is the model's answer whose tool calls are not all applied yet;
	// Cursor is the index of the next one to apply.
	Pending *activities.CallModelResult `json:"pending,omitempty"`
	Cursor  int                         `json:"cursor,omitempty"`
	// LastCall is the id of the last committed model call: the parent of the next.
	LastCall string           `json:"last_call,omitempty"`
	Lineage  []LineageEntry   `json:"lineage,omitempty"`
	Usage    activities.Usage `json:"usage"`
	// Reward accumulates dense (gym) rewards.
	Reward     float64 `json:"reward"`
	Terminated bool    `json:"terminated,omitempty"`
	Truncated  bool    `json:"truncated,omitempty"`
	Done       bool    `json:"done,omitempty"` // the agent loop finished; verify next
}

// LineageEntry links a model call to its parent.
type LineageEntry struct {
	CallID string `json:"call_id"`
	Parent string `json:"parent,omitempty"`
}

// RolloutResult is the outcome of a rollout.
type RolloutResult struct {
	RolloutID  string            `json:"rollout_id"`
	Set        string            `json:"set"`
	Env        string            `json:"env"`
	Attempt    int               `json:"attempt"`
	Reward     float64           `json:"reward"`
	Turns      int               `json:"turns"`
	Usage      activities.Usage  `json:"usage"`
	Head       transcript.Digest `json:"head"`
	Lineage    []LineageEntry    `json:"lineage"`
	Terminated bool              `json:"terminated,omitempty"`
	Truncated  bool              `json:"truncated,omitempty"`
	// Receipt identifies this result: its canonical digest, for acknowledgement.
	Receipt *Receipt `json:"receipt,omitempty"`
}

// Receipt proves which result was accepted.
type Receipt struct {
	RolloutID string `json:"rollout_id"`
	Attempt   int    `json:"attempt"`
	SHA256    string `json:"sha256"`
}

// Status answers QueryStatus.
type Status struct {
	Phase    Phase          `json:"phase"`
	Boundary Boundary       `json:"boundary"`
	Result   *RolloutResult `json:"result,omitempty"`
}

// Update names of the Rollout workflow (the agent side of the checkpoint
// protocol).
const (
	// UpdatePark stops the rollout at its next boundary and returns its
	// ParkRecord. A model call still running at the deadline is cancelled and
	// the rollout parks at its previous boundary.
	UpdatePark = "park"
	// UpdateResume releases a parked rollout.
	UpdateResume = "resume"
	// UpdateAcknowledge releases a completed result held for acknowledgement.
	UpdateAcknowledge = "acknowledge"
)

// ParkRequest asks a rollout to park for a checkpoint.
type ParkRequest struct {
	CheckpointID string `json:"checkpoint_id"`
	// Deadline is absolute: a model call still running then is cancelled.
	Deadline time.Time `json:"deadline"`
}

// ParkRecord is a parked rollout's boundary record: everything a replacement
// attempt needs to continue, or the completed result still held.
type ParkRecord struct {
	CheckpointID string         `json:"checkpoint_id"`
	Set          string         `json:"set"`
	Input        RolloutInput   `json:"input"` // Resume is nil here; Boundary is the state
	Boundary     Boundary       `json:"boundary"`
	Phase        Phase          `json:"phase"`
	Result       *RolloutResult `json:"result,omitempty"` // completed, not yet acknowledged
}

// ResumeRequest releases a rollout parked for CheckpointID.
type ResumeRequest struct {
	CheckpointID string `json:"checkpoint_id"`
}

// AckRequest acknowledges a completed result by its receipt.
type AckRequest struct {
	Receipt Receipt `json:"receipt"`
}

// ---- Checkpoint and Restore (coordinated cut of one set) ----------------

// Workflow type names of the coordinator workflows.
const (
	CheckpointWorkflowName = "Checkpoint"
	RestoreWorkflowName    = "Restore"
)

// CheckpointWorkflowID is the workflow ID of a checkpoint: one per checkpoint
// id, so a second start of the same checkpoint is refused by Temporal.
func CheckpointWorkflowID(checkpointID string) string { return "checkpoint/" + checkpointID }

// RestoreWorkflowID is the workflow ID of a restore: "restore/<restore_id>".
// The restore id defaults to the checkpoint id, so the first restore of
// checkpoint k is restore/k; restoring k again takes a new restore id.
func RestoreWorkflowID(restoreID string) string { return "restore/" + restoreID }

// Error types the coordinator workflows fail with.
const (
	// ErrInvalidCoordinatorInput: the checkpoint or restore input is unusable;
	// nothing was touched.
	ErrInvalidCoordinatorInput = "InvalidCoordinatorInput"
	// ErrCheckpointAborted: a checkpoint step failed or its deadline passed;
	// every participant and parked rollout was resumed and no aggregate
	// manifest exists.
	ErrCheckpointAborted = "CheckpointAborted"
	// ErrRestoreFailed: a restore step failed; the error names the step.
	ErrRestoreFailed = "RestoreFailed"
)

// CheckpointInput starts a Checkpoint. Plain JSON, startable with
// `temporal workflow start --type Checkpoint --workflow-id checkpoint/ck1
// --input '{"checkpoint_id":"ck1","set":"s1","root":"/ckpt","participants":["http://127.0.0.1:8091"],"timeout":"2m"}'`.
type CheckpointInput struct {
	CheckpointID string `json:"checkpoint_id"`
	Set          string `json:"set"`
	// Root is the absolute directory the checkpoint goes under:
	// <root>/<checkpoint_id>/.
	Root string `json:"root"`
	// Participants are the environment servers' base URLs; their order
	// numbers their artifacts (participants/<n>/).
	Participants []string `json:"participants"`
	// Deadline (absolute) or Timeout (a Go duration, turned once into an
	// absolute deadline) bounds the cut: environment servers drain their
	// in-flight mutations by then, and a model call still running then is
	// cancelled so its rollout parks at its previous boundary.
	Deadline time.Time `json:"deadline,omitzero"`
	Timeout  string    `json:"timeout,omitempty"`
	// StayPaused leaves every participant and rollout parked after the
	// commit (a planned shutdown).
	StayPaused bool `json:"stay_paused,omitempty"`
}

// CheckpointResult describes a committed checkpoint. Counts and digests
// only: the records themselves are in Dir.
type CheckpointResult struct {
	CheckpointID string `json:"checkpoint_id"`
	Dir          string `json:"dir"`
	Members      int    `json:"members"`
	Parked       int    `json:"parked"`
	// CompletedUnacked are members whose result was complete and not yet
	// acknowledged: kept in the checkpoint with their receipts.
	CompletedUnacked int `json:"completed_unacked"`
	// Closed are members that completed and closed before they could park:
	// their results were already delivered.
	Closed         int    `json:"closed"`
	Bytes          int64  `json:"bytes"`
	ManifestDigest string `json:"manifest_digest"`
	Resumed        bool   `json:"resumed"`
	// CutMillis is the time from the start to the last park; TotalMillis to
	// the end (workflow time).
	CutMillis   int64 `json:"cut_ms"`
	TotalMillis int64 `json:"total_ms"`
}

// RestoreInput starts a Restore of a committed checkpoint.
type RestoreInput struct {
	CheckpointID string `json:"checkpoint_id"`
	// RestoreID names this restore (empty: CheckpointID). A re-run of the
	// same restore id finishes it and installs nothing twice; a new one
	// restores the checkpoint again (the trainer rolling back to it once
	// more) with attempts above everything issued so far.
	RestoreID string `json:"restore_id,omitempty"`
	Root      string `json:"root"`
	// Participants are the environment servers' base URLs in the order they
	// had at checkpoint time (their addresses may be new).
	Participants []string `json:"participants"`
	// TaskQueue the restored rollouts run on; empty means TaskQueue.
	TaskQueue string `json:"task_queue,omitempty"`
}

// RestoreResult counts what the restore installed. The counts follow from
// the checkpoint, so a re-run of the same restore answers the same; Started
// counts the runs this execution started itself.
type RestoreResult struct {
	CheckpointID string `json:"checkpoint_id"`
	// Restored continue from their boundary as the new attempt.
	Restored int `json:"restored"`
	// StartedOver start from their seed as the new attempt (restart-only
	// environment, or never seeded).
	StartedOver int `json:"started_over"`
	// OfferedAgain offer a completed, unacknowledged result again.
	OfferedAgain   int    `json:"offered_again"`
	Started        int    `json:"started"`
	Terminated     int    `json:"terminated"`
	AttemptsDigest string `json:"attempts_digest"`
}
