package checkpoint

import (
	"fmt"
	"path/filepath"
	"regexp"
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

// nameRE is the shape of checkpoint ids and set names: each is a path
// component of the checkpoint directory or part of a visibility query, so
// neither may hold a separator, a quote or "..".
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ValidateName checks a checkpoint id or set name.
func ValidateName(what, name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%s %q: want 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit", what, name)
	}
	return nil
}

// CheckpointDir is the directory of checkpoint id under root.
func CheckpointDir(root, checkpointID string) string { return filepath.Join(root, checkpointID) }

// ParticipantLocation is where participant n commits its artifact.
func ParticipantLocation(dir string, n int) string {
	return filepath.Join(dir, ParticipantsDir, fmt.Sprint(n))
}
