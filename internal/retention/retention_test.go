package retention_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/retention"
	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/internal/storage/s3test"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
)

func TestSelect(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(id string, min int, pinned bool, tag string) retention.Checkpoint {
		return retention.Checkpoint{ID: id, Set: "s", Committed: t0.Add(time.Duration(min) * time.Minute), Pinned: pinned, Tag: tag}
	}
	ids := func(cps []retention.Checkpoint) []string {
		out := []string{}
		for _, c := range cps {
			out = append(out, c.ID)
		}
		return out
	}
	tests := []struct {
		name          string
		cps           []retention.Checkpoint
		keep          int
		kept, dropped []string
	}{
		{"none", nil, 2, []string{}, []string{}},
		{"fewer than keep", []retention.Checkpoint{at("a", 1, false, "")}, 2, []string{"a"}, []string{}},
		{"last K by commit time, not by id", []retention.Checkpoint{
			at("c", 1, false, ""), at("a", 3, false, ""), at("b", 2, false, ""), at("d", 0, false, ""),
		}, 2, []string{"a", "b"}, []string{"c", "d"}},
		{"pinned old ones stay beside the last K", []retention.Checkpoint{
			at("c1", 1, true, "step-10"), at("c2", 2, false, "step-20"), at("c3", 3, false, "step-30"), at("c4", 4, false, "step-40"),
		}, 1, []string{"c4", "c1"}, []string{"c3", "c2"}},
		{"a pinned one among the last K counts once", []retention.Checkpoint{
			at("c1", 1, false, ""), at("c2", 2, true, "v2"), at("c3", 3, false, ""),
		}, 2, []string{"c3", "c2"}, []string{"c1"}},
		{"tags alone do not keep", []retention.Checkpoint{
			at("c1", 1, false, "step-1"), at("c2", 2, false, "step-2"), at("c3", 3, false, "step-3"),
		}, 1, []string{"c3"}, []string{"c2", "c1"}},
		{"same commit time: ids break the tie", []retention.Checkpoint{
			at("x1", 5, false, ""), at("x2", 5, false, ""),
		}, 1, []string{"x2"}, []string{"x1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kept, dropped := retention.Select(tc.cps, tc.keep)
			require.Equal(t, tc.kept, ids(kept))
			require.Equal(t, tc.dropped, ids(dropped))
		})
	}
}

func TestValidateKeep(t *testing.T) {
	require.NoError(t, retention.ValidateKeep(1))
	err := retention.ValidateKeep(0)
	require.ErrorContains(t, err, "keep 0")
}

// fakeCheckpoint lays out a committed checkpoint (manifest, a participant
// file, optional tag and pin) under root, committed at when.
func fakeCheckpoint(t *testing.T, root, id, set, tag string, pinned bool, when time.Time) int64 {
	t.Helper()
	dir := filepath.Join(root, id)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "participants", "0"), 0o755))
	files := map[string]string{
		"participants/0/shard.tar": strings.Repeat("s", 100),
	}
	m, err := json.Marshal(map[string]any{"schema": 1, "checkpoint_id": id, "set": set})
	require.NoError(t, err)
	files[checkpoint.AggregateManifestName] = string(m)
	if tag != "" {
		b, err := json.Marshal(checkpoint.Tag{CheckpointID: id, Set: set, Tag: tag})
		require.NoError(t, err)
		files[checkpoint.TagName] = string(b)
	}
	if pinned {
		files[checkpoint.PinName] = "{}"
	}
	var n int64
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.WriteFile(p, []byte(data), 0o644))
		n += int64(len(data))
	}
	require.NoError(t, os.Chtimes(filepath.Join(dir, checkpoint.AggregateManifestName), when, when))
	return n
}

// TestApply keeps exactly the newest K and the pinned checkpoints of the
// set, deletes the others whole, counts the bytes, and leaves alone what
// is not a committed checkpoint of the set.
func TestApply(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	t0 := time.Now().Add(-time.Hour)
	sizes := map[string]int64{}
	for i, c := range []struct {
		id, tag string
		pinned  bool
	}{{"ck1", "step-1", true}, {"ck2", "step-2", false}, {"ck3", "step-3", false}, {"ck4", "step-4", false}, {"ck5", "step-5", false}} {
		sizes[c.id] = fakeCheckpoint(t, root, c.id, "s1", c.tag, c.pinned, t0.Add(time.Duration(i)*time.Minute))
	}
	other := fakeCheckpoint(t, root, "other", "s2", "", false, t0)
	// A checkpoint being written: no manifest yet.
	require.NoError(t, os.MkdirAll(filepath.Join(root, "writing", "staging"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "writing", "staging", "members.json"), []byte("[]"), 0o644))

	st, err := storage.Dir(root)
	require.NoError(t, err)
	res, err := retention.Apply(ctx, st, "s1", 2)
	require.NoError(t, err)

	var keptIDs, deletedIDs []string
	for _, c := range res.Kept {
		keptIDs = append(keptIDs, c.ID)
	}
	for _, c := range res.Deleted {
		deletedIDs = append(deletedIDs, c.ID)
	}
	require.Equal(t, []string{"ck5", "ck4", "ck1"}, keptIDs)
	require.Equal(t, []string{"ck3", "ck2"}, deletedIDs)
	require.Equal(t, sizes["ck5"]+sizes["ck4"]+sizes["ck1"], res.KeptBytes)
	require.Equal(t, sizes["ck3"]+sizes["ck2"], res.FreedBytes)
	for _, id := range []string{"ck3", "ck2"} {
		require.NoDirExists(t, filepath.Join(root, id))
	}
	for _, id := range []string{"ck5", "ck4", "ck1", "other", "writing"} {
		require.DirExists(t, filepath.Join(root, id))
	}
	require.Positive(t, other)

	// Applying again changes nothing.
	again, err := retention.Apply(ctx, st, "s1", 2)
	require.NoError(t, err)
	require.Empty(t, again.Deleted)
	require.Len(t, again.Kept, 3)
}

// TestPin pins by tag and by id; an unknown tag is an error that pins
// nothing.
func TestPin(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	t0 := time.Now().Add(-time.Hour)
	fakeCheckpoint(t, root, "ck1", "s1", "step-1", false, t0)
	fakeCheckpoint(t, root, "ck2", "s1", "step-2", false, t0.Add(time.Minute))
	fakeCheckpoint(t, root, "ck3", "s1", "step-3", false, t0.Add(2*time.Minute))
	st, err := storage.Dir(root)
	require.NoError(t, err)

	ids, err := retention.Pin(ctx, st, "s1", "step-1")
	require.NoError(t, err)
	require.Equal(t, []string{"ck1"}, ids)
	_, err = retention.Pin(ctx, st, "s1", "step-9")
	require.ErrorContains(t, err, `pin "step-9"`)

	res, err := retention.Apply(ctx, st, "s1", 1)
	require.NoError(t, err)
	require.Len(t, res.Kept, 2)
	require.Equal(t, "ck3", res.Kept[0].ID)
	require.Equal(t, "ck1", res.Kept[1].ID)
	require.True(t, res.Kept[1].Pinned)
	require.Equal(t, "step-1", res.Kept[1].Tag)
}

// TestApplyObjectStore: retention on versitygw keeps exactly the newest K
// and the pinned checkpoints, deletes the others' every object, and leaves
// a checkpoint without a manifest alone.
func TestApplyObjectStore(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	srv.SetEnv(t)
	var o storage.Opener
	t.Cleanup(func() { o.Close() })
	st, err := o.Open(ctx, srv.Bucket(t, "ckpt", "root"))
	require.NoError(t, err)
	put := func(name, data string) {
		require.NoError(t, storage.WriteBytes(ctx, st, name, []byte(data)))
	}
	// Written in id order: equal commit seconds fall back to the id.
	for i, id := range []string{"ck1", "ck2", "ck3", "ck4"} {
		put(id+"/participants/0/shard.tar", strings.Repeat("s", 100))
		put(id+"/agents/index.jsonl", "{}")
		if i == 0 {
			put(id+"/"+checkpoint.PinName, "{}")
		}
		put(id+"/"+checkpoint.AggregateManifestName, `{"checkpoint_id":"`+id+`","set":"s1"}`)
	}
	put("writing/staging/members.json", "[]")

	res, err := retention.Apply(ctx, st, "s1", 2)
	require.NoError(t, err)
	var kept, deleted []string
	for _, c := range res.Kept {
		kept = append(kept, c.ID)
	}
	for _, c := range res.Deleted {
		deleted = append(deleted, c.ID)
	}
	require.Equal(t, []string{"ck4", "ck3", "ck1"}, kept)
	require.Equal(t, []string{"ck2"}, deleted)
	manifest := int64(len(`{"checkpoint_id":"ck2","set":"s1"}`))
	require.Equal(t, 100+2+manifest, res.FreedBytes)
	entries, err := st.List(ctx)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name)
	}
	require.Equal(t, []string{"ck1", "ck3", "ck4", "writing"}, names, "ck2's objects are all gone")
}
