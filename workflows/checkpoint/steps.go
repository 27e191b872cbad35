package checkpoint

import "time"

// The coordinator steps: the activities the Checkpoint and Restore workflows
// call. Each works on a whole set (many rollouts, fanned out with bounded
// concurrency and heartbeats); what it returns is counts and digests, while
// membership lists and records go to files under the checkpoint directory.

// Coordinator activity names: the steps of the Checkpoint and Restore
// workflows. Each one works on a whole set (many rollouts, fanned out with
// bounded concurrency and heartbeats); what it returns is counts and digests,
// while membership lists and records go to files under the checkpoint
// directory.
const (
	PrepareParticipantsName = "PrepareParticipants"
	FreezeMembershipName    = "FreezeMembership"
	ParkMembersName         = "ParkMembers"
	CommitCheckpointName    = "CommitCheckpoint"
	ResumeParticipantsName  = "ResumeParticipants"
	ResumeRolloutsName      = "ResumeRollouts"
	AbortCheckpointName     = "AbortCheckpoint"
	RetainCheckpointsName   = "RetainCheckpoints"
	ValidateCheckpointName  = "ValidateCheckpoint"
	PlanAttemptsName        = "PlanAttempts"
	FenceSetName            = "FenceSet"
	RestoreParticipantsName = "RestoreParticipants"
	TerminateStaleName      = "TerminateStale"
	StartRestoredName       = "StartRestored"
)

// Application error types of the coordinator activities (non-retryable).
const (
	// ErrCheckpointInvalid: the checkpoint on disk is missing, torn, corrupt
	// or does not match the request; nothing was touched.
	ErrCheckpointInvalid = "CheckpointInvalid"
	// ErrMemberMissing: a member of the set has no workflow.
	ErrMemberMissing = "MemberMissing"
	// ErrMemberRefused: a rollout refused the park or resume (its update
	// validator rejected it, e.g. it is held for another checkpoint).
	ErrMemberRefused = "MemberRefused"
	// ErrParticipantRefused: an environment server refused a control call in
	// a way a retry cannot change.
	ErrParticipantRefused = "ParticipantRefused"
	// ErrParticipantUnreachable: nothing listens at an environment server's
	// address (connection refused or no route, several tries): its process
	// is gone, and with it what it had prepared.
	ErrParticipantUnreachable = "ParticipantUnreachable"
	// ErrAttemptConflict: a run of a higher attempt than the one a restore
	// would start already exists.
	ErrAttemptConflict = "AttemptConflict"
	// ErrParticipantHung: an environment server stopped answering (its
	// health route too) while a prepare or a commit waited on it: hung, or
	// cut off by the network. Waiting longer only holds the set parked, so
	// the checkpoint aborts.
	ErrParticipantHung = "ParticipantHung"
	// ErrNotInstalled: an environment server did not install the attempts
	// of a restore's plan (it refused the restore id, or answered other
	// attempts than planned): a restore never reports an attempt installed
	// that a participant did not install.
	ErrNotInstalled = "NotInstalled"
)

// PrepareParticipantsInput closes admission at every environment server.
type PrepareParticipantsInput struct {
	CheckpointID string    `json:"checkpoint_id"`
	Set          string    `json:"set"`
	Root         string    `json:"root"`
	Participants []string  `json:"participants"`
	Deadline     time.Time `json:"deadline"`
	// Lease is how long a prepared server holds the cut with no further
	// operation of this checkpoint before it resumes by itself (the
	// prepare's lease_ms); zero: the participant's default.
	Lease time.Duration `json:"lease,omitempty"`
}

// PrepareParticipantsResult counts the prepared servers and the sessions
// they reported (the reports are staged in staging/participants.json).
type PrepareParticipantsResult struct {
	Participants int    `json:"participants"`
	Sessions     int    `json:"sessions"`
	Digest       string `json:"digest"`
}

// FreezeMembershipInput freezes the exact membership of a checkpoint.
type FreezeMembershipInput struct {
	CheckpointID string `json:"checkpoint_id"`
	Set          string `json:"set"`
	Root         string `json:"root"`
}

// FreezeMembershipResult counts the members (listed in staging/members.json).
type FreezeMembershipResult struct {
	Members int `json:"members"`
	// FromVisibility are the running rollouts of the set Temporal listed;
	// FromParticipants the ones only an environment server reported
	// (visibility lags behind a rollout that just started).
	FromVisibility   int `json:"from_visibility"`
	FromParticipants int `json:"from_participants"`
	// FromAdmission are the rollouts the set's admission had started that
	// neither listed; the admission itself is held (it starts no more)
	// until the checkpoint resumes or aborts.
	FromAdmission int `json:"from_admission,omitempty"`
	// Foreign are sessions an environment server reported for rollouts of
	// another set: not members.
	Foreign int    `json:"foreign"`
	Digest  string `json:"digest"`
}

// ParkMembersInput parks every member of a checkpoint.
type ParkMembersInput struct {
	CheckpointID string    `json:"checkpoint_id"`
	Set          string    `json:"set"`
	Root         string    `json:"root"`
	Deadline     time.Time `json:"deadline"`
	// LeaseUntil is the parks' lease (rollout.ParkRequest.LeaseUntil);
	// zero holds them until resumed.
	LeaseUntil time.Time `json:"lease_until,omitzero"`
}

// ParkMembersResult counts the parks; the records are staged in
// staging/records.jsonl and the parked rollouts in staging/parked.json.
type ParkMembersResult struct {
	Members          int `json:"members"`
	Parked           int `json:"parked"`
	CompletedUnacked int `json:"completed_unacked"`
	// Acknowledged counts parked members holding a result the set's
	// acknowledgement ledger had recorded as acknowledged before the
	// checkpoint began parking (not yet released): they are in no record,
	// as a rollout that completed before the cut is not.
	Acknowledged  int    `json:"acknowledged,omitempty"`
	Closed        int    `json:"closed"`
	RecordsDigest string `json:"records_digest"`
}

// CommitCheckpointInput writes a checkpoint whose cut is frozen.
type CommitCheckpointInput struct {
	CheckpointID string   `json:"checkpoint_id"`
	Set          string   `json:"set"`
	Root         string   `json:"root"`
	Participants []string `json:"participants"`
	// Deadline, LeaseUntil and LeaseGrace are the parks' (ParkMembersInput):
	// a commit still running half a grace before LeaseUntil renews the
	// parks' lease every half grace. A zero LeaseUntil renews nothing.
	Deadline   time.Time     `json:"deadline,omitzero"`
	LeaseUntil time.Time     `json:"lease_until,omitzero"`
	LeaseGrace time.Duration `json:"lease_grace,omitempty"`
}

// CommitCheckpointResult describes the committed checkpoint.
type CommitCheckpointResult struct {
	Dir              string `json:"dir"`
	ManifestDigest   string `json:"manifest_digest"`
	Bytes            int64  `json:"bytes"`
	Members          int    `json:"members"`
	Parked           int    `json:"parked"`
	CompletedUnacked int    `json:"completed_unacked"`
	Transcripts      int    `json:"transcripts"`
	// Queued counts the rollouts the set's admission had not started,
	// recorded as not started.
	Queued int `json:"queued,omitempty"`
}

// ResumeParticipantsInput resumes environment servers.
type ResumeParticipantsInput struct {
	CheckpointID string   `json:"checkpoint_id"`
	Participants []string `json:"participants"`
}

// ResumeParticipantsResult counts the resumed servers.
type ResumeParticipantsResult struct {
	Resumed int `json:"resumed"`
}

// ResumeRolloutsInput releases the rollouts of a list file (ListParked,
// ListMembers or ListStarted) held for a checkpoint.
type ResumeRolloutsInput struct {
	CheckpointID string `json:"checkpoint_id"`
	Root         string `json:"root"`
	List         string `json:"list"`
}

// ResumeRolloutsResult counts the releases.
type ResumeRolloutsResult struct {
	Resumed int `json:"resumed"`
	// Gone are rollouts whose workflow closed or no longer exists: nothing
	// to release.
	Gone int `json:"gone"`
}

// AbortCheckpointInput cleans up after a failed checkpoint.
type AbortCheckpointInput struct {
	CheckpointID string   `json:"checkpoint_id"`
	Root         string   `json:"root"`
	Participants []string `json:"participants"`
}

// AbortCheckpointResult counts what the abort resumed.
type AbortCheckpointResult struct {
	Participants    int  `json:"participants"`
	Rollouts        int  `json:"rollouts"`
	ManifestRemoved bool `json:"manifest_removed"`
	// Unreachable are the participants nothing listened at: dead servers
	// hold no admission, so they are reported, not waited for.
	Unreachable []string `json:"unreachable,omitempty"`
}

// Names of the activities that end a restore (the Checkpoint workflow's
// resume activities do not know restore ids).
const (
	ResumeRestoredParticipantsName = "ResumeRestoredParticipants"
	ResumeRestoredRolloutsName     = "ResumeRestoredRollouts"
)

// ValidateCheckpointInput names a checkpoint to restore.
type ValidateCheckpointInput struct {
	CheckpointID string   `json:"checkpoint_id"`
	Root         string   `json:"root"`
	Participants []string `json:"participants"`
}

// ValidateCheckpointResult describes a checkpoint that validated.
type ValidateCheckpointResult struct {
	Set            string `json:"set"`
	ManifestDigest string `json:"manifest_digest"`
	Records        int    `json:"records"`
	Continue       int    `json:"continue"`
	StartOver      int    `json:"start_over"`
	OfferAgain     int    `json:"offer_again"`
	Transcripts    int    `json:"transcripts"`
}

// PlanAttemptsInput computes (or reads back) a restore's attempt map.
type PlanAttemptsInput struct {
	CheckpointID string `json:"checkpoint_id"`
	// RestoreID names this restore (empty: the checkpoint id).
	RestoreID    string   `json:"restore_id,omitempty"`
	Root         string   `json:"root"`
	Participants []string `json:"participants"`
}

// PlanAttemptsResult summarizes the attempt map in
// restore/<restore_id>/attempts.json.
type PlanAttemptsResult struct {
	Rollouts int `json:"rollouts"`
	Start    int `json:"start"`
	// Fence counts the set's rollouts started after the cut.
	Fence  int    `json:"fence"`
	Reused bool   `json:"reused"`
	Digest string `json:"digest"`
}

// FenceSetInput writes the set's fence record for a restore
// (set.SetFence) before it starts or resumes anything.
type FenceSetInput struct {
	CheckpointID string `json:"checkpoint_id"`
	// RestoreID names this restore (empty: the checkpoint id).
	RestoreID string `json:"restore_id,omitempty"`
	Set       string `json:"set"`
}

// FenceSetResult says when the fence took effect: every run of the set
// started no later than FencedAt is of the world the restore replaces.
type FenceSetResult struct {
	FencedAt time.Time `json:"fenced_at"`
	// Restores counts the windows the record keeps; Reused says a re-run
	// found this restore's fence already written.
	Restores int  `json:"restores"`
	Reused   bool `json:"reused"`
}

// RestoreParticipantsInput installs the checkpoint at every participant.
type RestoreParticipantsInput struct {
	CheckpointID string `json:"checkpoint_id"`
	// RestoreID names this restore (empty: the checkpoint id).
	RestoreID    string   `json:"restore_id,omitempty"`
	Root         string   `json:"root"`
	Participants []string `json:"participants"`
	// Indexes, when set, restores only these participants (a scoped
	// recovery installs the dead server's artifact on its replacement and
	// leaves the healthy servers alone); Participants still lists every
	// one in the checkpoint's order.
	Indexes []int `json:"indexes,omitempty"`
}

// RestoreParticipantsResult counts the installed sessions.
type RestoreParticipantsResult struct {
	Participants int `json:"participants"`
	Restored     int `json:"restored"`
	Restarted    int `json:"restarted"`
	// Fenced counts rollouts a server only fenced (absent from its cut);
	// Untouched its sessions of other sets, left as they were.
	Fenced    int `json:"fenced"`
	Untouched int `json:"untouched"`
	// Replayed are sessions of replay environments rebuilt by replay;
	// Diverged those whose replay did not rebuild them (they start over).
	Replayed int `json:"replayed,omitempty"`
	Diverged int `json:"diverged,omitempty"`
	// AlreadyResumed counts participants that had restored and resumed in
	// an earlier run of the same restore.
	AlreadyResumed int `json:"already_resumed"`
}

// TerminateStaleInput ends the runs a restore replaces.
type TerminateStaleInput struct {
	CheckpointID string `json:"checkpoint_id"`
	// RestoreID names this restore (empty: the checkpoint id).
	RestoreID string `json:"restore_id,omitempty"`
	Root      string `json:"root"`
}

// TerminateStaleResult counts the terminated runs.
type TerminateStaleResult struct {
	Terminated int `json:"terminated"`
}

// StartRestoredInput starts the new attempts.
type StartRestoredInput struct {
	CheckpointID string `json:"checkpoint_id"`
	// RestoreID names this restore (empty: the checkpoint id).
	RestoreID    string   `json:"restore_id,omitempty"`
	Root         string   `json:"root"`
	Participants []string `json:"participants"`
	TaskQueue    string   `json:"task_queue,omitempty"`
}

// StartRestoredResult counts the new attempts by kind. The kind counts
// follow from the checkpoint; Started and Existing tell what this run did.
type StartRestoredResult struct {
	Continue   int `json:"continue"`
	StartOver  int `json:"start_over"`
	OfferAgain int `json:"offer_again"`
	Started    int `json:"started"`
	Existing   int `json:"existing"`
	// Queued are the rollouts the checkpoint recorded as not started, now
	// queued at the set's new admission (held until the restore resumes).
	Queued int `json:"queued,omitempty"`
	// Replayed are the Continue rollouts of replay environments, whose
	// session a participant rebuilt by replay; Diverged the StartOver ones
	// whose replay did not rebuild it.
	Replayed int `json:"replayed,omitempty"`
	Diverged int `json:"diverged,omitempty"`
	// ForgottenAcks counts receipts of the restored rollouts that the
	// set's acknowledgement ledger had recorded before the restore's fence
	// and not released: the rolled-back world's, dropped before the runs
	// started.
	ForgottenAcks int `json:"forgotten_acks,omitempty"`
	// FinishedMeanwhile counts, for a scoped recovery, the planned
	// rollouts not started again because their old run completed before
	// the recovery ended it (a server declared dead that was only slow
	// answered it): their one result stands.
	FinishedMeanwhile int `json:"finished_meanwhile,omitempty"`
}

// ResumeRestoredParticipantsInput ends a restore's control session at
// every environment server.
type ResumeRestoredParticipantsInput struct {
	CheckpointID string `json:"checkpoint_id"`
	// RestoreID names this restore (empty: the checkpoint id).
	RestoreID    string   `json:"restore_id,omitempty"`
	Participants []string `json:"participants"`
}

// ResumeRestoredRolloutsInput releases the runs a restore started.
type ResumeRestoredRolloutsInput struct {
	CheckpointID string `json:"checkpoint_id"`
	// RestoreID names this restore (empty: the checkpoint id).
	RestoreID string `json:"restore_id,omitempty"`
	Root      string `json:"root"`
}

// Kinds of restored rollouts.
const (
	// RestoreContinue: the new attempt continues from the record's boundary.
	RestoreContinue = "continue"
	// RestoreStartOver: the new attempt starts from its seed with no state
	// (restart-only environment, or never seeded).
	RestoreStartOver = "start_over"
	// RestoreOfferAgain: the new attempt offers the completed,
	// unacknowledged result again.
	RestoreOfferAgain = "offer_again"
)

// PlanRecoveryName is the first step of a RecoverServer.
const PlanRecoveryName = "PlanRecovery"

// PlanRecoveryInput finds the rollouts a dead environment server held and
// plans their new attempts on its replacement (persisted as the attempt map
// of restore RestoreID of the checkpoint, so a re-run reuses it).
type PlanRecoveryInput struct {
	Set          string `json:"set"`
	Server       string `json:"server"`
	Replacement  string `json:"replacement"`
	CheckpointID string `json:"checkpoint_id,omitempty"`
	Root         string `json:"root"`
	RestoreID    string `json:"restore_id"`
}

// PlanRecoveryResult names the checkpoint chosen and counts the plan.
type PlanRecoveryResult struct {
	CheckpointID string `json:"checkpoint_id"`
	// Participant is the dead server's index in the checkpoint;
	// Participants the checkpoint's list with the replacement in its place.
	Participant  int      `json:"participant"`
	Participants []string `json:"participants"`
	Affected     int      `json:"affected"`
	Continue     int      `json:"continue"`
	StartOver    int      `json:"start_over"`
	Untouched    int      `json:"untouched"`
	Reused       bool     `json:"reused"`
	Digest       string   `json:"digest"`
}

// RetainCheckpointsInput records a committed checkpoint's tag (TAG.json)
// and, when Keep > 0, applies the set's retention under Root: the Keep
// newest committed checkpoints of Set and every pinned one stay, the
// others are deleted.
type RetainCheckpointsInput struct {
	CheckpointID string `json:"checkpoint_id"`
	Set          string `json:"set"`
	Root         string `json:"root"`
	Tag          string `json:"tag,omitempty"`
	Keep         int    `json:"keep,omitempty"`
}

// RetainCheckpointsResult says what retention kept and deleted.
type RetainCheckpointsResult struct {
	Kept       []string `json:"kept,omitempty"`
	Deleted    []string `json:"deleted,omitempty"`
	KeptBytes  int64    `json:"kept_bytes"`
	FreedBytes int64    `json:"freed_bytes"`
}
