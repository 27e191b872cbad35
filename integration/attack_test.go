package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// TestDataPlaneAttackRefused is the hand-made data-plane fence attack, against a
// live rollout on real processes: a start of attempt 9 for a rollout that
// runs as attempt 0, then mutations under attempt 9. Before the fix the
// start replaced the live session with a fresh episode, every later call of
// the real attempt 0 was refused stale_attempt and the caller owned the
// session. Now it is refused without a token (401), refused with the data
// token (409 attempt_not_installed: only the control plane installs an
// attempt), the data token does not open the control plane, and the live
// rollout finishes exactly as its untouched twin does. Then the Rollout
// workflow's own start-over path (attempt 1 of the same rollout, installed
// through the control plane by the worker) still runs to the end.
func TestDataPlaneAttackRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	c := newStack(t, "--latency", "150ms", "--jitter", "0s")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	victim, twin := counterInput("attack", 0, 6), counterInput("attack-twin", 0, 6)
	runs := []client.WorkflowRun{c.submit(ctx, victim), c.submit(ctx, twin)}
	env := c.dataClient(c.envURL)
	c.waitFor("victim mid-flight", nil, 2*time.Minute, func() bool {
		info, err := env.Session(ctx, victim.RolloutID)
		return err == nil && info.Revision >= 1 && !info.Retired
	})
	before := c.envStats(ctx)

	hijack := func(auth, path string, body any) (int, string) {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.envURL+path, bytes.NewReader(b))
		require.NoError(t, err)
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var eb protocol.ErrorBody
		_ = json.Unmarshal(raw, &eb)
		t.Logf("attack POST %s (token %q): %d %s", path, auth, resp.StatusCode, raw)
		return resp.StatusCode, eb.Error.Code
	}
	start := protocol.StartRequest{Identity: protocol.Identity{RolloutID: victim.RolloutID, Attempt: 9, RequestID: "hijack/seed"},
		Env: "counter", Seed: 1, Task: json.RawMessage(`{"target":1}`)}
	operate := protocol.OperateRequest{Identity: protocol.Identity{RolloutID: victim.RolloutID, Attempt: 9, RequestID: "hijack/t1"},
		Tool: "increment", Arguments: json.RawMessage(`{"amount":10}`)}
	status, code := hijack("", "/v1/sessions", start)
	require.Equal(t, http.StatusUnauthorized, status, code)
	status, code = hijack(c.dataToken, "/v1/sessions", start)
	require.Equal(t, []any{http.StatusConflict, protocol.CodeAttemptNotInstalled}, []any{status, code})
	status, code = hijack(c.dataToken, "/v1/sessions/"+victim.RolloutID+"/operate", operate)
	require.Equal(t, []any{http.StatusConflict, protocol.CodeAttemptNotInstalled}, []any{status, code})
	status, code = hijack(c.dataToken, "/v1/control/sessions/"+victim.RolloutID+"/authorise", map[string]int{"attempt": 9})
	require.Equal(t, []any{http.StatusUnauthorized, protocol.CodeUnauthorized}, []any{status, code})

	info, err := env.Session(ctx, victim.RolloutID)
	require.NoError(t, err)
	require.Equal(t, 0, info.Attempt, "the attack changed the live session's attempt")
	after := c.envStats(ctx)
	require.Equal(t, before.Refused+2, after.Refused, "the two data-plane refusals are counted, the 401s are not")

	res := c.results(ctx, runs)
	v, w := res[victim.RolloutID], res[twin.RolloutID]
	t.Logf("victim: attempt %d, reward %v, %d turns; twin: reward %v, %d turns", v.Attempt, v.Reward, v.Turns, w.Reward, w.Turns)
	require.Equal(t, 0, v.Attempt)
	require.Equal(t, 1.0, v.Reward, "the live rollout finished unharmed")
	require.Equal(t, outcome{Reward: w.Reward, Turns: w.Turns, Head: string(w.Head), Calls: w.Usage.Calls},
		outcome{Reward: v.Reward, Turns: v.Turns, Head: string(v.Head), Calls: v.Usage.Calls}, "victim and untouched twin differ")

	// The workflow's own start-over: attempt 1 of the same rollout. The
	// worker's StartEnvironment is refused attempt_not_installed, installs
	// attempt 1 through the control plane (AuthoriseAttempt) and starts over.
	again := victim
	again.Attempt = 1
	res = c.results(ctx, []client.WorkflowRun{c.submit(ctx, again)})
	r := res[victim.RolloutID]
	require.Equal(t, 1, r.Attempt)
	require.Equal(t, v.Reward, r.Reward)
	require.Equal(t, v.Head, r.Head, "the start-over is a fresh episode equal to the first")
	info, err = env.Session(ctx, victim.RolloutID)
	require.NoError(t, err)
	require.Equal(t, protocol.SessionInfo{RolloutID: victim.RolloutID, Env: "counter", Attempt: 1, Revision: info.Revision, Retired: true}, info)
}
