package coordinator

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/internal/transcript"
)

// DecodeRecord decodes a park record (the bytes a rollout's park update
// returned, kept as they are in the checkpoint) and checks that it is
// self-consistent: one rollout and one attempt throughout, a receipt on any
// result.
func DecodeRecord(raw []byte) (rollout.ParkRecord, error) {
	var r rollout.ParkRecord
	if err := json.Unmarshal(raw, &r); err != nil {
		return rollout.ParkRecord{}, fmt.Errorf("decode park record: %w", err)
	}
	id := r.Input.RolloutID
	switch {
	case id == "":
		return rollout.ParkRecord{}, errors.New("park record names no rollout")
	case r.Boundary.RolloutID != id:
		return rollout.ParkRecord{}, fmt.Errorf("park record of %q holds the boundary of %q", id, r.Boundary.RolloutID)
	case r.Input.Attempt < 0 || r.Boundary.Attempt != r.Input.Attempt:
		return rollout.ParkRecord{}, fmt.Errorf("park record of %q: input attempt %d, boundary attempt %d", id, r.Input.Attempt, r.Boundary.Attempt)
	case r.Set != r.Input.Set:
		return rollout.ParkRecord{}, fmt.Errorf("park record of %q: set %q, input set %q", id, r.Set, r.Input.Set)
	}
	if res := r.Result; res != nil {
		if res.RolloutID != id || res.Receipt == nil || res.Receipt.RolloutID != id || res.Receipt.Attempt != res.Attempt || res.Receipt.SHA256 == "" {
			return rollout.ParkRecord{}, fmt.Errorf("park record of %q: its completed result has no receipt of its own", id)
		}
	}
	return r, nil
}

// checkRecord checks a decoded record against where it was found.
func checkRecord(r rollout.ParkRecord, checkpointID, set, rolloutID string) error {
	switch {
	case r.Input.RolloutID != rolloutID:
		return fmt.Errorf("record %q holds rollout %q", rolloutID, r.Input.RolloutID)
	case r.CheckpointID != checkpointID:
		return fmt.Errorf("record of %q is of checkpoint %q, not %q", rolloutID, r.CheckpointID, checkpointID)
	case r.Set != set:
		return fmt.Errorf("record of %q is of set %q, not %q", rolloutID, r.Set, set)
	}
	return nil
}

// references lists what a record needs from the transcript store:
// conversation heads (each walked to its root) and single blobs (the tool
// schema, a held result's verify details).
func references(r rollout.ParkRecord) (heads, blobs []transcript.Digest) {
	heads, blobs, _ = rollout.TranscriptRefs(r.Boundary, r.Result)
	return heads, blobs
}

// restoreKind classifies a record.
func restoreKind(r rollout.ParkRecord) string {
	switch {
	case r.Result != nil:
		return checkpoint.RestoreOfferAgain
	case !r.Boundary.Seeded || envs.EffectiveMode(r.Boundary.EnvMode) == envs.ModeRestartOnly:
		return checkpoint.RestoreStartOver
	default:
		return checkpoint.RestoreContinue
	}
}

// BuildRestoredInput turns a park record into the input of attempt of its
// rollout, held for checkpointID until every participant is installed:
// Resume is the record's boundary (no re-seed, no repeated model call: the
// pending answer and the cursor keep the same request ids), Completed its
// held result, and a continuation whose environment is restart-only starts
// over with no state. An env.url naming a server that moved (old URL → new
// URL in moved) names its new address. Every other field of the record's
// input is kept. It returns the input and its kind (checkpoint.Restore*).
func BuildRestoredInput(rec rollout.ParkRecord, checkpointID string, attempt int, moved map[string]string) (rollout.Input, string, error) {
	if attempt <= rec.Input.Attempt {
		return rollout.Input{}, "", fmt.Errorf("rollout %q: new attempt %d is not above the record's attempt %d", rec.Input.RolloutID, attempt, rec.Input.Attempt)
	}
	in := rec.Input
	in.Attempt, in.HoldFor = attempt, checkpointID
	in.Resume, in.Completed = nil, nil
	kind := restoreKind(rec)
	boundary := rec.Boundary
	switch kind {
	case checkpoint.RestoreOfferAgain:
		in.Completed = rec.Result
		if rec.Boundary.Seeded {
			in.Resume = &boundary
		}
	case checkpoint.RestoreContinue:
		in.Resume = &boundary
	}
	return RemapEnvURL(in, moved), kind, nil
}

// RemapEnvURL returns in with its env.url rewritten when the environment
// server it names has moved (old URL → new URL). An input without an
// env.url (the worker's default server) or with an unmoved one is returned
// unchanged.
func RemapEnvURL(in rollout.Input, moved map[string]string) rollout.Input {
	if to, ok := moved[in.Env.URL]; ok && in.Env.URL != "" {
		in.Env.URL = to
	}
	return in
}
