package coordinator_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/activities/coordinator"
	"github.com/turnstile-rl/turnstile/internal/artifact"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
	"github.com/turnstile-rl/turnstile/participants/envserver"
	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
)

var (
	signingKey = []byte("coordinator-test-signing-key-0123456789")
	otherKey   = []byte("another-signing-key-of-someone-else-0123")
)

func withKey(key []byte) func(*envserver.ServerConfig) {
	return func(c *envserver.ServerConfig) { c.Checkpoints.Key = key }
}

// With a key on the worker and the environment server, every manifest of a
// checkpoint is signed and a restore checks each signature; a checkpoint
// re-sealed by someone without the key, or signed with another key, fails
// closed naming the file, and the participant is left as it was.
func TestSignedCheckpoint(t *testing.T) {
	ctx := context.Background()
	store, err := transcriptstore.Open(t.TempDir())
	require.NoError(t, err)
	w := newWorldIn(t, store, t.TempDir(), nil, withKey(signingKey))
	w.coord.Checkpoints.Key = signingKey
	w.checkpoint(t)
	src := filepath.Join(w.root, "ck1")
	for _, f := range []string{"MANIFEST.json", "agents/manifest.json", "participants/0/manifest.json"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		require.NoError(t, err)
		require.Contains(t, string(b), `"signature": "`+artifact.SignaturePrefix, f)
	}

	validate := func(t *testing.T, root string, key []byte) error {
		t.Helper()
		b := newEnvServerWith(t, "env-a", nil, withKey(key))
		coord := *w.coord
		coord.Checkpoints.Key = key
		_, err := coord.ValidateCheckpoint(ctx, checkpoint.ValidateCheckpointInput{CheckpointID: "ck1", Root: root, Participants: []string{b.url}})
		require.Equal(t, protocol.PhaseIdle, b.status(t).Phase)
		return err
	}
	require.NoError(t, validate(t, w.root, signingKey))

	t.Run("another key", func(t *testing.T) {
		err := validate(t, w.root, otherKey)
		requireType(t, err, checkpoint.ErrCheckpointInvalid)
		require.ErrorContains(t, err, "signature does not verify")
	})
	t.Run("aggregate manifest re-sealed without the key", func(t *testing.T) {
		root := t.TempDir()
		copyDir(t, src, filepath.Join(root, "ck1"))
		m, err := readAggregate(t, filepath.Join(root, "ck1"), "ck1")
		require.NoError(t, err)
		m.Members++
		m.Signature = ""
		b, err := coordinator.EncodeAggregate(&m, nil)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(root, "ck1", "MANIFEST.json"), b, 0o600))
		err = validate(t, root, signingKey)
		requireType(t, err, checkpoint.ErrCheckpointInvalid)
		require.ErrorContains(t, err, "MANIFEST.json: unsigned")
	})
	t.Run("participant manifest re-sealed without the key", func(t *testing.T) {
		root := t.TempDir()
		copyDir(t, src, filepath.Join(root, "ck1"))
		path := filepath.Join(root, "ck1", "participants", "0", artifact.ManifestName)
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		i := strings.Index(string(b), `,
  "signature"`)
		require.Positive(t, i)
		require.NoError(t, os.WriteFile(path, append(b[:i:i], []byte("\n}\n")...), 0o600))
		err = validate(t, root, signingKey)
		requireType(t, err, checkpoint.ErrCheckpointInvalid)
		require.ErrorContains(t, err, "participant 0")
		require.ErrorContains(t, err, "unsigned")
	})
}

// A worker with a key refuses to commit a checkpoint whose environment
// server signs nothing: what a restore could not read is never committed.
func TestCommitRefusesAnUnsignedParticipant(t *testing.T) {
	w := newWorld(t)
	w.coord.Checkpoints.Key = signingKey
	w.cut(t)
	_, err := w.coord.CommitCheckpoint(context.Background(), checkpoint.CommitCheckpointInput{CheckpointID: "ck1", Set: "s1", Root: w.root, Participants: []string{w.env.url}})
	requireType(t, err, checkpoint.ErrCheckpointInvalid)
	require.ErrorContains(t, err, "unsigned")
	_, err = os.Stat(filepath.Join(w.root, "ck1", "MANIFEST.json"))
	require.ErrorIs(t, err, os.ErrNotExist)
}
