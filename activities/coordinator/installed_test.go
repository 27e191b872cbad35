package coordinator_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/testsupport/brokenparticipant"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
)

// A restore never reports an attempt installed that a participant did not
// install (ARCHITECTURE.md invariant 11): these tests run the restore's
// steps against participants that do not install what the plan asks for,
// each in its own way, and want RestoreParticipants to fail naming the
// participant and the rollouts.

// newWorldWrapped is newWorld on an environment server served through wrap.
func newWorldWrapped(t *testing.T, wrap func(http.Handler) http.Handler) *world {
	t.Helper()
	store, err := transcriptstore.Open(t.TempDir())
	require.NoError(t, err)
	return newWorldServedBy(t, store, t.TempDir(), newEnvServerWrapped(t, "env-a", nil, wrap))
}

// planRestore runs a restore's validate and plan steps under restore id
// rid ("" is the checkpoint id, as `starter restore --id ck1` sends).
func planRestore(t *testing.T, w *world, rid string) {
	t.Helper()
	ctx := context.Background()
	urls := []string{w.env.url}
	_, err := w.coord.ValidateCheckpoint(ctx, checkpoint.ValidateCheckpointInput{CheckpointID: "ck1", Root: w.root, Participants: urls})
	require.NoError(t, err)
	_, err = w.coord.PlanAttempts(ctx, checkpoint.PlanAttemptsInput{CheckpointID: "ck1", RestoreID: rid, Root: w.root, Participants: urls})
	require.NoError(t, err)
}

func restoreParticipants(w *world, rid string) (checkpoint.RestoreParticipantsResult, error) {
	return w.coord.RestoreParticipants(context.Background(), checkpoint.RestoreParticipantsInput{
		CheckpointID: "ck1", RestoreID: rid, Root: w.root, Participants: []string{w.env.url}})
}

// TestLiveRollbackUnderTheCheckpointIDAtALiteralParticipant: the trainer
// rolls back to ck1 on the live server that took it, with the restore id
// defaulting to the checkpoint id. A participant that keeps R11 literally
// answers stale_checkpoint and installs nothing; the restore used to count
// that as "already resumed" and go on to start every rollout as an attempt
// the participant never installed (each then failed attempt_not_installed).
// Now it fails here, naming the participant and the rollouts, and nothing
// was installed.
func TestLiveRollbackUnderTheCheckpointIDAtALiteralParticipant(t *testing.T) {
	w := newWorldWrapped(t, brokenparticipant.LiteralR11)
	w.checkpointAndResume(t)
	planRestore(t, w, "")

	res, err := restoreParticipants(w, "")
	requireType(t, err, checkpoint.ErrNotInstalled)
	t.Logf("the restore fails: %v", err)
	require.Zero(t, res.AlreadyResumed)
	for _, want := range []string{w.env.url, "stale_checkpoint", "s1-0000", "s1-0001", "s1-0002", "s1-0004", "new restore id"} {
		require.ErrorContains(t, err, want)
	}
	info, err := w.env.c.Session(context.Background(), "s1-0000")
	require.NoError(t, err)
	require.Equal(t, 0, info.Attempt, "nothing was installed")

	// The same answer on a re-run: no record says an earlier run of this
	// restore installed anything there.
	_, err = restoreParticipants(w, "")
	requireType(t, err, checkpoint.ErrNotInstalled)
}

// TestLiveRollbackUnderTheCheckpointID: the Go envserver keeps the R18
// exception, so the same rollback installs every rollout of the plan.
func TestLiveRollbackUnderTheCheckpointID(t *testing.T) {
	w := newWorld(t)
	w.checkpointAndResume(t)
	planRestore(t, w, "")
	res, err := restoreParticipants(w, "")
	require.NoError(t, err)
	require.Equal(t, checkpoint.RestoreParticipantsResult{Participants: 1, Restored: 4, Untouched: 1}, res)
	info, err := w.env.c.Session(context.Background(), "s1-0000")
	require.NoError(t, err)
	require.Equal(t, 1, info.Attempt)
}

// TestRestoreAnswerIsCheckedAgainstThePlan: a participant that installs
// another attempt map than the one sent answers 200 for what it did; the
// restore compares the answer with its plan and fails naming what is not
// installed as planned.
func TestRestoreAnswerIsCheckedAgainstThePlan(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(map[string]int)
		want []string
	}{
		{"a rollout left out", func(a map[string]int) { delete(a, "s1-0000") }, []string{"s1-0000", "not installed"}},
		{"another attempt", func(a map[string]int) { a["s1-0004"]++ }, []string{"s1-0004", "attempt 2", "planned 1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorldWrapped(t, brokenparticipant.RewriteRestore(tc.edit))
			w.checkpointAndResume(t)
			planRestore(t, w, "r1")
			_, err := restoreParticipants(w, "r1")
			requireType(t, err, checkpoint.ErrNotInstalled)
			t.Logf("the restore fails: %v", err)
			require.ErrorContains(t, err, w.env.url)
			for _, want := range tc.want {
				require.ErrorContains(t, err, want)
			}
		})
	}
}
