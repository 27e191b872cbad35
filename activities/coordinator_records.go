package activities

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/transcript"
)

// The coordinator reads park records (workflows.ParkRecord, JSON) through
// the views below: the workflows package imports this one, so the record
// type cannot be named here. Only the fields the coordinator checks are
// decoded; the record itself travels as the exact bytes the rollout
// returned.

// recordView is the part of a workflows.ParkRecord the coordinator reads.
type recordView struct {
	CheckpointID string       `json:"checkpoint_id"`
	Set          string       `json:"set"`
	Input        inputView    `json:"input"`
	Boundary     boundaryView `json:"boundary"`
	Phase        string       `json:"phase"`
	Result       *resultView  `json:"result"`
}

type inputView struct {
	RolloutID string `json:"rollout_id"`
	Set       string `json:"set"`
	Attempt   int    `json:"attempt"`
}

type boundaryView struct {
	RolloutID string            `json:"rollout_id"`
	Attempt   int               `json:"attempt"`
	Turn      int               `json:"turn"`
	Head      transcript.Digest `json:"head"`
	Tools     transcript.Digest `json:"tools"`
	EnvMode   envs.Mode         `json:"env_mode"`
	Seeded    bool              `json:"seeded"`
	Pending   *struct {
		Head transcript.Digest `json:"head"`
	} `json:"pending"`
}

type resultView struct {
	RolloutID string            `json:"rollout_id"`
	Attempt   int               `json:"attempt"`
	Head      transcript.Digest `json:"head"`
	Receipt   *struct {
		RolloutID string `json:"rollout_id"`
		Attempt   int    `json:"attempt"`
		SHA256    string `json:"sha256"`
	} `json:"receipt"`
}

// decodeRecord decodes a park record and checks that it is self-consistent:
// one rollout and one attempt throughout, a receipt on any result.
func decodeRecord(raw []byte) (recordView, error) {
	var r recordView
	if err := json.Unmarshal(raw, &r); err != nil {
		return recordView{}, fmt.Errorf("decode park record: %w", err)
	}
	id := r.Input.RolloutID
	switch {
	case id == "":
		return recordView{}, errors.New("park record names no rollout")
	case r.Boundary.RolloutID != id:
		return recordView{}, fmt.Errorf("park record of %q holds the boundary of %q", id, r.Boundary.RolloutID)
	case r.Input.Attempt < 0 || r.Boundary.Attempt != r.Input.Attempt:
		return recordView{}, fmt.Errorf("park record of %q: input attempt %d, boundary attempt %d", id, r.Input.Attempt, r.Boundary.Attempt)
	case r.Set != r.Input.Set:
		return recordView{}, fmt.Errorf("park record of %q: set %q, input set %q", id, r.Set, r.Input.Set)
	}
	if res := r.Result; res != nil {
		if res.RolloutID != id || res.Receipt == nil || res.Receipt.RolloutID != id || res.Receipt.Attempt != res.Attempt || res.Receipt.SHA256 == "" {
			return recordView{}, fmt.Errorf("park record of %q: its completed result has no receipt of its own", id)
		}
	}
	return r, nil
}

// checkRecord checks a decoded record against where it was found.
func checkRecord(r recordView, checkpointID, set, rolloutID string) error {
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
// schema).
func (r recordView) references() (heads, blobs []transcript.Digest) {
	add := func(list *[]transcript.Digest, d transcript.Digest) {
		if d != "" {
			*list = append(*list, d)
		}
	}
	add(&heads, r.Boundary.Head)
	if r.Boundary.Pending != nil {
		add(&heads, r.Boundary.Pending.Head)
	}
	if r.Result != nil {
		add(&heads, r.Result.Head)
	}
	add(&blobs, r.Boundary.Tools)
	return heads, blobs
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

// restoreKind classifies a record.
func (r recordView) restoreKind() string {
	switch {
	case r.Result != nil:
		return RestoreOfferAgain
	case !r.Boundary.Seeded || envs.EffectiveMode(r.Boundary.EnvMode) == envs.ModeRestartOnly:
		return RestoreStartOver
	default:
		return RestoreContinue
	}
}

// BuildRestoredInput turns a park record (workflows.ParkRecord JSON) into
// the input (workflows.RolloutInput JSON) of attempt of its rollout, held
// for checkpointID until every participant is installed: Resume is the
// record's boundary (no re-seed, no repeated model call: the pending answer
// and the cursor keep the same request ids), Completed its held result, and
// a continuation whose environment is restart-only starts over with no
// state. Every other field of the record's input is kept as it is. It
// returns the input and its kind (Restore*).
func BuildRestoredInput(raw []byte, checkpointID string, attempt int) (json.RawMessage, string, error) {
	rec, err := decodeRecord(raw)
	if err != nil {
		return nil, "", err
	}
	if attempt <= rec.Input.Attempt {
		return nil, "", fmt.Errorf("rollout %q: new attempt %d is not above the record's attempt %d", rec.Input.RolloutID, attempt, rec.Input.Attempt)
	}
	var full struct {
		Input    map[string]json.RawMessage `json:"input"`
		Boundary json.RawMessage            `json:"boundary"`
		Result   json.RawMessage            `json:"result"`
	}
	if err := json.Unmarshal(raw, &full); err != nil {
		return nil, "", fmt.Errorf("decode park record of %q: %w", rec.Input.RolloutID, err)
	}
	in := make(map[string]json.RawMessage, len(full.Input)+3)
	for k, v := range full.Input {
		in[k] = v
	}
	delete(in, "resume")
	delete(in, "completed")
	in["attempt"] = json.RawMessage(fmt.Sprint(attempt))
	hold, err := json.Marshal(checkpointID)
	if err != nil {
		return nil, "", err
	}
	in["hold_for"] = hold
	kind := rec.restoreKind()
	switch kind {
	case RestoreOfferAgain:
		in["completed"] = full.Result
		if rec.Boundary.Seeded {
			in["resume"] = full.Boundary
		}
	case RestoreContinue:
		in["resume"] = full.Boundary
	}
	out, err := json.Marshal(in) // sorted keys: the same record gives the same bytes
	if err != nil {
		return nil, "", fmt.Errorf("encode restored input of %q: %w", rec.Input.RolloutID, err)
	}
	return out, kind, nil
}

// RemapEnvURL rewrites a rollout input's env.url when the environment server
// it names has moved (old URL → new URL). An input without an env.url (the
// worker's default server) or with an unmoved one is returned unchanged.
func RemapEnvURL(input json.RawMessage, moved map[string]string) (json.RawMessage, error) {
	if len(moved) == 0 {
		return input, nil
	}
	var in map[string]json.RawMessage
	if err := json.Unmarshal(input, &in); err != nil {
		return nil, fmt.Errorf("decode restored input: %w", err)
	}
	var env map[string]json.RawMessage
	if raw, ok := in["env"]; ok {
		if err := json.Unmarshal(raw, &env); err != nil {
			return nil, fmt.Errorf("decode restored input env: %w", err)
		}
	}
	var url string
	if raw, ok := env["url"]; ok {
		if err := json.Unmarshal(raw, &url); err != nil {
			return nil, fmt.Errorf("decode restored input env.url: %w", err)
		}
	}
	to, ok := moved[url]
	if url == "" || !ok {
		return input, nil
	}
	env["url"], _ = json.Marshal(to)
	in["env"], _ = json.Marshal(env)
	return json.Marshal(in)
}
