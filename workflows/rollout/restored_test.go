package rollout_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/turnstile-rl/turnstile/activities/coordinator"
	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// parkRecord is a record as a rollout returns it.
func parkRecord(t *testing.T, mode envs.Mode, completed bool) []byte {
	t.Helper()
	d := func(s string) transcript.Digest { return transcript.DigestOf([]byte(s)) }
	in := rollout.Input{
		RolloutID: "s1-0001", Set: "s1", Attempt: 2, Task: json.RawMessage(`{"target":3}`),
		Env: rollout.EnvRef{Name: "counter"}, Policy: rollout.PolicyRef{Model: "scripted-counter"}, Seed: 7,
		Limits: rollout.Limits{MaxTurns: 8}, RequireAck: true,
	}
	b := rollout.Boundary{
		RolloutID: "s1-0001", Attempt: 2, Turn: 3, Head: d("head"), Tools: d("tools"), Style: envs.StyleTools,
		EnvMode: mode, Revision: 5, Seeded: true, Cursor: 1, LastCall: "s1-0001/a2/t3",
		Pending: &rollout.PendingCall{CallID: "s1-0001/a2/t3", Head: d("pending"), ToolCalls: []transcript.ToolCall{
			{ID: "c0", Name: "increment", Arguments: `{"amount":1}`}, {ID: "c1", Name: "increment", Arguments: `{"amount":1}`},
		}},
	}
	rec := rollout.ParkRecord{CheckpointID: "ck1", Set: "s1", Input: in, Boundary: b, Phase: rollout.PhaseParked}
	if completed {
		b.Pending, b.Cursor, b.Done = nil, 0, true
		rec.Boundary, rec.Phase = b, rollout.PhaseAwaitingAck
		res := rollout.Result{RolloutID: "s1-0001", Set: "s1", Attempt: 2, Reward: 1, Turns: 3, Head: d("final")}
		receipt, err := rollout.NewReceipt(res)
		require.NoError(t, err)
		res.Receipt = &receipt
		rec.Result = &res
	}
	raw, err := json.Marshal(rec)
	require.NoError(t, err)
	return raw
}

// A record turned into the next attempt's input is a valid RolloutInput:
// the boundary carried whole (same pending answer and cursor, so the same
// request ids), restart-only continuations starting over, completed results
// offered again with their receipt.
func TestRestoredInputsAreRolloutInputs(t *testing.T) {
	tests := []struct {
		name      string
		mode      envs.Mode
		completed bool
		kind      string
	}{
		{"export_restore continues", envs.ModeExportRestore, false, checkpoint.RestoreContinue},
		{"stateless continues", envs.ModeStateless, false, checkpoint.RestoreContinue},
		{"restart_only starts over", envs.ModeRestartOnly, false, checkpoint.RestoreStartOver},
		{"undeclared mode starts over", "", false, checkpoint.RestoreStartOver},
		{"completed is offered again", envs.ModeRestartOnly, true, checkpoint.RestoreOfferAgain},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec, err := coordinator.DecodeRecord(parkRecord(t, tc.mode, tc.completed))
			require.NoError(t, err)

			in, kind, err := coordinator.BuildRestoredInput(rec, "ck1", 3, nil)
			require.NoError(t, err)
			require.Equal(t, tc.kind, kind)

			want := rec.Input
			want.Attempt, want.HoldFor = 3, "ck1"
			switch tc.kind {
			case checkpoint.RestoreContinue:
				want.Resume = &rec.Boundary
			case checkpoint.RestoreOfferAgain:
				want.Resume, want.Completed = &rec.Boundary, rec.Result
			}
			require.Equal(t, want, in)

			raw, err := json.Marshal(in)
			require.NoError(t, err)
			var decoded rollout.Input
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			require.NoError(t, dec.Decode(&decoded))
			require.Equal(t, in, decoded, "the restored input round-trips as plain JSON")
		})
	}
	rec, err := coordinator.DecodeRecord(parkRecord(t, envs.ModeExportRestore, false))
	require.NoError(t, err)
	_, _, err = coordinator.BuildRestoredInput(rec, "ck1", 2, nil)
	require.ErrorContains(t, err, "not above")

	// A rollout pinned to a server that came back on a new address
	// continues against the new one.
	rec.Input.Env.URL = "http://old:1"
	in, _, err := coordinator.BuildRestoredInput(rec, "ck1", 3, map[string]string{"http://old:1": "http://new:2"})
	require.NoError(t, err)
	require.Equal(t, "http://new:2", in.Env.URL)
}

// A restored input held for the checkpoint runs as the Rollout workflow:
// parked until resumed, then it applies the pending call at the saved
// cursor with the saved request id, without a new model call or re-seed.
func TestRestoredInputResumesAtTheCursor(t *testing.T) {
	w := newWorld(2)
	env := newEnv(t, w)
	rec, err := coordinator.DecodeRecord(parkRecord(t, envs.ModeExportRestore, false))
	require.NoError(t, err)
	in, _, err := coordinator.BuildRestoredInput(rec, "ck1", 3, nil)
	require.NoError(t, err)
	in.RequireAck = false
	w.value, w.revision = 4, 5

	var seen []rollout.OperateEnvironmentInput
	w.operateHook = func(op rollout.OperateEnvironmentInput) { seen = append(seen, op) } // called under w.mu
	env.RegisterDelayedCallback(func() {
		w.mu.Lock()
		n := len(seen)
		w.mu.Unlock()
		require.Zero(t, n, "a held run does nothing before resume")
		env.UpdateWorkflow(rollout.UpdateResume, "r1", &testsuite.TestUpdateCallback{
			OnReject: func(err error) { assert.NoError(t, err, "resume rejected") },
			OnAccept: func() {}, OnComplete: func(any, error) {},
		}, rollout.ResumeRequest{CheckpointID: "ck1"})
	}, time.Minute)
	env.ExecuteWorkflow(rollout.Rollout, in)
	res := result(t, env)
	require.Equal(t, 3, res.Attempt)
	require.NotEmpty(t, seen)
	require.Equal(t, 3, seen[0].Attempt)
	require.Equal(t, protocol.OperateRequestID("s1-0001", 3, 1), seen[0].RequestID, "the pending call at the cursor, with its saved request id")
	require.NotContains(t, w.applied, protocol.SeedRequestID("s1-0001"), "no re-seed")
	require.NotEmpty(t, w.calls)
	require.Equal(t, 4, w.calls[0].Turn, "no repeated model call: the next call is turn 4")
}

// TestRestoredRunContinuesAsNewReleased: a restored run, once resumed, that
// continues as new hands on an input no longer held for the checkpoint (the
// resume it waited for will not come again).
func TestRestoredRunContinuesAsNewReleased(t *testing.T) {
	w := newWorld(2)
	env := newEnv(t, w)
	env.SetContinueAsNewSuggested(true)
	rec, err := coordinator.DecodeRecord(parkRecord(t, envs.ModeExportRestore, false))
	require.NoError(t, err)
	in, _, err := coordinator.BuildRestoredInput(rec, "ck1", 3, nil)
	require.NoError(t, err)
	w.value, w.revision = 4, 5
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflowNoRejection(rollout.UpdateResume, "r1", t, rollout.ResumeRequest{CheckpointID: "ck1"})
	}, time.Minute)
	env.ExecuteWorkflow(rollout.Rollout, in)
	next := continuedAs(t, env)
	require.Empty(t, next.HoldFor)
	require.NotNil(t, next.Resume)
}
