package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/turnstile-rl/turnstile/gateway"
	"github.com/turnstile-rl/turnstile/internal/stack"
	"github.com/turnstile-rl/turnstile/internal/visibility"
	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// gatewayToken and gatewayOperatorToken are the trainer and operator
// tokens of the gateways the tests start.
const (
	gatewayToken         = "test-gateway-token"
	gatewayOperatorToken = "test-gateway-operator-token"
)

// startGateway starts a gateway on addr ("127.0.0.1:0" the first time; a
// restarted one keeps its address, as behind a load balancer) and returns
// it with its base URL.
func (c *cluster) startGateway(addr string, args ...string) (*proc, string) {
	c.t.Helper()
	return c.startGatewayEnv(addr, nil, args...)
}

// startGatewayEnv is startGateway with extra environment variables (e.g.
// armed failpoints).
func (c *cluster) startGatewayEnv(addr string, extraEnv []string, args ...string) (*proc, string) {
	c.t.Helper()
	ready := filepath.Join(c.dir, fmt.Sprintf("gateway-ready-%d", time.Now().UnixNano()))
	args = append([]string{"--addr", addr, "--ready-file", ready, "--token", gatewayToken, "--operator-token", gatewayOperatorToken,
		"--checkpoint-root", filepath.Join(c.dir, "checkpoints"), "--log-level", "warn"}, args...)
	// The workers' destinations (startWorker's), so the gateway admits
	// what they do.
	env := append([]string{"TEMPORAL_ADDRESS=" + c.hostPort, "TEMPORAL_NAMESPACE=default",
		"TURNSTILE_TRANSCRIPT_DIR=" + c.store, "TURNSTILE_CONTROL_TOKEN=" + c.token,
		"TURNSTILE_ENV_URL=" + c.envURL, "TURNSTILE_MODEL_BASE_URL=" + c.modelURL,
		"TURNSTILE_ALLOWED_PARTICIPANTS=" + stack.Loopback, "TURNSTILE_ALLOWED_MODEL_URLS=" + stack.Loopback}, extraEnv...)
	p := c.start("gateway", filepath.Join(bins.dir, "gateway"), args, env...)
	var base string
	c.waitFor("gateway", p, 30*time.Second, func() bool {
		data, err := os.ReadFile(ready)
		if err != nil || len(data) == 0 {
			return false
		}
		base = strings.TrimSpace(string(data))
		return healthy(base + "/healthz")
	})
	return p, base
}

// gw calls a gateway.
type gw struct {
	t     testing.TB
	base  string
	token string
}

// do sends a JSON request and decodes a 2xx answer into out; it returns the
// status and the raw body.
func (g gw) do(ctx context.Context, method, path string, body, out any) (int, []byte) {
	g.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(g.t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, g.base+path, rd)
	require.NoError(g.t, err)
	if g.token != "" {
		req.Header.Set("Authorization", "Bearer "+g.token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(g.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(g.t, err)
	if out != nil && resp.StatusCode/100 == 2 {
		require.NoError(g.t, json.Unmarshal(raw, out), "%s", raw)
	}
	return resp.StatusCode, raw
}

// feedItem is what the tests read of a feed item.
type feedItem struct {
	RolloutID string           `json:"rollout_id"`
	Status    string           `json:"status"`
	Failure   string           `json:"failure"`
	Held      bool             `json:"held"`
	Receipt   *gateway.Receipt `json:"receipt"`
	Messages  []json.RawMessage
}

type feedPage struct {
	Items  []feedItem     `json:"items"`
	Cursor string         `json:"cursor"`
	Health gateway.Health `json:"health"`
	Done   bool           `json:"done"`
}

func (g gw) feed(ctx context.Context, set, cursor string, max, waitMS int) feedPage {
	g.t.Helper()
	var p feedPage
	q := url.Values{"max": {fmt.Sprint(max)}, "wait_ms": {fmt.Sprint(waitMS)}}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	status, raw := g.do(ctx, "GET", "/v1/sets/"+set+"/feed?"+q.Encode(), nil, &p)
	require.Equal(g.t, http.StatusOK, status, "feed: %s", raw)
	return p
}

func (g gw) ack(ctx context.Context, set, requestID string, items []feedItem) gateway.AckResponse {
	g.t.Helper()
	req := gateway.AckRequest{RequestID: requestID}
	for _, it := range items {
		require.NotNil(g.t, it.Receipt, "item %s has no receipt", it.RolloutID)
		req.Receipts = append(req.Receipts, *it.Receipt)
	}
	var out gateway.AckResponse
	status, raw := g.do(ctx, "POST", "/v1/sets/"+set+"/acks", req, &out)
	require.Equal(g.t, http.StatusOK, status, "acks: %s", raw)
	return out
}

func ids(items []feedItem) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.RolloutID
	}
	return out
}

// TestGatewayFeed: a set submitted through the gateway (a repeat of the
// request starts nothing; the same request id with another body, or no
// token, changes nothing) is consumed through the feed: an unacknowledged
// page comes back to a reader that starts over, an acknowledged result
// never comes back, and a SIGKILLed and restarted gateway continues from
// the cursor and from nothing alike. Every rollout is delivered and
// acknowledged exactly once; then the feed is done, and the summary and
// export agree.
func TestGatewayFeed(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	c := newStack(t)
	p, base := c.startGateway("127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	g := gw{t: t, base: base, token: gatewayToken}

	const set, n = "gwfeed", 12
	sub := gateway.SubmitRequest{RequestID: "submit-1", Set: set, Envs: []string{"counter"}, Count: n}
	status, raw := (gw{t: t, base: base}).do(ctx, "POST", "/v1/sets", sub, nil)
	require.Equal(t, http.StatusUnauthorized, status, "%s", raw)
	var res gateway.SubmitResponse
	status, raw = g.do(ctx, "POST", "/v1/sets", sub, &res)
	require.Equal(t, http.StatusOK, status, "%s", raw)
	require.Equal(t, gateway.SubmitResponse{Set: set, RequestID: "submit-1", Rollouts: n, Started: n, MaxInFlight: trainer.DefaultMaxInFlight}, res)
	status, raw = g.do(ctx, "POST", "/v1/sets", sub, &res)
	require.Equal(t, http.StatusOK, status, "%s", raw)
	require.Equal(t, gateway.SubmitResponse{Set: set, RequestID: "submit-1", Rollouts: n, Existing: n, MaxInFlight: trainer.DefaultMaxInFlight}, res, "a repeat starts nothing")
	other := sub
	other.Count = n + 1
	status, raw = g.do(ctx, "POST", "/v1/sets", other, nil)
	require.Equal(t, http.StatusConflict, status, "%s", raw)

	// The first page, not acknowledged, comes back to a reader starting over.
	first := g.feed(ctx, set, "", 4, 30_000)
	require.NotEmpty(t, first.Items)
	again := g.feed(ctx, set, "", 4, 30_000)
	require.Equal(t, ids(first.Items)[0], ids(again.Items)[0], "an unacknowledged result is delivered again")

	delivered := map[string]string{} // rollout id → sha256
	take := func(items []feedItem) {
		for _, it := range items {
			require.Equal(t, "completed", it.Status, "%s: %s", it.RolloutID, it.Failure)
			require.True(t, it.Held)
			_, seen := delivered[it.RolloutID]
			require.False(t, seen, "rollout %s delivered twice", it.RolloutID)
			delivered[it.RolloutID] = it.Receipt.SHA256
			require.NotEmpty(t, it.Messages, "the item carries its trajectory")
		}
	}
	take(first.Items)
	acked := g.ack(ctx, set, "ack-1", first.Items)
	require.Equal(t, len(first.Items), acked.Receipts)
	repeat := g.ack(ctx, set, "ack-1", first.Items)
	require.Equal(t, acked, repeat, "a repeated acknowledgement answers the same (and sends nothing again)")

	// Acknowledged results never come back, from the start or the cursor.
	fresh := g.feed(ctx, set, "", n, 30_000)
	for _, id := range ids(fresh.Items) {
		require.NotContains(t, ids(first.Items), id, "an acknowledged result came back")
	}

	// A checkpoint through the gateway: a repeat finds the same run, the
	// same id under another request is a conflict; it commits with the held
	// results in it.
	// (The operator role's token.)
	op := gw{t: t, base: base, token: gatewayOperatorToken}
	ck := gateway.CheckpointRequest{RequestID: "ck-1", CheckpointID: "gwk1", Set: set, Participants: []string{c.envURL}, Timeout: "60s"}
	var started, repeated gateway.StartedResponse
	status, raw = op.do(ctx, "POST", "/v1/checkpoints", ck, &started)
	require.Equal(t, http.StatusAccepted, status, "%s", raw)
	status, raw = op.do(ctx, "POST", "/v1/checkpoints", ck, &repeated)
	require.Equal(t, http.StatusAccepted, status, "%s", raw)
	require.True(t, repeated.Existing)
	require.Equal(t, started.RunID, repeated.RunID)
	// Started through the gateway, it runs on the control plane's queue, not
	// behind the rollouts' tasks.
	desc, err := c.client.DescribeWorkflow(ctx, started.WorkflowID, started.RunID)
	require.NoError(t, err)
	require.Equal(t, checkpoint.ControlTaskQueue(rollout.TaskQueue), desc.RawResponse.GetExecutionConfig().GetTaskQueue().GetName(), "the checkpoint's task queue")
	ck.RequestID = "ck-2"
	status, raw = op.do(ctx, "POST", "/v1/checkpoints", ck, nil)
	require.Equal(t, http.StatusConflict, status, "%s", raw)
	var ckStatus gateway.CheckpointStatus
	c.waitFor("checkpoint gwk1", nil, time.Minute, func() bool {
		status, raw := op.do(ctx, "GET", "/v1/checkpoints/gwk1", nil, &ckStatus)
		require.Equal(t, http.StatusOK, status, "%s", raw)
		return ckStatus.Status != gateway.RunRunning
	})
	require.Equal(t, gateway.RunCompleted, ckStatus.Status, "checkpoint: %s", ckStatus.Error)
	require.Positive(t, ckStatus.Result.Members, "%+v", ckStatus.Result)

	// A gateway SIGKILLed and restarted loses nothing: the cursor of the
	// dead one works on the new one.
	cursor := first.Cursor
	p.kill()
	_, base2 := c.startGateway(strings.TrimPrefix(base, "http://"))
	g.base = base2
	for len(delivered) < n {
		page := g.feed(ctx, set, cursor, 3, 30_000)
		take(page.Items)
		if len(page.Items) > 0 {
			g.ack(ctx, set, fmt.Sprintf("ack-%s", page.Items[0].RolloutID), page.Items)
		}
		cursor = page.Cursor
		require.False(t, page.Done && len(delivered) < n, "done with %d of %d delivered", len(delivered), n)
	}
	// The feed ordered by the rollouts' own finish times.
	count, err := c.client.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{
		Query: fmt.Sprintf("%s AND %s >= %s", rollout.SetQuery(set), rollout.SARolloutFinishedAt, visibility.VisibilityTime(time.Unix(0, 0))),
	})
	require.NoError(t, err)
	require.EqualValues(t, n, count.GetCount(), "every rollout recorded when it finished")
	end := g.feed(ctx, set, "", n, 10_000)
	require.Empty(t, end.Items, "nothing is left once everything was acknowledged")
	require.True(t, end.Done, "health %+v", end.Health)
	require.Equal(t, n, end.Health.Completed)

	var sum gateway.SetResponse
	status, raw = g.do(ctx, "GET", "/v1/sets/"+set, nil, &sum)
	require.Equal(t, http.StatusOK, status, "%s", raw)
	require.Equal(t, n, sum.Overall.Completed)
	status, raw = g.do(ctx, "GET", "/v1/sets/"+set+"/export", nil, nil)
	require.Equal(t, http.StatusOK, status, "%s", raw)
	require.Equal(t, n, bytes.Count(raw, []byte("\n")))
}

// TestGatewayStalenessAndWatchdog: with the policy reporting version
// step-3, a trainer at version 10 with max lag 2 finds the running
// rollouts stale, flags them (nothing changes) and cancels them: they reach
// the feed as cancelled, with their failure. Then the policy server is
// killed in the middle of a second set, and its feed answers 409
// set_stalled, naming the model errors, within the watchdog window.
func TestGatewayStalenessAndWatchdog(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	const window = 5 * time.Second
	c := newCluster(t)
	c.startTemporal()
	c.startEnvServer()
	policy := c.startPolicyServer("--latency", "400ms", "--policy-version", "step-3")
	c.startWorker()
	_, base := c.startGateway("127.0.0.1:0", "--stall-window", window.String())
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	g := gw{t: t, base: base, token: gatewayToken}
	submit := func(set string, n int) {
		status, raw := g.do(ctx, "POST", "/v1/sets", gateway.SubmitRequest{RequestID: "s-" + set, Set: set, Envs: []string{"counter"}, Count: n}, nil)
		require.Equal(t, http.StatusOK, status, "%s", raw)
	}

	submit("gwstale", 4)
	var stale gateway.PolicyVersionResponse
	c.waitFor("a stale rollout", nil, time.Minute, func() bool {
		status, raw := g.do(ctx, "POST", "/v1/sets/gwstale/policy_version", gateway.PolicyVersionRequest{RequestID: "pv-flag", Version: 10, MaxLag: 2, Action: gateway.ActionFlag}, &stale)
		if status == http.StatusNotFound {
			return false // the submission is not in visibility yet
		}
		require.Equal(t, http.StatusOK, status, "%s", raw)
		return stale.Stale > 0
	})
	require.Equal(t, stale.Stale, stale.Flagged)
	require.Zero(t, stale.Cancelled, "flag cancels nothing")
	require.EqualValues(t, 7, stale.Rollouts[0].Lag, "version 10 against step-3")
	var cancelled gateway.PolicyVersionResponse
	status, raw := g.do(ctx, "POST", "/v1/sets/gwstale/policy_version", gateway.PolicyVersionRequest{RequestID: "pv-cancel", Version: 10, MaxLag: 2, Action: gateway.ActionCancel}, &cancelled)
	require.Equal(t, http.StatusOK, status, "%s", raw)
	require.Positive(t, cancelled.Cancelled, "%+v", cancelled)
	seen, cursor := map[string]string{}, ""
	for done := false; !done; {
		page := g.feed(ctx, "gwstale", cursor, 10, 20_000)
		for _, it := range page.Items {
			seen[it.RolloutID] = it.Status
			if it.Status == "canceled" {
				require.NotEmpty(t, it.Failure, "a cancelled rollout says why")
			}
		}
		var held []feedItem
		for _, it := range page.Items {
			if it.Held {
				held = append(held, it)
			}
		}
		if len(held) > 0 {
			g.ack(ctx, "gwstale", "ack-"+page.Cursor[len(page.Cursor)-8:], held)
		}
		cursor, done = page.Cursor, page.Done
	}
	require.Len(t, seen, 4)
	ncancelled := 0
	for _, st := range seen {
		if st == "canceled" {
			ncancelled++
		}
	}
	require.Equal(t, cancelled.Cancelled, ncancelled, "feed %v", seen)

	// The policy server dies mid-set: the feed says so within the window.
	submit("gwstall", 6)
	c.waitFor("the set under way", nil, time.Minute, func() bool {
		var s gateway.SetResponse
		status, _ := g.do(ctx, "GET", "/v1/sets/gwstall", nil, &s)
		return status == http.StatusOK && s.Health.Running > 0
	})
	policy.kill()
	killed := time.Now()
	var body gateway.ErrorBody
	for {
		q := url.Values{"max": {"10"}, "wait_ms": {"2000"}}
		status, raw := g.do(ctx, "GET", "/v1/sets/gwstall/feed?"+q.Encode(), nil, nil)
		if status == http.StatusConflict {
			require.NoError(t, json.Unmarshal(raw, &body))
			break
		}
		require.Equal(t, http.StatusOK, status, "%s", raw)
		var page feedPage
		require.NoError(t, json.Unmarshal(raw, &page))
		if len(page.Items) > 0 {
			g.ack(ctx, "gwstall", fmt.Sprintf("ack-%d", time.Now().UnixNano()), page.Items)
		}
		require.Less(t, time.Since(killed), 3*window, "no set_stalled %s after the policy server died; health %+v", time.Since(killed), page.Health)
	}
	elapsed := time.Since(killed)
	t.Logf("set_stalled %s after the policy server was killed (window %s): %s", elapsed, window, body.Error.Message)
	require.Equal(t, gateway.CodeSetStalled, body.Error.Code)
	require.NotNil(t, body.Health)
	require.Equal(t, "stalled", body.Health.State)
	require.Positive(t, body.Health.ModelErrorRate, "the model errors are named: %+v", body.Health)
	require.Contains(t, body.Error.Message, "model calls failing")
}
