package coordinator_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/activities/coordinator"
	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/internal/ackledger"
	"github.com/turnstile-rl/turnstile/internal/artifact"
	"github.com/turnstile-rl/turnstile/internal/destination"
	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
	"github.com/turnstile-rl/turnstile/participants/envserver"
	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// world is one set "s1" in the middle of a run: an environment server, a
// transcript store, and the rollouts' workflows in a fake Temporal.
//
//	s1-0000  running, attempt 0, parked mid-turn (a pending answer)
//	s1-0001  running, attempt 1, restart-only boundary
//	s1-0002  running, completed and not yet acknowledged (verified)
//	s1-0003  closed (visibility still lists it running)
//	s1-0004  running, not yet in visibility: only its env server knows it
//	s2-0000  another set's rollout on the same server
type world struct {
	root   string
	store  *transcriptstore.Store
	env    *envServer
	tc     *rolloutTable
	coord  *coordinator.Coordinator
	wanted map[transcript.Digest]bool // every blob the records reference
}

// loopbackDestinations admits every participant and object-store endpoint
// on loopback, as the tests' servers listen on free ports there.
func loopbackDestinations(t *testing.T) *destination.Config {
	t.Helper()
	env := map[string]string{destination.EnvAllowedParticipants: "http://127.0.0.1:*", destination.EnvAllowedStoreEndpoints: "http://127.0.0.1:*"}
	d, err := destination.FromLookup(func(k string) (string, bool) { v, ok := env[k]; return v, ok }, destination.Defaults{ControlToken: testToken})
	require.NoError(t, err)
	return &d
}

func newWorld(t *testing.T) *world {
	t.Helper()
	store, err := transcriptstore.Open(t.TempDir())
	require.NoError(t, err)
	return newWorldIn(t, store, t.TempDir(), nil)
}

// newWorldIn is newWorld with the transcript store, checkpoint root and
// object-store opener given (nil: local directories only).
func newWorldIn(t *testing.T, store *transcriptstore.Store, root string, opener *storage.Opener, edits ...func(*envserver.ServerConfig)) *world {
	t.Helper()
	return newWorldServedBy(t, store, root, newEnvServerWith(t, "env-a", opener, edits...))
}

// newWorldServedBy is newWorldIn on the environment server env (named
// env-a).
func newWorldServedBy(t *testing.T, store *transcriptstore.Store, root string, env *envServer) *world {
	t.Helper()
	ctx := context.Background()
	opener := env.opener
	w := &world{root: root, store: store, env: env, tc: newRolloutTable(), wanted: map[transcript.Digest]bool{}}
	w.coord = &coordinator.Coordinator{Client: w.tc, Store: store, ControlToken: testToken, TaskQueue: "tq", Concurrency: 3, Storage: opener,
		Destinations: loopbackDestinations(t)}

	// A blob nobody references must not be copied.
	_, err := store.AppendAll(ctx, "", transcript.Item{Role: "user", Content: "unrelated"})
	require.NoError(t, err)

	w.env.start(t, "s1-0000", 0)
	w.env.inc(t, "s1-0000", 0, 1, 0)
	w.tc.add("s1-0000", &runRow{set: "s1", attempt: 0, running: true, record: w.record(t, "s1-0000", 0, envs.ModeExportRestore, true, false)})
	w.env.start(t, "s1-0001", 1)
	w.tc.add("s1-0001", &runRow{set: "s1", attempt: 1, running: true, record: w.record(t, "s1-0001", 1, envs.ModeRestartOnly, false, false)})
	w.env.start(t, "s1-0002", 0)
	w.env.verify(t, "s1-0002", 0, 0)
	w.tc.add("s1-0002", &runRow{set: "s1", attempt: 0, running: true, record: w.record(t, "s1-0002", 0, envs.ModeExportRestore, false, true)})
	w.tc.add("s1-0003", &runRow{set: "s1", attempt: 0, running: false, listedRunning: true})
	w.env.start(t, "s1-0004", 0)
	w.tc.add("s1-0004", &runRow{set: "s1", attempt: 0, running: true, hidden: true, record: w.record(t, "s1-0004", 0, envs.ModeExportRestore, false, false)})
	w.env.start(t, "s2-0000", 0)
	w.tc.add("s2-0000", &runRow{set: "s2", attempt: 0, running: true})
	return w
}

// record builds the park record a rollout answers, with its conversation
// in the store.
func (w *world) record(t *testing.T, id string, attempt int, mode envs.Mode, pending, completed bool) []byte {
	t.Helper()
	ctx := context.Background()
	head, err := w.store.AppendAll(ctx, "",
		transcript.Item{Role: "system", Content: "count to 9"},
		transcript.Item{Role: "user", Content: "rollout " + id})
	require.NoError(t, err)
	tools, err := w.store.PutJSON(ctx, []string{"increment", id})
	require.NoError(t, err)
	b := rollout.Boundary{RolloutID: id, Attempt: attempt, Turn: 1, Head: head, Tools: tools, Style: envs.StyleTools,
		EnvMode: mode, Seeded: true, Revision: 1}
	w.want(t, head)
	w.wanted[tools] = true
	if pending {
		ans, err := w.store.Append(ctx, head, transcript.Item{Role: "assistant", ToolCalls: []transcript.ToolCall{{ID: "c0", Name: "increment", Arguments: `{"amount":1}`}}})
		require.NoError(t, err)
		obs, err := w.store.Append(ctx, ans, transcript.Item{Role: "tool", ToolCallID: "c0", Content: "1"})
		require.NoError(t, err)
		b.Pending = &rollout.PendingCall{CallID: id + "/a0/t1", Head: ans, ToolCalls: []transcript.ToolCall{
			{ID: "c0", Name: "increment", Arguments: `{"amount":1}`}, {ID: "c1", Name: "increment", Arguments: `{"amount":1}`}}}
		b.Cursor, b.Head = 1, obs
		w.want(t, obs)
	}
	if !pending && !completed {
		b.Partial = w.prefix(t, id, head)
	}
	in := rollout.Input{RolloutID: id, Set: "s1", Attempt: attempt, Task: json.RawMessage(`{"target":9}`),
		Env: rollout.EnvRef{Name: "counter"}, Policy: rollout.PolicyRef{Model: "scripted-counter"}, Seed: 1}
	rec := rollout.ParkRecord{CheckpointID: "ck1", Set: "s1", Input: in, Boundary: b, Phase: rollout.PhaseParked}
	if completed {
		final, err := w.store.Append(ctx, head, transcript.Item{Role: "assistant", Content: "done"})
		require.NoError(t, err)
		w.want(t, final)
		details, err := w.store.Put(ctx, []byte(`{"value":9,"target":9}`))
		require.NoError(t, err)
		w.wanted[details] = true
		res := rollout.Result{RolloutID: id, Set: "s1", Attempt: attempt, Reward: 1, Turns: 1, Head: final,
			StepRewards: []float64{0}, VerifyDetailsRef: details}
		receipt, err := rollout.NewReceipt(res)
		require.NoError(t, err)
		res.Receipt = &receipt
		rec.Result, rec.Phase = &res, rollout.PhaseAwaitingAck
	}
	raw, err := json.Marshal(rec)
	require.NoError(t, err)
	return raw
}

// prefix stores a two-chunk durable prefix of the next model call (one its
// park deadline cut) and wants both chunks in the checkpoint.
func (w *world) prefix(t *testing.T, id string, head transcript.Digest) *rollout.ModelPrefix {
	t.Helper()
	ctx := context.Background()
	first, err := w.store.PutPrefixChunk(ctx, transcript.PrefixChunk{Head: head, PromptTokenIDs: []int64{1, 2}, Model: "scripted-counter",
		TokenIDs: []int64{3, 4}, LogProbs: []float64{-1, -1}, Text: "ab"})
	require.NoError(t, err)
	last, err := w.store.PutPrefixChunk(ctx, transcript.PrefixChunk{Parent: first, Start: 2, TokenIDs: []int64{5}, LogProbs: []float64{-1}, Text: "c"})
	require.NoError(t, err)
	w.wanted[first], w.wanted[last] = true, true
	return &rollout.ModelPrefix{CallID: id + "/a0/t2", Turn: 2, Record: last, Tokens: 3}
}

func (w *world) want(t *testing.T, head transcript.Digest) {
	t.Helper()
	blobs, err := w.store.Blobs(context.Background(), head)
	require.NoError(t, err)
	for _, d := range blobs {
		w.wanted[d] = true
	}
}

// checkpoint runs the checkpoint's activities in order, as the workflow
// does.
func (w *world) checkpoint(t *testing.T) checkpoint.CommitCheckpointResult {
	t.Helper()
	w.cut(t)
	res, err := w.coord.CommitCheckpoint(context.Background(), checkpoint.CommitCheckpointInput{CheckpointID: "ck1", Set: "s1", Root: w.root, Participants: []string{w.env.url}})
	require.NoError(t, err)
	return res
}

// checkpointAndResume takes checkpoint ck1 and lets the environment server
// go on after it, as a checkpoint that does not stay paused does.
func (w *world) checkpointAndResume(t *testing.T) {
	t.Helper()
	w.checkpoint(t)
	_, err := w.coord.ResumeParticipants(context.Background(), checkpoint.ResumeParticipantsInput{CheckpointID: "ck1", Participants: []string{w.env.url}})
	require.NoError(t, err)
}

// prepareAndFreeze runs the checkpoint's prepare and membership steps,
// for tests of the park step.
func (w *world) prepareAndFreeze(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	_, err := w.coord.PrepareParticipants(ctx, checkpoint.PrepareParticipantsInput{
		CheckpointID: "ck1", Set: "s1", Root: w.root, Participants: []string{w.env.url}, Deadline: time.Now().Add(time.Minute),
	})
	require.NoError(t, err)
	_, err = w.coord.FreezeMembership(ctx, checkpoint.FreezeMembershipInput{CheckpointID: "ck1", Set: "s1", Root: w.root})
	require.NoError(t, err)
}

// cut runs the checkpoint's activities up to its commit.
func (w *world) cut(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	// The Checkpoint workflow's run: its start is when the cut began.
	w.tc.mu.Lock()
	w.tc.runs[checkpoint.CheckpointWorkflowID("ck1")] = &runRow{runID: "run-ck1", started: time.Now()}
	w.tc.mu.Unlock()
	prep, err := w.coord.PrepareParticipants(ctx, checkpoint.PrepareParticipantsInput{
		CheckpointID: "ck1", Set: "s1", Root: w.root, Participants: []string{w.env.url}, Deadline: time.Now().Add(time.Minute),
	})
	require.NoError(t, err)
	require.Equal(t, 5, prep.Sessions)
	require.Equal(t, protocol.PhasePrepared, w.env.status(t).Phase)

	mem, err := w.coord.FreezeMembership(ctx, checkpoint.FreezeMembershipInput{CheckpointID: "ck1", Set: "s1", Root: w.root})
	require.NoError(t, err)
	require.Equal(t, checkpoint.FreezeMembershipResult{Members: 5, FromVisibility: 4, FromParticipants: 1, Foreign: 1, Digest: mem.Digest}, mem)

	park, err := w.coord.ParkMembers(ctx, checkpoint.ParkMembersInput{CheckpointID: "ck1", Set: "s1", Root: w.root, Deadline: time.Now().Add(time.Minute)})
	require.NoError(t, err)
	require.Equal(t, 5, park.Members)
	require.Equal(t, 4, park.Parked)
	require.Equal(t, 1, park.CompletedUnacked)
	require.Equal(t, 1, park.Closed)
	require.Equal(t, 1, w.tc.updates["rollout/s1-0000 park-request ck1"])
}

func readList(t *testing.T, path string) []string {
	t.Helper()
	var l struct {
		Rollouts []string `json:"rollouts"`
	}
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &l))
	return l.Rollouts
}

func TestCheckpointActivitiesCommitEverythingManifestLast(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	res := w.checkpoint(t)
	dir := filepath.Join(w.root, "ck1")
	require.Equal(t, dir, res.Dir)
	require.Equal(t, []string{"s1-0000", "s1-0001", "s1-0002", "s1-0003", "s1-0004"}, readList(t, filepath.Join(dir, checkpoint.ListMembers)))
	require.Equal(t, []string{"s1-0000", "s1-0001", "s1-0002", "s1-0004"}, readList(t, filepath.Join(dir, checkpoint.ListParked)))

	m, err := readAggregate(t, dir, "ck1")
	require.NoError(t, err)
	require.Equal(t, res.ManifestDigest, m.Digest)
	require.Equal(t, "s1", m.Set)
	require.Equal(t, 5, m.Members)
	require.Equal(t, 4, m.Parked)
	require.Equal(t, 1, m.CompletedUnacked)
	require.Len(t, m.Participants, 1)
	require.Equal(t, "env-a", m.Participants[0].Name)
	require.Equal(t, "participants/0", m.Participants[0].Location)
	require.Equal(t, []protocol.EnvCapability{{Name: "counter", Mode: envs.ModeExportRestore, Style: envs.StyleTools}}, m.Participants[0].Envs)
	env, err := artifact.Open(ctx, filepath.Join(dir, "participants", "0"), "ck1")
	require.NoError(t, err)
	require.Equal(t, m.Participants[0].ManifestDigest, env.Manifest().Digest)

	// The agents artifact: one record per parked rollout, exactly the
	// blobs they reference.
	agents, err := artifact.Open(ctx, filepath.Join(dir, checkpoint.AgentsDir), "ck1")
	require.NoError(t, err)
	require.Equal(t, m.Agents.ManifestDigest, agents.Manifest().Digest)
	recs, err := agents.Section(ctx, checkpoint.SectionAgents)
	require.NoError(t, err)
	var keys []string
	for _, r := range recs {
		keys = append(keys, r.Key)
	}
	require.Equal(t, []string{"s1-0000", "s1-0001", "s1-0002", "s1-0004"}, keys)
	blobs, err := agents.Section(ctx, checkpoint.SectionTranscripts)
	require.NoError(t, err)
	got := map[transcript.Digest]bool{}
	for _, b := range blobs {
		require.Equal(t, transcript.Digest(b.Key), transcript.DigestOf(b.Data))
		got[transcript.Digest(b.Key)] = true
	}
	require.Equal(t, w.wanted, got, "the transcripts section holds exactly the referenced blobs")
	require.Equal(t, len(w.wanted), res.Transcripts)

	// A retried commit validates and answers the same.
	again, err := w.coord.CommitCheckpoint(ctx, checkpoint.CommitCheckpointInput{CheckpointID: "ck1", Set: "s1", Root: w.root, Participants: []string{w.env.url}})
	require.NoError(t, err)
	require.Equal(t, res, again)

	// Resume: the server opens, every parked rollout is released once.
	_, err = w.coord.ResumeParticipants(ctx, checkpoint.ResumeParticipantsInput{CheckpointID: "ck1", Participants: []string{w.env.url}})
	require.NoError(t, err)
	require.Equal(t, protocol.AdmissionOpen, w.env.status(t).Admission)
	rr, err := w.coord.ResumeRollouts(ctx, checkpoint.ResumeRolloutsInput{CheckpointID: "ck1", Root: w.root, List: checkpoint.ListParked})
	require.NoError(t, err)
	require.Equal(t, checkpoint.ResumeRolloutsResult{Resumed: 4}, rr)
	require.Equal(t, 1, w.tc.updates["rollout/s1-0004 resume-request ck1"])
}

func TestParkOfAMissingMemberNamesIt(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	w.tc.mu.Lock()
	delete(w.tc.runs, "rollout/s1-0004") // the env server knows it, Temporal does not
	w.tc.mu.Unlock()
	w.prepareAndFreeze(t)
	_, err := w.coord.ParkMembers(ctx, checkpoint.ParkMembersInput{CheckpointID: "ck1", Set: "s1", Root: w.root, Deadline: time.Now().Add(time.Minute)})
	requireType(t, err, checkpoint.ErrMemberMissing)
	require.ErrorContains(t, err, "s1-0004")
	_, err = os.Stat(filepath.Join(w.root, "ck1", checkpoint.AggregateManifestName))
	require.True(t, errors.Is(err, os.ErrNotExist))
}

func TestParkRefusedByARolloutFailsAtOnce(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	w.tc.mu.Lock()
	w.tc.runs["rollout/s1-0001"].refuse = `rollout is held for checkpoint "other"`
	w.tc.mu.Unlock()
	w.prepareAndFreeze(t)
	_, err := w.coord.ParkMembers(ctx, checkpoint.ParkMembersInput{CheckpointID: "ck1", Set: "s1", Root: w.root, Deadline: time.Now().Add(time.Minute)})
	requireType(t, err, checkpoint.ErrMemberRefused)
	require.ErrorContains(t, err, "s1-0001")
	require.ErrorContains(t, err, "other")
}

// A member that ignored the park signal (a restored run still held for its
// restore when it came) and was released later is signalled again, and parks.
func TestParkSignalsAgainAMemberThatIgnoredIt(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	w.tc.mu.Lock()
	w.tc.runs["rollout/s1-0002"].ignoreParks = 1
	w.tc.mu.Unlock()
	w.prepareAndFreeze(t)
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res, err := w.coord.ParkMembers(pctx, checkpoint.ParkMembersInput{CheckpointID: "ck1", Set: "s1", Root: w.root, Deadline: time.Now().Add(time.Minute)})
	require.NoError(t, err)
	require.Equal(t, res.Members, res.Parked+res.Closed)
	w.tc.mu.Lock()
	defer w.tc.mu.Unlock()
	require.Equal(t, 2, w.tc.updates["rollout/s1-0002 park-request ck1"])
	require.Equal(t, 1, w.tc.updates["rollout/s1-0001 park-request ck1"])
}

// heldReceipt is the receipt of the result rollout id's park record holds.
func (w *world) heldReceipt(t *testing.T, id string) rollout.Receipt {
	t.Helper()
	w.tc.mu.Lock()
	defer w.tc.mu.Unlock()
	rec, err := coordinator.DecodeRecord(w.tc.runs["rollout/"+id].record)
	require.NoError(t, err)
	require.NotNil(t, rec.Result, "%s holds no result", id)
	return *rec.Result.Receipt
}

// A held result the set's acknowledgement ledger recorded before the
// checkpoint began parking (not yet released) is in the checkpoint as
// acknowledged: no record, so a restore does not offer it again; it is
// still resumed with the others. The hold of the releases ends with the
// step.
func TestParkLeavesOutWhatTheLedgerAcknowledged(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	w.tc.ack(w.heldReceipt(t, "s1-0002"), time.Now())
	w.prepareAndFreeze(t)
	res, err := w.coord.ParkMembers(ctx, checkpoint.ParkMembersInput{CheckpointID: "ck1", Set: "s1", Root: w.root, Deadline: time.Now().Add(time.Minute)})
	require.NoError(t, err)
	assert.Equal(t, 4, res.Parked)
	assert.Equal(t, 1, res.Acknowledged)
	assert.Zero(t, res.CompletedUnacked)
	dir := filepath.Join(w.root, "ck1")
	require.Equal(t, []string{"s1-0000", "s1-0001", "s1-0002", "s1-0004"}, readList(t, filepath.Join(dir, checkpoint.ListParked)), "every parked rollout is resumed")
	commit, err := w.coord.CommitCheckpoint(ctx, checkpoint.CommitCheckpointInput{CheckpointID: "ck1", Set: "s1", Root: w.root, Participants: []string{w.env.url}})
	require.NoError(t, err)
	assert.Equal(t, 3, commit.Parked, "records of s1-0000, 0001 and 0004")
	assert.Zero(t, commit.CompletedUnacked)
	w.tc.mu.Lock()
	defer w.tc.mu.Unlock()
	assert.Equal(t, []string{"hold ck1", "end-hold ck1"}, w.tc.acks.calls)
	assert.Empty(t, w.tc.acks.holds, "the hold ended with the step")
}

// A receipt recorded after the cut (here between a park step that died
// holding the releases and its retry, which finds its hold) is not in the
// cut: its rollout is in the checkpoint holding its result.
func TestParkKeepsWhatWasAcknowledgedAfterTheCut(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	w.prepareAndFreeze(t)
	_, err := ackledger.Hold(ctx, w.tc, "tq", "s1", "ck1", time.Now().Add(time.Minute)) // the first try's hold: sequence 0
	require.NoError(t, err)
	w.tc.ack(w.heldReceipt(t, "s1-0002"), time.Now())
	res, err := w.coord.ParkMembers(ctx, checkpoint.ParkMembersInput{CheckpointID: "ck1", Set: "s1", Root: w.root, Deadline: time.Now().Add(time.Minute)})
	require.NoError(t, err)
	assert.Zero(t, res.Acknowledged)
	assert.Equal(t, 1, res.CompletedUnacked)
}

func TestAbortResumesEverythingAndLeavesNoManifest(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	w.checkpoint(t)
	dir := filepath.Join(w.root, "ck1")
	res, err := w.coord.AbortCheckpoint(ctx, checkpoint.AbortCheckpointInput{CheckpointID: "ck1", Root: w.root, Participants: []string{w.env.url}})
	require.NoError(t, err)
	require.True(t, res.ManifestRemoved)
	require.Equal(t, 1, res.Participants)
	require.Equal(t, 4, res.Rollouts, "every running member is released")
	st := w.env.status(t)
	require.Equal(t, protocol.PhaseIdle, st.Phase)
	require.Equal(t, protocol.AdmissionOpen, st.Admission)
	_, err = readAggregate(t, dir, "ck1")
	require.ErrorContains(t, err, "not a checkpoint")
	// The id is spent: a second checkpoint under it is refused up front.
	_, err = w.coord.PrepareParticipants(ctx, checkpoint.PrepareParticipantsInput{
		CheckpointID: "ck1", Set: "s1", Root: w.root, Participants: []string{w.env.url}, Deadline: time.Now().Add(time.Minute),
	})
	requireType(t, err, rollout.ErrBadInput)
	require.Equal(t, protocol.AdmissionOpen, w.env.status(t).Admission)
}

func TestRestoreActivities(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	w.checkpoint(t)
	dir := filepath.Join(w.root, "ck1")

	// Everything died: a fresh server under the same name, an empty store.
	b := newEnvServer(t, "env-a")
	store, err := transcriptstore.Open(t.TempDir())
	require.NoError(t, err)
	coord := *w.coord
	coord.Store = store
	hits := 0
	coord.Failpoints, err = failpoint.Parse(failpoint.RestoreAfterValidate + "=kill@1")
	require.NoError(t, err)
	coord.Failpoints.SetKill(func() { hits++ })
	urls := []string{b.url}

	val, err := coord.ValidateCheckpoint(ctx, checkpoint.ValidateCheckpointInput{CheckpointID: "ck1", Root: w.root, Participants: urls})
	require.NoError(t, err)
	require.Equal(t, checkpoint.ValidateCheckpointResult{Set: "s1", ManifestDigest: val.ManifestDigest, Records: 4,
		Continue: 2, StartOver: 1, OfferAgain: 1, Transcripts: len(w.wanted)}, val)
	require.Equal(t, 1, hits, "the restore.after-validate failpoint is passed once validation succeeded")
	require.Equal(t, protocol.PhaseIdle, b.status(t).Phase, "validation installs nothing")

	plan, err := coord.PlanAttempts(ctx, checkpoint.PlanAttemptsInput{CheckpointID: "ck1", Root: w.root, Participants: urls})
	require.NoError(t, err)
	require.False(t, plan.Reused)
	require.Equal(t, 4, plan.Start)
	var af struct {
		Attempts map[string]int `json:"attempts"`
	}
	raw, err := os.ReadFile(filepath.Join(dir, "restore", "ck1", "attempts.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &af))
	require.Equal(t, 1, af.Attempts["s1-0000"])
	require.Equal(t, 2, af.Attempts["s1-0001"])
	require.Equal(t, 1, af.Attempts["s1-0004"])
	require.Greater(t, af.Attempts["s1-0002"], 0)
	require.NotContains(t, af.Attempts, "s2-0000", "another set's session on the same server is not this restore's")
	require.NotContains(t, af.Attempts, "s1-0003", "closed before the cut, unknown to the servers: nothing to fence")
	require.Len(t, af.Attempts, 4)

	// A later run of the same restore reuses the map, whatever Temporal
	// shows now.
	w.tc.add("s1-0000", &runRow{set: "s1", attempt: 0, running: true})
	again, err := coord.PlanAttempts(ctx, checkpoint.PlanAttemptsInput{CheckpointID: "ck1", Root: w.root, Participants: urls})
	require.NoError(t, err)
	require.True(t, again.Reused)
	require.Equal(t, plan.Digest, again.Digest)

	rp, err := coord.RestoreParticipants(ctx, checkpoint.RestoreParticipantsInput{CheckpointID: "ck1", Root: w.root, Participants: urls})
	require.NoError(t, err)
	require.Equal(t, 1, rp.Participants)
	require.Equal(t, protocol.PhaseRestored, b.status(t).Phase)
	require.Equal(t, protocol.AdmissionClosed, b.status(t).Admission, "paused until everything is installed")

	term, err := coord.TerminateStale(ctx, checkpoint.TerminateStaleInput{CheckpointID: "ck1", Root: w.root})
	require.NoError(t, err)
	require.Equal(t, 4, term.Terminated, "s1-0000, 0001, 0002 and 0004 run below their new attempt; s2-0000 is another set's")
	for _, reason := range w.tc.terminated {
		require.Contains(t, reason, "checkpoint ck1")
	}

	st, err := coord.StartRestored(ctx, checkpoint.StartRestoredInput{CheckpointID: "ck1", Root: w.root, Participants: urls})
	require.NoError(t, err)
	require.Equal(t, checkpoint.StartRestoredResult{Continue: 2, StartOver: 1, OfferAgain: 1, Started: 4}, st)
	for _, o := range w.tc.starts {
		require.Equal(t, "tq", o.TaskQueue)
		require.Contains(t, o.StaticSummary, "checkpoint ck1")
	}
	inputs := map[string]rollout.Input{}
	w.tc.mu.Lock()
	for wid, r := range w.tc.runs {
		if r.input != nil {
			var in rollout.Input
			require.NoError(t, json.Unmarshal(r.input, &in))
			inputs[strings.TrimPrefix(wid, "rollout/")] = in
		}
	}
	w.tc.mu.Unlock()
	require.Len(t, inputs, 4)
	require.Equal(t, "ck1", inputs["s1-0000"].HoldFor)
	require.Equal(t, 1, inputs["s1-0000"].Attempt)
	require.NotNil(t, inputs["s1-0000"].Resume)
	require.Equal(t, 1, inputs["s1-0000"].Resume.Cursor, "the pending answer's cursor survives")
	require.Nil(t, inputs["s1-0001"].Resume, "a restart-only continuation starts over")
	require.NotNil(t, inputs["s1-0002"].Completed, "a completed result is offered again")
	// The transcripts are back in the (new) store.
	items, err := store.Load(ctx, inputs["s1-0000"].Resume.Head)
	require.NoError(t, err)
	require.Len(t, items, 4)

	// Running it again starts nothing twice.
	st2, err := coord.StartRestored(ctx, checkpoint.StartRestoredInput{CheckpointID: "ck1", Root: w.root, Participants: urls})
	require.NoError(t, err)
	require.Equal(t, checkpoint.StartRestoredResult{Continue: 2, StartOver: 1, OfferAgain: 1, Existing: 4}, st2)
	require.Len(t, w.tc.starts, 4)

	_, err = coord.ResumeRestoredParticipants(ctx, checkpoint.ResumeRestoredParticipantsInput{CheckpointID: "ck1", Participants: urls})
	require.NoError(t, err)
	rr, err := coord.ResumeRestoredRollouts(ctx, checkpoint.ResumeRestoredRolloutsInput{CheckpointID: "ck1", Root: w.root})
	require.NoError(t, err)
	require.Equal(t, 4, rr.Resumed)
	require.Equal(t, 1, w.tc.updates["rollout/s1-0000 resume-request ck1"])

	// The environment server refuses the old attempt from now on.
	_, err = b.c.Operate(ctx, protocol.OperateRequest{
		Identity:         protocol.Identity{RolloutID: "s1-0000", Attempt: 0, RequestID: protocol.OperateRequestID("s1-0000", 2, 0)},
		ExpectedRevision: 1, Tool: "increment", Arguments: json.RawMessage(`{"amount":1}`),
	})
	var re *protocol.RemoteError
	require.True(t, errors.As(err, &re), "error %v", err)
	require.Equal(t, protocol.CodeStaleAttempt, re.Code)

	// A second run of the whole restore converges: the server already
	// resumed this checkpoint, every run exists.
	rp2, err := coord.RestoreParticipants(ctx, checkpoint.RestoreParticipantsInput{CheckpointID: "ck1", Root: w.root, Participants: urls})
	require.NoError(t, err)
	require.Equal(t, 1, rp2.AlreadyResumed)
	require.Equal(t, protocol.PhaseIdle, b.status(t).Phase, "a re-run installs nothing")
	term2, err := coord.TerminateStale(ctx, checkpoint.TerminateStaleInput{CheckpointID: "ck1", Root: w.root})
	require.NoError(t, err)
	require.Zero(t, term2.Terminated)
}

// A corrupt, torn or mismatched checkpoint fails validation with the problem
// named, and the participant is left exactly as it was.
func TestValidateCheckpointFailsClosed(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	w.checkpoint(t)
	src := filepath.Join(w.root, "ck1")

	tests := []struct {
		name   string
		damage func(t *testing.T, dir string)
		urls   func(b *envServer) []string
		want   string
	}{
		{"no manifest", func(t *testing.T, dir string) { require.NoError(t, os.Remove(filepath.Join(dir, "MANIFEST.json"))) }, nil, "not a checkpoint"},
		{"edited manifest", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "MANIFEST.json")
			b, err := os.ReadFile(p)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(p, []byte(strings.Replace(string(b), `"members": 5`, `"members": 6`, 1)), 0o644))
		}, nil, "digest"},
		{"flipped agents shard", func(t *testing.T, dir string) {
			flip(t, filepath.Join(dir, "agents", artifact.ShardName(checkpoint.SectionAgents, 0)))
		}, nil, "agents"},
		{"flipped participant shard", func(t *testing.T, dir string) {
			flip(t, filepath.Join(dir, "participants", "0", artifact.ShardName(protocol.SectionSessions, 0)))
		}, nil, "participant 0"},
		{"missing participant", func(t *testing.T, dir string) {
			require.NoError(t, os.RemoveAll(filepath.Join(dir, "participants", "0")))
		}, nil, "participant 0"},
		{"too many participants", nil, func(b *envServer) []string { return []string{b.url, "http://127.0.0.1:9"} }, "2"},
		{"participants in the wrong order", nil, func(*envServer) []string { return []string{newEnvServer(t, "env-b").url} }, "env-b"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			copyDir(t, src, filepath.Join(root, "ck1"))
			if tc.damage != nil {
				tc.damage(t, filepath.Join(root, "ck1"))
			}
			b := newEnvServer(t, "env-a")
			urls := []string{b.url}
			if tc.urls != nil {
				urls = tc.urls(b)
			}
			_, err := w.coord.ValidateCheckpoint(ctx, checkpoint.ValidateCheckpointInput{CheckpointID: "ck1", Root: root, Participants: urls})
			requireType(t, err, checkpoint.ErrCheckpointInvalid)
			require.ErrorContains(t, err, tc.want)
			st := b.status(t)
			require.Equal(t, protocol.PhaseIdle, st.Phase)
			require.Zero(t, st.Sessions)
			_, err = os.Stat(filepath.Join(root, "ck1", "restore"))
			require.True(t, errors.Is(err, os.ErrNotExist), "validation writes nothing")
		})
	}
}

func TestDecodeRecordRefusesBadRecords(t *testing.T) {
	for name, raw := range map[string]string{
		"not json":         `{`,
		"no rollout":       `{"checkpoint_id":"ck1","input":{},"boundary":{}}`,
		"foreign boundary": `{"checkpoint_id":"ck1","set":"s","input":{"rollout_id":"a","set":"s"},"boundary":{"rollout_id":"b"}}`,
		"result without receipt": `{"checkpoint_id":"ck1","set":"s","input":{"rollout_id":"a","set":"s"},"boundary":{"rollout_id":"a"},
			"result":{"rollout_id":"a"}}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := coordinator.DecodeRecord([]byte(raw))
			require.Error(t, err)
		})
	}
}

func requireType(t *testing.T, err error, typ string) {
	t.Helper()
	require.Error(t, err)
	var ae *temporal.ApplicationError
	require.True(t, errors.As(err, &ae), "error %v is not an application error", err)
	require.Equal(t, typ, ae.Type(), "error %v", err)
}

func flip(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	b[len(b)/2] ^= 0xff
	require.NoError(t, os.WriteFile(path, b, 0o644))
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	var files []string
	require.NoError(t, filepath.Walk(from, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			files = append(files, p)
		}
		return err
	}))
	sort.Strings(files)
	for _, p := range files {
		rel, err := filepath.Rel(from, p)
		require.NoError(t, err)
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(to, rel)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(to, rel), b, 0o644))
	}
}

func TestRemapEnvURL(t *testing.T) {
	moved := map[string]string{"http://old:1": "http://new:2"}
	tests := []struct{ name, url, want string }{
		{"moved", "http://old:1", "http://new:2"},
		{"other server", "http://else:3", "http://else:3"},
		{"default server", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := rollout.Input{Attempt: 1, Env: rollout.EnvRef{Name: "counter", URL: tt.url}}
			got := coordinator.RemapEnvURL(in, moved)
			want := in
			want.Env.URL = tt.want
			require.Equal(t, want, got)
		})
	}
}

// readAggregate reads the aggregate manifest of the checkpoint in dir.
func readAggregate(t *testing.T, dir, checkpointID string) (coordinator.AggregateManifest, error) {
	t.Helper()
	st, err := storage.Dir(dir)
	require.NoError(t, err)
	return coordinator.ReadAggregateManifest(context.Background(), st, checkpointID)
}
