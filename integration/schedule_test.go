package integration_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/internal/retention"
	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// TestScheduledCheckpointsRetentionGC: a set's checkpoint schedule fires
// tagged checkpoints that the Temporal CLI lists and describes, pauses,
// keeps exactly the newest K and the pinned one, and a GC of the
// transcript store frees the blobs only a closed rollout referenced while
// every blob of a kept checkpoint or a held result stays; a restore from
// the pinned checkpoint still works.
func TestScheduledCheckpointsRetentionGC(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	c := newStack(t, "--latency", "50ms")
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	tc := trainer.New(c.client, rollout.TaskQueue)
	const set, keep = "sched", 2

	// A set whose results are held (running rollouts), and one whose
	// rollouts close: only the latter's transcripts are garbage.
	for i := range 3 {
		in := counterInput(set, i, target(i))
		in.RequireAck = true
		c.submit(ctx, in)
	}
	var done []client.WorkflowRun
	for i := range 2 {
		done = append(done, c.submit(ctx, counterInput("closed", i, 9+i)))
	}
	closed := c.results(ctx, done)
	require.Len(t, closed, 2)
	for i := range 3 {
		c.waitHeld(ctx, counterInput(set, i, 0).RolloutID)
	}

	root := filepath.Join(c.dir, "checkpoints")
	rootStore, err := storage.Dir(root)
	require.NoError(t, err)
	committed := func() []retention.Checkpoint {
		cps, err := retention.List(ctx, rootStore, set)
		require.NoError(t, err)
		return cps
	}
	id, err := tc.CreateSchedule(ctx, trainer.ScheduleRequest{
		Set: set, Root: root, Participants: []string{c.envURL}, Every: 2 * time.Second, Timeout: 30 * time.Second,
		Tag: "step-1", Keep: keep,
	})
	require.NoError(t, err)
	require.Equal(t, "checkpoints/"+set, id)

	// Pin the first checkpoint (tag step-1), then move the trainer on.
	// The tag lands beside the manifest right after the commit.
	c.waitFor("first scheduled checkpoint, tagged", nil, 2*time.Minute, func() bool {
		cps := committed()
		return len(cps) >= 1 && cps[0].Tag != ""
	})
	first := committed()[0]
	require.True(t, strings.HasPrefix(first.ID, "every-"+set+"-"), "scheduled checkpoint id %s", first.ID)
	require.Equal(t, "step-1", first.Tag)
	pinned, err := retention.Pin(ctx, rootStore, set, first.ID)
	require.NoError(t, err)
	require.Equal(t, []string{first.ID}, pinned)
	require.NoError(t, tc.SetScheduleTag(ctx, set, "step-2"))

	// At least four fires after the pin, the newest tagged step-2.
	c.waitFor("four scheduled checkpoints", nil, 3*time.Minute, func() bool {
		s, err := tc.DescribeSchedule(ctx, set)
		require.NoError(t, err)
		return s.Fired >= 4
	})
	out, err := c.starter(ctx, "schedule", "pause", "--set", set, "--note", "test pauses it")
	require.NoError(t, err, out)
	s, err := tc.DescribeSchedule(ctx, set)
	require.NoError(t, err)
	require.True(t, s.Paused)
	require.Equal(t, "step-2", s.Tag)
	for _, wid := range s.Recent {
		err := c.client.GetWorkflow(ctx, wid, "").Get(ctx, nil)
		require.NoError(t, err, "scheduled checkpoint %s", wid)
	}

	// The Temporal CLI sees the schedule, paused, and lists it.
	out, err = c.temporalCLI(ctx, "schedule", "describe", "--schedule-id", id, "-o", "json")
	require.NoError(t, err, out)
	require.Contains(t, out, "test pauses it", "the CLI describes the pause note:\n%s", out)
	require.Contains(t, cliScheduleInput(t, out), `"tag":"step-2"`, "the CLI shows the tag the next checkpoints carry")
	c.waitFor("schedule in temporal schedule list", nil, time.Minute, func() bool {
		out, err := c.temporalCLI(ctx, "schedule", "list")
		return err == nil && strings.Contains(out, id)
	})

	// Retention kept exactly the newest K and the pinned one.
	cps := committed()
	kept, dropped := retention.Select(cps, keep)
	require.Empty(t, dropped, "retention after each fire left only what it keeps: %+v", cps)
	require.Len(t, cps, keep+1, "the newest %d and the pinned one: %+v", keep, cps)
	require.Equal(t, "step-2", kept[0].Tag, "the newest checkpoint carries the new tag")
	require.Equal(t, first.ID, kept[len(kept)-1].ID)
	require.True(t, kept[len(kept)-1].Pinned)

	// GC: every stored blob made a day old, so only what is marked stays.
	backdate(t, c.store, 24*time.Hour)
	out, err = c.starter(ctx, "gc", "--root", root, "--set", set, "--keep", "2", "--sweep", "--transcript-dir", c.store, "--grace", "1h", "-o", "json")
	require.NoError(t, err, out)
	require.Contains(t, out, "warning: --grace 1h0m0s is below 2h0m0s", "a short grace is warned of")
	var res trainer.GCResult
	require.NoError(t, json.Unmarshal([]byte(out[strings.LastIndex(out, "\n{")+1:]), &res), out)
	t.Logf("gc: %+v", res)
	require.Empty(t, res.CheckpointsDeleted)
	require.Equal(t, keep+1, res.MarkedCheckpoints)
	require.GreaterOrEqual(t, res.LiveRollouts, 3)
	require.Positive(t, res.Sweep.FreedBlobs, "the closed rollouts' own blobs are freed")
	require.Positive(t, res.Sweep.FreedBytes)
	require.Equal(t, res.Marked, res.Sweep.KeptBlobs, "every kept blob is a marked one")

	store, err := transcriptstore.Open(c.store)
	require.NoError(t, err)
	for _, r := range closed {
		_, err := store.Get(ctx, r.Head)
		require.ErrorIs(t, err, transcript.ErrNotFound, "the head of closed rollout %s was freed", r.RolloutID)
	}
	for i := range 3 {
		st := c.status(ctx, counterInput(set, i, 0).RolloutID)
		_, err := store.Load(ctx, st.Result.Head)
		require.NoError(t, err, "held result of %s lost its transcript", st.Result.RolloutID)
	}

	// A restore from the pinned checkpoint still works.
	rr, err := tc.Restore(ctx, trainer.RestoreRequest{CheckpointID: first.ID, Root: root, Participants: []string{c.envURL}}, true)
	require.NoError(t, err)
	require.Equal(t, 3, rr.Restored+rr.StartedOver+rr.OfferedAgain, "%+v", rr)
	for id, r := range c.acknowledgeAll(ctx, set, 3) {
		require.Equal(t, 1.0, r.Reward, id)
	}
	require.NoError(t, tc.DeleteSchedule(ctx, set))
}

// waitHeld waits until rollout id holds its completed result.
func (c *cluster) waitHeld(ctx context.Context, id string) {
	c.t.Helper()
	c.waitFor("held result of "+id, nil, 2*time.Minute, func() bool {
		return c.statusOK(ctx, id).Phase == rollout.PhaseAwaitingAck
	})
}

func (c *cluster) statusOK(ctx context.Context, id string) rollout.Status {
	var st rollout.Status
	v, err := c.client.QueryWorkflow(ctx, rollout.WorkflowID(id), "", rollout.QueryStatus)
	if err == nil {
		_ = v.Get(&st)
	}
	return st
}

func (c *cluster) status(ctx context.Context, id string) rollout.Status {
	c.t.Helper()
	v, err := c.client.QueryWorkflow(ctx, rollout.WorkflowID(id), "", rollout.QueryStatus)
	require.NoError(c.t, err)
	var st rollout.Status
	require.NoError(c.t, v.Get(&st))
	require.NotNil(c.t, st.Result, "%s holds no result", id)
	return st
}

// backdate sets the modification time of every file under dir to age ago.
func backdate(t *testing.T, dir string, age time.Duration) {
	t.Helper()
	old := time.Now().Add(-age)
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		return os.Chtimes(p, old, old)
	}))
}

// cliScheduleInput is the action input of `temporal schedule describe -o
// json`: the CLI prints payloads base64-encoded.
func cliScheduleInput(t *testing.T, out string) string {
	t.Helper()
	var d struct {
		Schedule struct {
			Action struct {
				StartWorkflow struct {
					Input struct {
						Payloads []struct {
							Data []byte `json:"data"`
						} `json:"payloads"`
					} `json:"input"`
				} `json:"startWorkflow"`
			} `json:"action"`
		} `json:"schedule"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &d), out)
	p := d.Schedule.Action.StartWorkflow.Input.Payloads
	require.Len(t, p, 1, out)
	return string(p[0].Data)
}
