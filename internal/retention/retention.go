// Package retention keeps the checkpoints of a set that a trainer still
// needs and deletes the rest: the newest K committed checkpoints and every
// pinned one stay. It also marks the transcript blobs the kept
// checkpoints hold, for a sweep of the transcript store
// (transcriptstore.Sweep).
package retention

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/turnstile-rl/turnstile/internal/artifact"
	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
)

// Checkpoint is one committed checkpoint under a root.
type Checkpoint struct {
	ID     string `json:"checkpoint_id"`
	Set    string `json:"set"`
	Tag    string `json:"tag,omitempty"`
	Pinned bool   `json:"pinned,omitempty"`
	// Committed is when its aggregate manifest was written (the store's
	// clock).
	Committed time.Time `json:"committed"`
}

// ValidateKeep checks a retention count: at least one checkpoint stays.
func ValidateKeep(keep int) error {
	if keep < 1 {
		return fmt.Errorf("keep %d: want at least 1 (the newest checkpoint always stays)", keep)
	}
	return nil
}

// Select splits the checkpoints of one set into those retention keeps (the
// keep newest by commit time, ties broken by id, and every pinned one) and
// those it drops, each newest first.
func Select(cps []Checkpoint, keep int) (kept, dropped []Checkpoint) {
	sorted := slices.Clone(cps)
	slices.SortFunc(sorted, func(a, b Checkpoint) int {
		if c := b.Committed.Compare(a.Committed); c != 0 {
			return c
		}
		return cmp.Compare(b.ID, a.ID)
	})
	for i, c := range sorted {
		if i < keep || c.Pinned {
			kept = append(kept, c)
		} else {
			dropped = append(dropped, c)
		}
	}
	return kept, dropped
}

// List returns the committed checkpoints under root; set non-empty keeps
// only that set's. A directory without an aggregate manifest (a
// checkpoint still being written, or an aborted one) is not a committed
// checkpoint and is never listed, so retention never touches it.
func List(ctx context.Context, root storage.Store, set string) ([]Checkpoint, error) {
	entries, err := root.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list checkpoints in %s: %w", root.Location(), err)
	}
	var out []Checkpoint
	for _, e := range entries {
		if !e.Dir || checkpoint.ValidateName("checkpoint id", e.Name) != nil {
			continue
		}
		c, ok, err := read(ctx, root, e.Name)
		if err != nil {
			return nil, err
		}
		if ok && (set == "" || c.Set == set) {
			out = append(out, c)
		}
	}
	return out, nil
}

// manifestHead is the part of an aggregate manifest retention reads.
type manifestHead struct {
	CheckpointID string `json:"checkpoint_id"`
	Set          string `json:"set"`
}

// maxSmallFile bounds the manifest, tag and pin reads.
const maxSmallFile = 64 << 20

// read describes checkpoint id under root; ok is false when it has no
// aggregate manifest.
func read(ctx context.Context, root storage.Store, id string) (Checkpoint, bool, error) {
	dir, err := root.Sub(id)
	if err != nil {
		return Checkpoint{}, false, err
	}
	st, err := dir.Stat(ctx, checkpoint.AggregateManifestName)
	if errors.Is(err, storage.ErrNotExist) {
		return Checkpoint{}, false, nil
	}
	if err != nil {
		return Checkpoint{}, false, fmt.Errorf("checkpoint %s: %w", id, err)
	}
	var m manifestHead
	if err := readJSON(ctx, dir, checkpoint.AggregateManifestName, &m); err != nil {
		return Checkpoint{}, false, fmt.Errorf("checkpoint %s: %w", id, err)
	}
	if m.CheckpointID != id {
		return Checkpoint{}, false, fmt.Errorf("checkpoint %s: its manifest names checkpoint %q", id, m.CheckpointID)
	}
	c := Checkpoint{ID: id, Set: m.Set, Committed: st.ModTime}
	var tag checkpoint.Tag
	switch err := readJSON(ctx, dir, checkpoint.TagName, &tag); {
	case err == nil:
		c.Tag = tag.Tag
	case !errors.Is(err, storage.ErrNotExist):
		return Checkpoint{}, false, fmt.Errorf("checkpoint %s: %w", id, err)
	}
	switch _, err := dir.Stat(ctx, checkpoint.PinName); {
	case err == nil:
		c.Pinned = true
	case !errors.Is(err, storage.ErrNotExist):
		return Checkpoint{}, false, fmt.Errorf("checkpoint %s: %w", id, err)
	}
	return c, true, nil
}

func readJSON(ctx context.Context, st storage.Store, name string, v any) error {
	b, err := storage.ReadAll(ctx, st, name, maxSmallFile)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// WriteTag records the tag of checkpoint c.ID under root (TAG.json).
func WriteTag(ctx context.Context, root storage.Store, c checkpoint.Tag) error {
	return writeTagFile(ctx, root, c, checkpoint.TagName)
}

// ErrNothingToPin: no committed checkpoint of the set has the tag or id
// Pin was given.
var ErrNothingToPin = errors.New("no committed checkpoint of the set has that tag or id")

// Pin marks every committed checkpoint of set under root whose tag is tag
// (or whose id is tag) as pinned, and returns their ids; none is an error.
func Pin(ctx context.Context, root storage.Store, set, tag string) ([]string, error) {
	cps, err := List(ctx, root, set)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, c := range cps {
		if c.Tag != tag && c.ID != tag {
			continue
		}
		if err := writeTagFile(ctx, root, checkpoint.Tag{CheckpointID: c.ID, Set: c.Set, Tag: c.Tag}, checkpoint.PinName); err != nil {
			return nil, err
		}
		ids = append(ids, c.ID)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("pin %q: set %s under %s: %w", tag, set, root.Location(), ErrNothingToPin)
	}
	return ids, nil
}

func writeTagFile(ctx context.Context, root storage.Store, c checkpoint.Tag, name string) error {
	dir, err := root.Sub(c.CheckpointID)
	if err != nil {
		return err
	}
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if err := storage.WriteBytes(ctx, dir, name, b); err != nil {
		return fmt.Errorf("checkpoint %s: write %s: %w", c.CheckpointID, name, err)
	}
	return storage.Sync(ctx, dir)
}

// Result is what Apply kept and deleted.
type Result struct {
	Kept       []Checkpoint `json:"kept"`
	Deleted    []Checkpoint `json:"deleted"`
	KeptBytes  int64        `json:"kept_bytes"`
	FreedBytes int64        `json:"freed_bytes"`
}

// Apply keeps the keep newest committed checkpoints of set under root and
// every pinned one, and deletes the others: the aggregate manifest first
// (from then on it is no checkpoint: a restore refuses it), then the rest.
func Apply(ctx context.Context, root storage.Store, set string, keep int) (Result, error) {
	if err := ValidateKeep(keep); err != nil {
		return Result{}, err
	}
	cps, err := List(ctx, root, set)
	if err != nil {
		return Result{}, err
	}
	kept, dropped := Select(cps, keep)
	res := Result{Kept: kept}
	for _, c := range kept {
		n, err := size(ctx, root, c.ID)
		if err != nil {
			return res, err
		}
		res.KeptBytes += n
	}
	for _, c := range dropped {
		n, err := Delete(ctx, root, c.ID)
		if err != nil {
			return res, err
		}
		res.Deleted = append(res.Deleted, c)
		res.FreedBytes += n
	}
	return res, nil
}

// Delete removes checkpoint id under root, manifest first, and returns the
// bytes it freed.
func Delete(ctx context.Context, root storage.Store, id string) (int64, error) {
	dir, err := root.Sub(id)
	if err != nil {
		return 0, err
	}
	st, err := dir.Stat(ctx, checkpoint.AggregateManifestName)
	var freed int64
	switch {
	case err == nil:
		if err := dir.Remove(ctx, checkpoint.AggregateManifestName); err != nil {
			return 0, fmt.Errorf("checkpoint %s: remove manifest: %w", id, err)
		}
		if err := storage.Sync(ctx, dir); err != nil {
			return 0, fmt.Errorf("checkpoint %s: %w", id, err)
		}
		freed = st.Size
	case !errors.Is(err, storage.ErrNotExist):
		return 0, fmt.Errorf("checkpoint %s: %w", id, err)
	}
	n, err := removeAll(ctx, dir)
	if err != nil {
		return freed + n, fmt.Errorf("checkpoint %s: %w", id, err)
	}
	if err := root.Remove(ctx, id); err != nil {
		return freed + n, fmt.Errorf("checkpoint %s: %w", id, err)
	}
	return freed + n, nil
}

// removeAll removes everything under st, depth first, and returns the
// bytes of the objects it removed.
func removeAll(ctx context.Context, st storage.Store) (int64, error) {
	entries, err := st.List(ctx)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, e := range entries {
		if e.Dir {
			sub, err := st.Sub(e.Name)
			if err != nil {
				return n, err
			}
			m, err := removeAll(ctx, sub)
			n += m
			if err != nil {
				return n, err
			}
		} else {
			n += e.Size
		}
		if err := st.Remove(ctx, e.Name); err != nil {
			return n, err
		}
	}
	return n, nil
}

// size is the bytes stored under checkpoint id.
func size(ctx context.Context, root storage.Store, id string) (int64, error) {
	dir, err := root.Sub(id)
	if err != nil {
		return 0, err
	}
	return sizeOf(ctx, dir)
}

func sizeOf(ctx context.Context, st storage.Store) (int64, error) {
	entries, err := st.List(ctx)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, e := range entries {
		if !e.Dir {
			n += e.Size
			continue
		}
		sub, err := st.Sub(e.Name)
		if err != nil {
			return n, err
		}
		m, err := sizeOf(ctx, sub)
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// MarkCheckpoint calls mark with every transcript blob committed
// checkpoint id under root holds (its agents artifact's transcripts
// section, validated as it is read).
func MarkCheckpoint(ctx context.Context, root storage.Store, id string, mark func(transcript.Digest)) error {
	agents, err := root.Sub(id + "/" + checkpoint.AgentsDir)
	if err != nil {
		return err
	}
	a, err := artifact.OpenStore(ctx, agents, id)
	if err != nil {
		return fmt.Errorf("mark checkpoint %s: %w", id, err)
	}
	recs, err := a.Section(ctx, checkpoint.SectionTranscripts)
	if err != nil {
		return fmt.Errorf("mark checkpoint %s: %w", id, err)
	}
	for _, r := range recs {
		mark(transcript.Digest(r.Key))
	}
	return nil
}
