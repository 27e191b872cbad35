package coordinator_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// restoreRun runs a restore's activities in the workflow's order against
// the live server of w, under restore id rid.
type restoreRun struct {
	plan  checkpoint.PlanAttemptsResult
	part  checkpoint.RestoreParticipantsResult
	term  checkpoint.TerminateStaleResult
	start checkpoint.StartRestoredResult
	roll  checkpoint.ResumeRolloutsResult
}

func runRestoreActivities(t *testing.T, w *world, rid string) restoreRun {
	t.Helper()
	ctx := context.Background()
	urls := []string{w.env.url}
	var r restoreRun
	var err error
	_, err = w.coord.ValidateCheckpoint(ctx, checkpoint.ValidateCheckpointInput{CheckpointID: "ck1", Root: w.root, Participants: urls})
	require.NoError(t, err)
	r.plan, err = w.coord.PlanAttempts(ctx, checkpoint.PlanAttemptsInput{CheckpointID: "ck1", RestoreID: rid, Root: w.root, Participants: urls})
	require.NoError(t, err)
	r.part, err = w.coord.RestoreParticipants(ctx, checkpoint.RestoreParticipantsInput{CheckpointID: "ck1", RestoreID: rid, Root: w.root, Participants: urls})
	require.NoError(t, err)
	r.term, err = w.coord.TerminateStale(ctx, checkpoint.TerminateStaleInput{CheckpointID: "ck1", RestoreID: rid, Root: w.root})
	require.NoError(t, err)
	r.start, err = w.coord.StartRestored(ctx, checkpoint.StartRestoredInput{CheckpointID: "ck1", RestoreID: rid, Root: w.root, Participants: urls})
	require.NoError(t, err)
	_, err = w.coord.ResumeRestoredParticipants(ctx, checkpoint.ResumeRestoredParticipantsInput{CheckpointID: "ck1", RestoreID: rid, Participants: urls})
	require.NoError(t, err)
	r.roll, err = w.coord.ResumeRestoredRollouts(ctx, checkpoint.ResumeRestoredRolloutsInput{CheckpointID: "ck1", RestoreID: rid, Root: w.root})
	require.NoError(t, err)
	return r
}

func readAttemptMap(t *testing.T, w *world, rid string) map[string]any {
	t.Helper()
	var af map[string]any
	raw, err := os.ReadFile(filepath.Join(w.root, "ck1", "restore", rid, "attempts.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &af))
	return af
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	var re *protocol.RemoteError
	require.True(t, errors.As(err, &re), "error %v", err)
	require.Equal(t, code, re.Code, "error %v", err)
}

// TestRestoreTwiceOnTheLiveServer: the trainer rolls back to checkpoint ck1
// while the environment server that took it is alive, then rolls back to
// it again. Each restore has its own restore id and attempt map; the set's
// rollouts return to the cut as higher attempts, one started after the cut
// is fenced off and ended, another set's rollout on the same server goes
// on untouched, and a re-run of a restore changes nothing.
func TestRestoreTwiceOnTheLiveServer(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	w.checkpointAndResume(t)

	// Progress after the cut; s1-0005 starts.
	w.env.inc(t, "s1-0000", 0, 2, 1)
	w.env.inc(t, "s2-0000", 0, 1, 0)
	w.env.start(t, "s1-0005", 0)
	w.tc.add("s1-0005", &runRow{set: "s1", attempt: 0, running: true})

	r1 := runRestoreActivities(t, w, "r1")
	require.False(t, r1.plan.Reused)
	require.Equal(t, 4, r1.plan.Start)
	require.Equal(t, 1, r1.plan.Fence)
	af := readAttemptMap(t, w, "r1")
	require.Equal(t, "r1", af["restore_id"])
	require.Equal(t, map[string]any{"s1-0000": 1.0, "s1-0001": 2.0, "s1-0002": 1.0, "s1-0004": 1.0, "s1-0005": 1.0}, af["attempts"])
	require.Equal(t, []any{"s1-0005"}, af["fence"])
	require.Equal(t, checkpoint.RestoreParticipantsResult{Participants: 1, Restored: 4, Fenced: 1, Untouched: 1}, r1.part,
		"the four sessions of the set installed (s1-0002 verified), s1-0005 fenced, s2-0000 untouched")
	require.Equal(t, 5, r1.term.Terminated, "the four replaced runs and the one started after the cut")
	require.Equal(t, checkpoint.StartRestoredResult{Continue: 2, StartOver: 1, OfferAgain: 1, Started: 4}, r1.start)
	require.Equal(t, 4, r1.roll.Resumed)
	require.Equal(t, 1, w.tc.updates["rollout/s1-0000 resume-request ck1"])
	w.tc.mu.Lock()
	require.False(t, w.tc.runs["rollout/s1-0005"].running, "the run started after the cut is ended")
	require.True(t, w.tc.runs["rollout/s2-0000"].running, "another set's run is not this restore's")
	w.tc.mu.Unlock()

	// The server is back at the cut for the set, as attempt 1.
	info, err := w.env.c.Session(ctx, "s1-0000")
	require.NoError(t, err)
	require.Equal(t, protocol.SessionInfo{RolloutID: "s1-0000", Env: "counter", Attempt: 1, Revision: 1}, info)
	_, err = w.env.c.Operate(ctx, protocol.OperateRequest{
		Identity:         protocol.Identity{RolloutID: "s1-0000", Attempt: 0, RequestID: protocol.OperateRequestID("s1-0000", 3, 0)},
		ExpectedRevision: 2, Tool: "increment", Arguments: json.RawMessage(`{"amount":1}`),
	})
	wantCode(t, err, protocol.CodeStaleAttempt)
	_, err = w.env.c.Session(ctx, "s1-0005")
	wantCode(t, err, protocol.CodeUnknownSession)
	// s2-0000 goes on where it was.
	info, err = w.env.c.Session(ctx, "s2-0000")
	require.NoError(t, err)
	require.Equal(t, protocol.SessionInfo{RolloutID: "s2-0000", Env: "counter", Attempt: 0, Revision: 1}, info)
	w.env.inc(t, "s2-0000", 0, 2, 1)

	// A re-run of r1 reuses its map and installs nothing again.
	w.env.inc(t, "s1-0000", 1, 2, 1) // attempt 1 moves on
	again := runRestoreActivities(t, w, "r1")
	require.True(t, again.plan.Reused)
	require.Equal(t, r1.plan.Digest, again.plan.Digest)
	require.Equal(t, 1, again.part.AlreadyResumed)
	require.Zero(t, again.term.Terminated)
	require.Equal(t, 4, again.start.Existing)
	require.Zero(t, again.start.Started)
	info, err = w.env.c.Session(ctx, "s1-0000")
	require.NoError(t, err)
	require.Equal(t, int64(2), info.Revision, "attempt 1's progress stays: no second install")

	// The trainer rolls back to ck1 again: a new restore id, attempts above
	// every run so far.
	resumes := w.tc.updates["rollout/s1-0000 resume-request ck1"]
	r2 := runRestoreActivities(t, w, "r2")
	require.False(t, r2.plan.Reused)
	require.Zero(t, r2.plan.Fence, "s1-0005's run is closed; nothing new started after the cut")
	af2 := readAttemptMap(t, w, "r2")
	require.Equal(t, map[string]any{"s1-0000": 2.0, "s1-0001": 3.0, "s1-0002": 2.0, "s1-0004": 2.0}, af2["attempts"])
	require.Equal(t, 4, r2.term.Terminated, "r1's runs")
	require.Equal(t, 4, r2.start.Started)
	require.Equal(t, resumes+1, w.tc.updates["rollout/s1-0000 resume-request ck1"], "r2 releases its run once")
	info, err = w.env.c.Session(ctx, "s1-0000")
	require.NoError(t, err)
	require.Equal(t, protocol.SessionInfo{RolloutID: "s1-0000", Env: "counter", Attempt: 2, Revision: 1}, info)
	_, err = w.env.c.Operate(ctx, protocol.OperateRequest{
		Identity:         protocol.Identity{RolloutID: "s1-0000", Attempt: 1, RequestID: protocol.OperateRequestID("s1-0000", 3, 0)},
		ExpectedRevision: 1, Tool: "increment", Arguments: json.RawMessage(`{"amount":1}`),
	})
	wantCode(t, err, protocol.CodeStaleAttempt)
	st := w.env.status(t)
	require.Equal(t, protocol.PhaseIdle, st.Phase)
	require.Equal(t, protocol.AdmissionOpen, st.Admission)
}

// A restore id must be a name: it becomes a directory and a session key.
func TestRestoreIDIsValidated(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	_, err := w.coord.PlanAttempts(ctx, checkpoint.PlanAttemptsInput{CheckpointID: "ck1", RestoreID: "../x", Root: w.root, Participants: []string{w.env.url}})
	requireType(t, err, rollout.ErrBadInput)
	require.ErrorContains(t, err, "restore_id")
	_, err = w.coord.ResumeRestoredParticipants(ctx, checkpoint.ResumeRestoredParticipantsInput{CheckpointID: "ck1", RestoreID: "a/b", Participants: []string{w.env.url}})
	requireType(t, err, rollout.ErrBadInput)
	require.Equal(t, protocol.AdmissionOpen, w.env.status(t).Admission, "bad input changes nothing")
}

// TestRestoreFencesRunsThatClosedAfterTheCut: a rollout started after the
// cut and already finished (its run closed) does not exist in the rolled
// back world either. The restore fences it like a running one: its attempt
// is in the map, its session is dropped, its attempt 0 is refused from then
// on, and a deliberate re-submission comes in above the fence. A run that
// closed before the cut (s1-0003) keeps its result and is not fenced.
func TestRestoreFencesRunsThatClosedAfterTheCut(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	w.checkpointAndResume(t)

	// s1-0006 starts after the cut, finishes and closes before the restore.
	w.env.start(t, "s1-0006", 0)
	w.env.verify(t, "s1-0006", 0, 0)
	w.tc.add("s1-0006", &runRow{set: "s1", attempt: 0, running: false, started: time.Now().Add(time.Second)})

	r := runRestoreActivities(t, w, "r1")
	require.Equal(t, 1, r.plan.Fence)
	af := readAttemptMap(t, w, "r1")
	require.Equal(t, []any{"s1-0006"}, af["fence"])
	require.Equal(t, 1.0, af["attempts"].(map[string]any)["s1-0006"])
	require.NotContains(t, af["attempts"], "s1-0003", "closed before the cut: its result stands")
	require.Equal(t, 4, r.term.Terminated, "the closed run needs no ending")
	_, err := w.env.c.Session(ctx, "s1-0006")
	wantCode(t, err, protocol.CodeUnknownSession)
	_, err = w.env.c.Start(ctx, protocol.StartRequest{
		Identity: protocol.Identity{RolloutID: "s1-0006", Attempt: 0, RequestID: protocol.SeedRequestID("s1-0006")},
		Env:      "counter", Seed: 1, Task: json.RawMessage(`{"target":9}`),
	})
	wantCode(t, err, protocol.CodeStaleAttempt)
	// The deliberate re-submission: an attempt above the fence, installed
	// through the control plane (what a worker's start-over does).
	w.env.start(t, "s1-0006", 2)
}

// TestRestoreFencesRunsVisibilityDoesNotListYet: a rollout of the set's
// submission started just before the restore, which visibility has not
// indexed (s1-0007, past a gap), is found by its submission id, fenced and
// its run ended, like one visibility lists.
func TestRestoreFencesRunsVisibilityDoesNotListYet(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	w.checkpointAndResume(t)
	w.env.start(t, "s1-0007", 0)
	w.tc.add("s1-0007", &runRow{set: "s1", attempt: 0, running: true, hidden: true, started: time.Now().Add(time.Second)})

	r := runRestoreActivities(t, w, "r1")
	af := readAttemptMap(t, w, "r1")
	require.Equal(t, []any{"s1-0007"}, af["fence"])
	require.Equal(t, 1.0, af["attempts"].(map[string]any)["s1-0007"])
	require.Equal(t, 5, r.term.Terminated, "the four replaced runs and the invisible one")
	w.tc.mu.Lock()
	require.False(t, w.tc.runs["rollout/s1-0007"].running, "its run is ended")
	w.tc.mu.Unlock()
	_, err := w.env.c.Session(ctx, "s1-0007")
	wantCode(t, err, protocol.CodeUnknownSession)
}
