// Package checkpoint holds the coordinator workflows of a set and their
// contract: Checkpoint (a coordinated cut of every participant), Restore
// (the whole set back to a committed cut, as new attempts) and
// RecoverServer (the rollouts of one dead environment server moved to a
// replacement). The steps they run are activities (package
// activities/coordinator) named in steps.go; what a checkpoint directory
// holds is in layout.go. No I/O here.
package checkpoint

import (
	"fmt"
	"strings"
	"time"
)

// Workflow type names of the coordinator workflows.
const (
	CheckpointWorkflowName = "Checkpoint"
	RestoreWorkflowName    = "Restore"
)

// ControlQueueSuffix makes the control plane's task queue of a rollout
// task queue.
const ControlQueueSuffix = "-control"

// ControlTaskQueue is the task queue of the Checkpoint and Restore
// workflows and their coordinator activities beside the rollouts'
// taskQueue: a worker polls it with pollers and slots of its own, so a cut
// never queues behind rollout tasks. The coordinator activities run there
// too (an activity's task queue defaults to its workflow's).
func ControlTaskQueue(taskQueue string) string { return taskQueue + ControlQueueSuffix }

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

// CleanupFailed is in the message of an aborted checkpoint whose abort
// itself failed: participants or rollouts may still be parked, and an
// operator resumes them (`starter resume`). Without it, the abort released
// everything it could reach and there is nothing to resume.
const CleanupFailed = "CLEANUP FAILED"

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
	// LeaseGrace (a Go duration; empty: DefaultLeaseGrace) is how long past
	// deadline+settle a parked rollout or a prepared environment server
	// waits for this checkpoint's resume before it resumes by itself, so a
	// checkpoint whose coordinator vanished holds the set for a bounded
	// time. A checkpoint that stays paused gives its rollouts no lease:
	// they are held until a resume or a restore.
	LeaseGrace string `json:"lease_grace,omitempty"`
	// Scheduled takes the checkpoint id from the workflow ID instead of
	// CheckpointID: a Temporal Schedule starts its action's workflow ID
	// with the fire time appended ("checkpoint/<prefix>-<RFC 3339 time>"),
	// so each fire is a checkpoint of its own (ScheduledCheckpointID).
	Scheduled bool `json:"scheduled,omitempty"`
	// Tag is the trainer step or policy version the checkpoint belongs to,
	// recorded beside its manifest (TAG.json) after the commit.
	Tag string `json:"tag,omitempty"`
	// Keep > 0 applies the set's retention under Root after the commit:
	// the Keep newest committed checkpoints of the set and every pinned
	// one stay, the others are deleted.
	Keep int `json:"keep,omitempty"`
}

// MaxTagLen bounds a checkpoint's tag.
const MaxTagLen = 128

// ScheduledCheckpointID is the checkpoint id of a Checkpoint run whose
// workflow ID is workflowID: the ID without "checkpoint/" and without the
// colons of the fire time a schedule appends
// ("checkpoint/every-s1-2026-01-02T15:04:05Z" is checkpoint
// "every-s1-2026-01-02T150405Z").
func ScheduledCheckpointID(workflowID string) (string, error) {
	id, ok := strings.CutPrefix(workflowID, "checkpoint/")
	if !ok {
		return "", fmt.Errorf("workflow ID %q: a scheduled checkpoint's workflow ID starts with checkpoint/", workflowID)
	}
	id = strings.ReplaceAll(id, ":", "")
	if err := ValidateName("checkpoint id of workflow ID "+workflowID, id); err != nil {
		return "", err
	}
	return id, nil
}

// fireTimeLayout is a schedule's fire time as a scheduled checkpoint's id
// ends with it: RFC 3339 in UTC, without the colons.
const fireTimeLayout = "2006-01-02T150405Z"

// ScheduledCheckpointWorkflowID is ScheduledCheckpointID backwards: the
// workflow ID of the Checkpoint run a schedule started for checkpointID,
// with the colons of its fire time back ("every-s1-2026-01-02T150405Z" ran
// as "checkpoint/every-s1-2026-01-02T15:04:05Z"); false when the id does not
// end with a fire time.
func ScheduledCheckpointWorkflowID(checkpointID string) (string, bool) {
	n := len(fireTimeLayout)
	if len(checkpointID) <= n || checkpointID[len(checkpointID)-n-1] != '-' {
		return "", false
	}
	at, err := time.Parse(fireTimeLayout, checkpointID[len(checkpointID)-n:])
	if err != nil {
		return "", false
	}
	return CheckpointWorkflowID(checkpointID[:len(checkpointID)-n] + at.Format(time.RFC3339)), true
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
	Closed int `json:"closed"`
	// Queued are rollouts the set's admission had not started: recorded
	// as not started, in submission order.
	Queued         int    `json:"queued,omitempty"`
	Bytes          int64  `json:"bytes"`
	ManifestDigest string `json:"manifest_digest"`
	Resumed        bool   `json:"resumed"`
	// CutMillis is the time from the start to the last park; TotalMillis to
	// the end (workflow time).
	CutMillis   int64 `json:"cut_ms"`
	TotalMillis int64 `json:"total_ms"`
	// Tag is the input's tag; Retention what the retention after the commit
	// kept and deleted (nil when none ran), RetentionError why it failed
	// (the checkpoint is committed all the same).
	Tag            string                   `json:"tag,omitempty"`
	Retention      *RetainCheckpointsResult `json:"retention,omitempty"`
	RetentionError string                   `json:"retention_error,omitempty"`
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
	OfferedAgain int `json:"offered_again"`
	// Queued are the rollouts the checkpoint recorded as not started,
	// queued again in order at the set's new admission.
	Queued int `json:"queued,omitempty"`
	// Replayed are the Restored rollouts of replay environments, whose
	// sessions were rebuilt by replay; ReplayDiverged the StartedOver ones
	// whose replay diverged.
	Replayed       int    `json:"replayed,omitempty"`
	ReplayDiverged int    `json:"replay_diverged,omitempty"`
	Started        int    `json:"started"`
	Terminated     int    `json:"terminated"`
	AttemptsDigest string `json:"attempts_digest"`
}

// RecoverServerWorkflowName is the workflow type of a scoped recovery.
const RecoverServerWorkflowName = "RecoverServer"

// QueryRecoverStatus answers a RecoverServer run's RecoverStatus.
const QueryRecoverStatus = "status"

// RecoverServerWorkflowID is the workflow ID of the recovery of set from
// the death of the environment server at serverURL:
// "recover/<set>/<short digest of the URL>". One ID per (set, server), so a
// repeated request finds the first instead of starting a second.
func RecoverServerWorkflowID(set, serverURL string) string {
	return "recover/" + set + "/" + ServerDigest(serverURL)
}

// RecoverServerInput starts a RecoverServer: the environment server at
// Server died; the rollouts of Set whose sessions lived there go back to
// their boundary in a committed checkpoint (or start over from their seed)
// as a new attempt on Replacement, while every other rollout runs on.
type RecoverServerInput struct {
	Set string `json:"set"`
	// Server is the dead server's base URL, as the checkpoint and the
	// rollouts' env.url name it.
	Server string `json:"server"`
	// Replacement is the base URL of a fresh environment server started
	// with the dead one's name (its --name), idle.
	Replacement string `json:"replacement"`
	// CheckpointID is the checkpoint to go back to; empty: the newest
	// committed checkpoint of the set.
	CheckpointID string `json:"checkpoint_id,omitempty"`
	Root         string `json:"root"`
	// RequestID names this recovery (empty: one derived from the server
	// URL); it is the restore id the environment server and the
	// checkpoint directory know it by.
	RequestID string `json:"request_id,omitempty"`
	// TaskQueue the recovered rollouts run on; empty means rollout.TaskQueue.
	TaskQueue string `json:"task_queue,omitempty"`
}

// RecoverServerResult counts what a recovery did.
type RecoverServerResult struct {
	CheckpointID string `json:"checkpoint_id"`
	RestoreID    string `json:"restore_id"`
	// Participant is the dead server's index in the checkpoint.
	Participant int `json:"participant"`
	// Affected are the rollouts moved to the replacement: Continue from
	// their boundary, StartOver from their seed (restart-only, or not in
	// the checkpoint at all).
	Affected  int `json:"affected"`
	Continue  int `json:"continue"`
	StartOver int `json:"start_over"`
	// Replayed are the Continue rollouts whose replay environment's session
	// the replacement rebuilt by replay; ReplayDiverged the StartOver ones
	// whose replay diverged. Continue and StartOver are the plan's until
	// the new attempts start, then what they started as.
	Replayed       int `json:"replayed,omitempty"`
	ReplayDiverged int `json:"replay_diverged,omitempty"`
	Terminated     int `json:"terminated"`
	Started        int `json:"started"`
	// Untouched counts the set's running rollouts left as they were.
	Untouched int `json:"untouched"`
}

// RecoverStatus answers QueryRecoverStatus.
type RecoverStatus struct {
	Phase  string              `json:"phase"`
	Detail string              `json:"detail"`
	Result RecoverServerResult `json:"result"`
}
