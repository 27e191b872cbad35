package coordinator_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/internal/storage/s3test"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// s3World is a world whose transcripts and checkpoints live on a real
// S3-compatible server.
func s3World(t *testing.T) (*world, *s3test.Server, *storage.Opener) {
	t.Helper()
	srv := s3test.Start(t)
	srv.SetEnv(t)
	opener := &storage.Opener{}
	t.Cleanup(func() { opener.Close() })
	store, err := transcriptstore.OpenLocation(context.Background(), opener, srv.Bucket(t, "run", "transcripts"))
	require.NoError(t, err)
	return newWorldIn(t, store, srv.Bucket(t, "run", "checkpoints"), opener), srv, opener
}

// TestCheckpointRestoreOnObjectStore: a checkpoint committed to S3 (by the
// environment server for its part, by the coordinator for the rest) and
// restored after everything died, into a fresh environment server and an
// empty transcript store on S3: the rollouts continue from their
// boundaries with their conversations back.
func TestCheckpointRestoreOnObjectStore(t *testing.T) {
	ctx := context.Background()
	w, srv, opener := s3World(t)
	res := w.checkpoint(t)
	require.True(t, strings.HasPrefix(res.Dir, "s3://run/checkpoints/ck1?"), res.Dir)
	for _, key := range []string{"checkpoints/ck1/MANIFEST.json", "checkpoints/ck1/agents/manifest.json", "checkpoints/ck1/participants/0/manifest.json"} {
		_, err := os.Stat(srv.ObjectPath("run", key))
		require.NoError(t, err, "object %s", key)
	}

	b := newEnvServerWith(t, "env-a", opener)
	store, err := transcriptstore.OpenLocation(ctx, opener, srv.Bucket(t, "run", "transcripts-after"))
	require.NoError(t, err)
	coord := *w.coord
	coord.Store = store
	urls := []string{b.url}
	val, err := coord.ValidateCheckpoint(ctx, checkpoint.ValidateCheckpointInput{CheckpointID: "ck1", Root: w.root, Participants: urls})
	require.NoError(t, err)
	require.Equal(t, 4, val.Records)
	_, err = coord.PlanAttempts(ctx, checkpoint.PlanAttemptsInput{CheckpointID: "ck1", Root: w.root, Participants: urls})
	require.NoError(t, err)
	rp, err := coord.RestoreParticipants(ctx, checkpoint.RestoreParticipantsInput{CheckpointID: "ck1", Root: w.root, Participants: urls})
	require.NoError(t, err)
	require.Equal(t, 1, rp.Participants)
	_, err = coord.TerminateStale(ctx, checkpoint.TerminateStaleInput{CheckpointID: "ck1", Root: w.root})
	require.NoError(t, err)
	st, err := coord.StartRestored(ctx, checkpoint.StartRestoredInput{CheckpointID: "ck1", Root: w.root, Participants: urls})
	require.NoError(t, err)
	require.Equal(t, checkpoint.StartRestoredResult{Continue: 2, StartOver: 1, OfferAgain: 1, Started: 4}, st)

	var in rollout.Input
	w.tc.mu.Lock()
	raw := w.tc.runs["rollout/s1-0000"].input
	w.tc.mu.Unlock()
	require.NoError(t, json.Unmarshal(raw, &in))
	require.NotNil(t, in.Resume)
	items, err := store.Load(ctx, in.Resume.Head)
	require.NoError(t, err, "the conversation is back in the new store")
	require.Len(t, items, 4)
}

// TestValidateOnObjectStoreFailsClosed damages a checkpoint's objects on
// the server's disk: validation names the problem, and the fresh
// environment server is left exactly as it was (idle, nothing installed).
func TestValidateOnObjectStoreFailsClosed(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, dir string)
		want   string
	}{
		{"torn: no aggregate manifest", func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(filepath.Join(dir, "MANIFEST.json")))
		}, "not a checkpoint"},
		{"corrupt agents shard", func(t *testing.T, dir string) {
			flip(t, filepath.Join(dir, "agents", "agents-00000.tar"))
		}, "agents"},
		{"corrupt participant shard", func(t *testing.T, dir string) {
			flip(t, filepath.Join(dir, "participants", "0", "sessions-00000.tar"))
		}, "participant 0"},
		{"participant's manifest gone", func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(filepath.Join(dir, "participants", "0", "manifest.json")))
		}, "participant 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			w, srv, opener := s3World(t)
			w.checkpoint(t)
			tt.damage(t, srv.ObjectPath("run", "checkpoints/ck1"))
			b := newEnvServerWith(t, "env-a", opener)
			_, err := w.coord.ValidateCheckpoint(ctx, checkpoint.ValidateCheckpointInput{CheckpointID: "ck1", Root: w.root, Participants: []string{b.url}})
			requireType(t, err, checkpoint.ErrCheckpointInvalid)
			require.Contains(t, err.Error(), tt.want)
			status := b.status(t)
			require.Equal(t, protocol.PhaseIdle, status.Phase)
			require.Zero(t, status.Sessions, "nothing installed")
		})
	}
}
