package checkpoint

import (
	"fmt"
	"path/filepath"

	"github.com/turnstile-rl/turnstile/rollout"
)

// Layout of a checkpoint directory <root>/<checkpoint_id>/.
const (
	// AggregateManifestName is written last: a directory without it is not
	// a checkpoint.
	AggregateManifestName = "MANIFEST.json"
	// AggregateSchemaVersion is the only aggregate manifest schema read.
	AggregateSchemaVersion = 1
	// AgentsDir holds the agents artifact (package artifact) with the
	// sections SectionAgents and SectionTranscripts.
	AgentsDir = "agents"
	// ParticipantsDir holds one environment server artifact per participant,
	// in participants/<n>/ where n is its index in the input.
	ParticipantsDir = "participants"
	// StagingDir holds the checkpoint's working files (reports, membership,
	// park records); they are not part of the committed checkpoint.
	StagingDir = "staging"
	// RestoreDir holds a restore's working files, attempts.json first.
	RestoreDir = "restore"

	SectionAgents      = "agents"      // ParkRecord JSON keyed by rollout id
	SectionTranscripts = "transcripts" // transcript blobs keyed by digest

	// Lists of rollouts that ResumeRollouts reads, relative to the
	// checkpoint directory.
	ListParked  = StagingDir + "/parked.json"
	ListMembers = StagingDir + "/members.json"
	ListStarted = RestoreDir + "/started.json"

	StagingParticipants = StagingDir + "/participants.json"
	StagingRecords      = StagingDir + "/records.jsonl"
	RestoreAttempts     = RestoreDir + "/attempts.json"
)

// MaxIDLen bounds checkpoint and restore ids: each is a path component of
// the checkpoint directory and part of a workflow ID.
const MaxIDLen = 128

// ValidateName checks a checkpoint or restore id (what names which).
func ValidateName(what, name string) error { return rollout.ValidateName(what, name, MaxIDLen) }

// CheckpointDir is the directory of checkpoint id under root.
func CheckpointDir(root, checkpointID string) string { return filepath.Join(root, checkpointID) }

// ParticipantLocation is where participant n commits its artifact.
func ParticipantLocation(dir string, n int) string {
	return filepath.Join(dir, ParticipantsDir, fmt.Sprint(n))
}
