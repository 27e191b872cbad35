package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"

	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/internal/fanout"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"

	"github.com/turnstile-rl/turnstile/internal/artifact"
	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/participants/cutfile"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// loadedCheckpoint is a validated checkpoint, read whole.
type loadedCheckpoint struct {
	dir      storage.Store
	set      artifact.Settings
	manifest AggregateManifest
	records  map[string][]byte // rollout id → park record
	parked   map[string]rollout.ParkRecord
	blobs    map[transcript.Digest][]byte
	// sessions are the unfinished sessions of every participant, by rollout:
	// the highest attempt saved.
	sessions map[string]int
	// fences are the participants' saved fences, by rollout: the highest.
	fences map[string]int
	// holders are the participants (indexes) holding an unfinished
	// session of each rollout.
	holders map[string][]int
	// retired are the rollouts some participant held a finished (verified)
	// session of at the cut: they ran before it.
	retired map[string]bool
	// queued are the rollouts the set's admission had not started at the
	// cut, in submission order (none without an admission).
	queued []queuedRollout
}

// ValidateCheckpoint reads and checks the whole checkpoint before a restore
// touches anything: the aggregate manifest, the agents artifact, every
// participant's artifact, every record (it decodes and names a rollout of
// the set) and every transcript blob a record references. It also checks,
// read-only, that each participant answers as the server it replaces.
func (c *Coordinator) ValidateCheckpoint(ctx context.Context, in checkpoint.ValidateCheckpointInput) (checkpoint.ValidateCheckpointResult, error) {
	lc, err := c.loadCheckpoint(ctx, in.Root, in.CheckpointID, in.Participants)
	if err != nil {
		return checkpoint.ValidateCheckpointResult{}, err
	}
	if err := c.checkParticipantsLive(ctx, lc, in.Participants); err != nil {
		return checkpoint.ValidateCheckpointResult{}, err
	}
	res := checkpoint.ValidateCheckpointResult{Set: lc.manifest.Set, ManifestDigest: lc.manifest.Digest, Records: len(lc.records), Transcripts: len(lc.blobs)}
	for _, v := range lc.parked {
		switch restoreKind(v) {
		case checkpoint.RestoreContinue:
			res.Continue++
		case checkpoint.RestoreStartOver:
			res.StartOver++
		case checkpoint.RestoreOfferAgain:
			res.OfferAgain++
		}
	}
	c.Failpoints.Hit(failpoint.RestoreAfterValidate)
	return res, nil
}

// loadCheckpoint validates and reads a checkpoint; any problem is a
// non-retryable checkpoint.ErrCheckpointInvalid naming it.
func (c *Coordinator) loadCheckpoint(ctx context.Context, root, checkpointID string, urls []string) (*loadedCheckpoint, error) {
	dir, err := c.checkDir(ctx, root, checkpointID)
	if err != nil {
		return nil, err
	}
	if err := c.checkParticipants(urls); err != nil {
		return nil, err
	}
	m, err := ReadSignedAggregateManifest(ctx, dir, checkpointID, c.Checkpoints.Key)
	if err != nil {
		return nil, invalidOrUnavailable(err, "checkpoint %s: %v", checkpointID, err)
	}
	if len(m.Participants) != len(urls) {
		return nil, invalidCheckpoint("checkpoint %s has %d participants, the restore names %d (same order as at checkpoint time)", checkpointID, len(m.Participants), len(urls))
	}
	lc := &loadedCheckpoint{dir: dir, set: c.Checkpoints, manifest: m, records: map[string][]byte{}, parked: map[string]rollout.ParkRecord{},
		blobs: map[transcript.Digest][]byte{}, sessions: map[string]int{}, fences: map[string]int{}, holders: map[string][]int{}, retired: map[string]bool{}}

	if err := lc.loadAgents(ctx, checkpointID); err != nil {
		return nil, err
	}
	for i := range m.Participants {
		if err := lc.loadParticipant(ctx, checkpointID, i); err != nil {
			return nil, err
		}
	}
	return lc, nil
}

// loadAgents reads and checks the agents artifact: every park record (it
// decodes and names a rollout of the set) and every transcript blob.
func (lc *loadedCheckpoint) loadAgents(ctx context.Context, checkpointID string) error {
	m := lc.manifest
	sub, err := lc.dir.Sub(checkpoint.AgentsDir)
	if err != nil {
		return err
	}
	agents, err := artifact.OpenStoreWith(ctx, sub, checkpointID, lc.set)
	if err != nil {
		return invalidOrUnavailable(err, "checkpoint %s: agents: %v", checkpointID, err)
	}
	if d := agents.Manifest().Digest; d != m.Agents.ManifestDigest {
		return invalidCheckpoint("checkpoint %s: agents manifest is %s, MANIFEST.json binds %s", checkpointID, d, m.Agents.ManifestDigest)
	}
	want := []string{checkpoint.SectionAgents, checkpoint.SectionTranscripts}
	if m.Admission != nil {
		want = append(want, checkpoint.SectionQueued)
	}
	slices.Sort(want) // the artifact lists its sections by name
	if got := agents.Sections(); !slices.Equal(got, want) {
		return invalidCheckpoint("checkpoint %s: agents sections %v, want %v", checkpointID, got, want)
	}
	recs, err := agents.Section(ctx, checkpoint.SectionAgents)
	if err != nil {
		return invalidCheckpoint("checkpoint %s: agents: %v", checkpointID, err)
	}
	for _, r := range recs {
		v, err := DecodeRecord(r.Data)
		if err == nil {
			err = checkRecord(v, checkpointID, m.Set, r.Key)
		}
		if err != nil {
			return invalidCheckpoint("checkpoint %s: %v", checkpointID, err)
		}
		lc.records[r.Key], lc.parked[r.Key] = r.Data, v
	}
	if len(recs) != m.Agents.Records || len(recs) != m.Parked {
		return invalidCheckpoint("checkpoint %s: %d agent records, MANIFEST.json counts %d", checkpointID, len(recs), m.Parked)
	}
	blobs, err := agents.Section(ctx, checkpoint.SectionTranscripts)
	if err != nil {
		return invalidCheckpoint("checkpoint %s: transcripts: %v", checkpointID, err)
	}
	for _, b := range blobs {
		if transcript.DigestOf(b.Data) != transcript.Digest(b.Key) {
			return invalidCheckpoint("checkpoint %s: transcript blob %s does not match its content", checkpointID, b.Key)
		}
		lc.blobs[transcript.Digest(b.Key)] = b.Data
	}
	if err := lc.checkTranscripts(); err != nil {
		return invalidCheckpoint("checkpoint %s: %v", checkpointID, err)
	}
	if m.Admission != nil {
		return lc.loadQueued(ctx, agents, checkpointID)
	}
	return nil
}

// loadParticipant reads and checks participant i's artifact and takes note
// of its unfinished sessions and its fences.
func (lc *loadedCheckpoint) loadParticipant(ctx context.Context, checkpointID string, i int) error {
	p := lc.manifest.Participants[i]
	cp, err := openParticipant(ctx, lc.dir, i, checkpointID, lc.set)
	if err != nil {
		return invalidOrUnavailable(err, "checkpoint %s: participant %d (%s): %v", checkpointID, i, p.Name, err)
	}
	if d := cp.Manifest().Digest; d != p.ManifestDigest {
		return invalidCheckpoint("checkpoint %s: participant %d manifest is %s, MANIFEST.json binds %s", checkpointID, i, d, p.ManifestDigest)
	}
	cut, err := cutfile.Read(ctx, cp)
	if err != nil {
		return invalidCheckpoint("checkpoint %s: participant %d (%s): %v", checkpointID, i, p.Name, err)
	}
	for _, s := range cut.Sessions {
		if !s.Retired {
			lc.sessions[s.RolloutID] = max(lc.sessions[s.RolloutID], s.Attempt)
			lc.holders[s.RolloutID] = append(lc.holders[s.RolloutID], i)
		} else {
			lc.retired[s.RolloutID] = true
		}
	}
	for id, f := range cut.Fences {
		lc.fences[id] = max(lc.fences[id], f)
	}
	return nil
}

// checkTranscripts checks that every blob the records reference is in the
// checkpoint: each conversation walks to its root within it.
func (lc *loadedCheckpoint) checkTranscripts() error {
	ids := make([]string, 0, len(lc.parked))
	for id := range lc.parked {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		heads, singles := references(lc.parked[id])
		for _, d := range singles {
			if _, ok := lc.blobs[d]; !ok {
				return fmt.Errorf("rollout %s: blob %s is not in the checkpoint", id, d)
			}
		}
		for _, h := range heads {
			seen := map[transcript.Digest]bool{}
			for d := h; d != ""; {
				if seen[d] {
					return fmt.Errorf("rollout %s: transcript cycle at %s", id, d)
				}
				seen[d] = true
				data, ok := lc.blobs[d]
				if !ok {
					return fmt.Errorf("rollout %s: transcript node %s is not in the checkpoint", id, d)
				}
				var n struct {
					Parent transcript.Digest `json:"parent"`
					Item   transcript.Digest `json:"item"`
				}
				if err := json.Unmarshal(data, &n); err != nil || n.Item.Validate() != nil {
					return fmt.Errorf("rollout %s: %s is not a transcript node", id, d)
				}
				if _, ok := lc.blobs[n.Item]; !ok {
					return fmt.Errorf("rollout %s: transcript item %s is not in the checkpoint", id, n.Item)
				}
				d = n.Parent
			}
		}
	}
	return nil
}

// checkParticipantsLive asks each participant, read-only, who it is: the
// server at participant n must carry the name participant n had and be
// idle or already restoring this checkpoint.
func (c *Coordinator) checkParticipantsLive(ctx context.Context, lc *loadedCheckpoint, urls []string) error {
	return fanout.Each(ctx, len(urls), c.limit(), func(ctx context.Context, i int) error {
		return c.checkParticipantLive(ctx, lc, i, urls[i])
	})
}

// checkParticipantLive asks the server at url, read-only, whether it
// carries the name participant i of the checkpoint had.
func (c *Coordinator) checkParticipantLive(ctx context.Context, lc *loadedCheckpoint, i int, url string) error {
	cc, err := c.control(url)
	if err != nil {
		return err
	}
	caps, err := cc.Capabilities(ctx)
	if err != nil {
		return controlError(url, "capabilities", err)
	}
	want := lc.manifest.Participants[i]
	if caps.Component != protocol.ComponentEnvironmentServer || caps.Name != want.Name || caps.SchemaVersion != protocol.ControlSchemaVersion {
		return invalidCheckpoint("participant %d at %s is %s %q (schema %d); the checkpoint holds %q: list participants in the order of the checkpoint",
			i, url, caps.Component, caps.Name, caps.SchemaVersion, want.Name)
	}
	if err := protocol.CheckCapabilities(caps); err != nil {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"participant %d at %s cannot take part in a restore: its capabilities: %v (docs/protocol/RULES.md R17)", i, url, err),
			checkpoint.ErrParticipantRefused, nil)
	}
	return nil
}
