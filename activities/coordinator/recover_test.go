package coordinator_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// TestRecoverServerActivities runs a scoped recovery's activities: the
// checkpoint's server (w.env) is taken for dead and a fresh server with its
// name replaces it. Only the set's running rollouts whose run uses the dead
// server move: s1-0000 continues from its record as attempt 1, s1-0008
// (started after the cut) starts over from its seed; s1-0001 (another
// server), s1-0002 (holding its result) and s2-0000 (another set) are left
// alone, their runs untouched.
func TestRecoverServerActivities(t *testing.T) {
	ctx := context.Background()
	w, repl, plan := plannedRecovery(t)

	part, err := w.coord.RestoreParticipants(ctx, checkpoint.RestoreParticipantsInput{CheckpointID: "ck1", RestoreID: "rec1",
		Root: w.root, Participants: plan.Participants, Indexes: []int{plan.Participant}})
	require.NoError(t, err)
	require.Equal(t, 2, part.Restored, "s1-0000's session installed on the replacement, and s1-0002's verdict (kept for a retried verify)")
	require.Equal(t, 1, part.Fenced, "s1-0008 only fenced: it starts over")
	term, err := w.coord.TerminateStale(ctx, checkpoint.TerminateStaleInput{CheckpointID: "ck1", RestoreID: "rec1", Root: w.root})
	require.NoError(t, err)
	require.Equal(t, 2, term.Terminated)
	st, err := w.coord.StartRestored(ctx, checkpoint.StartRestoredInput{CheckpointID: "ck1", RestoreID: "rec1", Root: w.root, Participants: plan.Participants})
	require.NoError(t, err)
	require.Equal(t, checkpoint.StartRestoredResult{Continue: 1, StartOver: 1, Started: 2}, st)

	w.tc.mu.Lock()
	defer w.tc.mu.Unlock()
	started := map[string]rollout.Input{}
	for _, id := range []string{"s1-0000", "s1-0008"} {
		var in rollout.Input
		require.NoError(t, json.Unmarshal(w.tc.runs["rollout/"+id].input, &in))
		started[id] = in
		require.Equal(t, 1, in.Attempt, id)
		require.Equal(t, repl.url, in.Env.URL, "%s runs on the replacement", id)
		require.Equal(t, "ck1", in.HoldFor, "%s held until the replacement resumes", id)
	}
	require.NotNil(t, started["s1-0000"].Resume, "continues from its boundary")
	require.Nil(t, started["s1-0008"].Resume, "starts over from its seed")
	for _, id := range []string{"s1-0001", "s1-0002", "s1-0004", "s2-0000"} {
		r := w.tc.runs["rollout/"+id]
		require.True(t, r.running, "%s keeps running", id)
		require.NotContains(t, r.runID, "-a1", "%s keeps its run", id)
	}
	info, err := repl.c.Session(ctx, "s1-0000")
	require.NoError(t, err)
	require.Equal(t, protocol.SessionInfo{RolloutID: "s1-0000", Env: "counter", Attempt: 1, Revision: 1}, info)
}

// TestRecoverServerSkipsRolloutsFinishedMeanwhile: a server declared dead
// that was only slow (a false positive) can answer a planned rollout's old
// run until the recovery ends it; a rollout whose old run completed that
// way keeps its one result and gets no new attempt.
func TestRecoverServerSkipsRolloutsFinishedMeanwhile(t *testing.T) {
	ctx := context.Background()
	w, _, plan := plannedRecovery(t)

	w.tc.mu.Lock()
	w.tc.runs["rollout/s1-0000"].running = false // completed: its slow server answered
	w.tc.mu.Unlock()
	_, err := w.coord.RestoreParticipants(ctx, checkpoint.RestoreParticipantsInput{CheckpointID: "ck1", RestoreID: "rec1",
		Root: w.root, Participants: plan.Participants, Indexes: []int{plan.Participant}})
	require.NoError(t, err)
	term, err := w.coord.TerminateStale(ctx, checkpoint.TerminateStaleInput{CheckpointID: "ck1", RestoreID: "rec1", Root: w.root})
	require.NoError(t, err)
	require.Equal(t, 1, term.Terminated, "only s1-0008 still ran")
	st, err := w.coord.StartRestored(ctx, checkpoint.StartRestoredInput{CheckpointID: "ck1", RestoreID: "rec1", Root: w.root, Participants: plan.Participants})
	require.NoError(t, err)
	require.Equal(t, checkpoint.StartRestoredResult{StartOver: 1, Started: 1, FinishedMeanwhile: 1}, st)
	w.tc.mu.Lock()
	defer w.tc.mu.Unlock()
	require.NotContains(t, w.tc.runs["rollout/s1-0000"].runID, "-a1", "s1-0000 keeps its completed run")
}

// plannedRecovery is the world of the recovery tests: checkpoint ck1 of
// set s1 whose server dies, the set's runs (two of them on the dead server,
// one holding its result, others elsewhere or of another set), a
// replacement, and recovery rec1's plan, checked and read back.
func plannedRecovery(t *testing.T) (*world, *envServer, checkpoint.PlanRecoveryResult) {
	t.Helper()
	ctx := context.Background()
	w := newWorld(t)
	w.checkpoint(t)
	dead := w.env.url
	_, err := w.coord.ResumeParticipants(ctx, checkpoint.ResumeParticipantsInput{CheckpointID: "ck1", Participants: []string{dead}})
	require.NoError(t, err)
	input := func(id, set string, attempt int, url string) json.RawMessage {
		b, err := json.Marshal(rollout.Input{RolloutID: id, Set: set, Attempt: attempt, Task: json.RawMessage(`{"target":9}`),
			Env: rollout.EnvRef{Name: "counter", URL: url}, Policy: rollout.PolicyRef{Model: "scripted-counter"}, Seed: 1})
		require.NoError(t, err)
		return b
	}
	w.tc.mu.Lock()
	w.tc.runs["rollout/s1-0000"].input = input("s1-0000", "s1", 0, dead)
	w.tc.runs["rollout/s1-0001"].input = input("s1-0001", "s1", 1, "http://127.0.0.1:1")
	w.tc.runs["rollout/s1-0002"].input = input("s1-0002", "s1", 0, dead)
	w.tc.runs["rollout/s1-0002"].phase = string(rollout.PhaseAwaitingAck)
	w.tc.runs["rollout/s1-0004"].input = input("s1-0004", "s1", 0, "http://127.0.0.1:1")
	w.tc.runs["rollout/s2-0000"].input = input("s2-0000", "s2", 0, dead)
	w.tc.mu.Unlock()
	w.tc.add("s1-0008", &runRow{set: "s1", attempt: 0, running: true, input: input("s1-0008", "s1", 0, dead)})

	repl := newEnvServerWith(t, "env-a", nil)
	plan, err := w.coord.PlanRecovery(ctx, checkpoint.PlanRecoveryInput{Set: "s1", Server: dead, Replacement: repl.url,
		CheckpointID: "ck1", Root: w.root, RestoreID: "rec1"})
	require.NoError(t, err)
	require.Equal(t, checkpoint.PlanRecoveryResult{CheckpointID: "ck1", Participant: 0, Participants: []string{repl.url},
		Affected: 2, Continue: 1, StartOver: 1, Untouched: 2, Digest: plan.Digest}, plan)
	again, err := w.coord.PlanRecovery(ctx, checkpoint.PlanRecoveryInput{Set: "s1", Server: dead, Replacement: repl.url,
		CheckpointID: "ck1", Root: w.root, RestoreID: "rec1"})
	require.NoError(t, err)
	require.True(t, again.Reused, "a re-run reads its plan back")
	require.Equal(t, plan.Digest, again.Digest)
	return w, repl, plan
}
