package checkpoint

import (
	"fmt"
	"path/filepath"

	"github.com/turnstile-rl/turnstile/internal/location"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
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
	// TagName is a checkpoint's tag (Tag JSON), written beside the aggregate
	// manifest when the checkpoint was asked for with a tag or a retention.
	TagName = "TAG.json"
	// PinName marks a checkpoint the trainer pinned (Tag JSON): retention
	// never deletes it.
	PinName = "PIN.json"
	// StagingDir holds the checkpoint's working files (reports, membership,
	// park records); they are not part of the committed checkpoint.
	StagingDir = "staging"
	// RestoreDir holds a restore's working files, attempts.json first.
	RestoreDir = "restore"

	SectionAgents      = "agents"      // ParkRecord JSON keyed by rollout id
	SectionTranscripts = "transcripts" // transcript blobs keyed by digest
	// SectionQueued holds the rollouts the set's admission had not started
	// at the cut: rollout.Input JSON keyed by submission index (nine
	// digits), in submission order. Only a set with an admission has it.
	SectionQueued = "queued"

	// Lists of rollouts that ResumeRollouts reads, relative to the
	// checkpoint directory.
	ListParked  = StagingDir + "/parked.json"
	ListMembers = StagingDir + "/members.json"
	ListStarted = RestoreDir + "/started.json"

	StagingParticipants = StagingDir + "/participants.json"
	// StagingAdmission is the set's admission as the checkpoint held it
	// (set.AdmissionSnapshot); absent for a set without one.
	StagingAdmission = StagingDir + "/admission.json"
	StagingRecords   = StagingDir + "/records.jsonl"
	RestoreAttempts  = RestoreDir + "/attempts.json"
	// RestoreReplays is a restore's record of what participant <n> did with
	// its replay sessions (restore/<restore_id>/replays-<n>.json): rebuilt
	// by replay, or started over with why.
	RestoreReplays = RestoreDir + "/replays-<n>.json"
)

// Tag is what TAG.json and PIN.json hold: the checkpoint, its set and the
// trainer step or policy version it belongs to.
type Tag struct {
	CheckpointID string `json:"checkpoint_id"`
	Set          string `json:"set"`
	Tag          string `json:"tag,omitempty"`
}

// MaxIDLen bounds checkpoint and restore ids: each is a path component of
// the checkpoint directory and part of a workflow ID.
const MaxIDLen = 128

// ValidateName checks a checkpoint or restore id (what names which).
func ValidateName(what, name string) error { return rollout.ValidateName(what, name, MaxIDLen) }

// ValidateRoot checks a checkpoint root: an absolute directory, or a
// storage URL (file:///…, s3://bucket/prefix?…; see package storage).
// Relative paths are refused: the worker resolving one may run elsewhere.
func ValidateRoot(root string) error {
	if location.IsURL(root) {
		if _, err := location.Parse(root); err != nil {
			return fmt.Errorf("root: %w", err)
		}
		return nil
	}
	if !filepath.IsAbs(root) {
		return fmt.Errorf("root %q is not an absolute path (nor a storage URL)", root)
	}
	return nil
}

// CheckpointDir is the location of checkpoint id under root: a directory,
// or a longer key prefix of the same object store.
func CheckpointDir(root, checkpointID string) string { return joinLocation(root, checkpointID) }

// ParticipantLocation is where participant n commits its artifact.
func ParticipantLocation(dir string, n int) string {
	return joinLocation(dir, ParticipantsDir, fmt.Sprint(n))
}

// joinLocation appends elems to a location; callers have validated both
// (ValidateRoot, ValidateName), so a URL that does not join is "".
func joinLocation(loc string, elems ...string) string {
	if !location.IsURL(loc) {
		return filepath.Join(append([]string{loc}, elems...)...)
	}
	joined, err := location.Join(loc, elems...)
	if err != nil {
		return ""
	}
	return joined
}

// cleanRoot is filepath.Clean of a directory; a URL is left as it is
// (location.Join cleans it).
func cleanRoot(root string) string {
	if location.IsURL(root) {
		return root
	}
	return filepath.Clean(root)
}
