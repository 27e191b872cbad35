package integration_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/gateway"
)

// TestGatewayAckRequestID: an acknowledgement's request_id is an
// idempotency key that outlives the gateway. A batch with a receipt that
// does not match is a 409 naming that receipt (receipts[1].sha256) and
// acknowledges nothing; once a batch has succeeded, a SIGKILLed gateway's
// replacement answers its repeat exactly as the first answered, and
// refuses the same request_id with other receipts (409 naming request_id)
// without acknowledging them.
func TestGatewayAckRequestID(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	c := newStack(t)
	p, base := c.startGateway("127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	g := gw{t: t, base: base, token: gatewayToken}

	const set, n = "gwacks", 4
	status, raw := g.do(ctx, "POST", "/v1/sets", gateway.SubmitRequest{RequestID: "submit-1", Set: set, Envs: []string{"counter"}, Count: n}, nil)
	require.Equal(t, http.StatusOK, status, "%s", raw)
	var held []feedItem
	c.waitFor("every rollout holding its result", nil, 2*time.Minute, func() bool {
		held = g.feed(ctx, set, "", n, 5_000).Items
		return len(held) == n
	})

	ackBody := func(requestID string, items ...feedItem) gateway.AckRequest {
		req := gateway.AckRequest{RequestID: requestID}
		for _, it := range items {
			req.Receipts = append(req.Receipts, *it.Receipt)
		}
		return req
	}
	conflict := func(g gw, body gateway.AckRequest) gateway.ErrorDetail {
		t.Helper()
		status, raw := g.do(ctx, "POST", "/v1/sets/"+set+"/acks", body, nil)
		require.Equal(t, http.StatusConflict, status, "%s", raw)
		var e gateway.ErrorBody
		require.NoError(t, json.Unmarshal(raw, &e), "%s", raw)
		require.Equal(t, gateway.CodeConflict, e.Error.Code)
		return e.Error
	}

	// A receipt that does not match: named by its place in the request.
	bad := ackBody("ack-bad", held[0], held[1])
	bad.Receipts[1].SHA256 = strings.Repeat("0", 64)
	e := conflict(g, bad)
	require.Equal(t, "receipts[1].sha256", e.Field, "%s", e.Message)
	require.Contains(t, e.Message, "receipts[1]: rollout "+held[1].RolloutID)
	require.NotContains(t, e.Message, "line ")

	// Refused, the request id is free: the corrected batch goes through.
	var first gateway.AckResponse
	status, raw = g.do(ctx, "POST", "/v1/sets/"+set+"/acks", ackBody("ack-bad", held[0], held[1]), &first)
	require.Equal(t, http.StatusOK, status, "%s", raw)
	require.Equal(t, gateway.AckResponse{Receipts: 2, Acknowledged: 2}, first)

	// Another gateway, after this one is SIGKILLed, knows the request.
	p.kill()
	_, base = c.startGateway("127.0.0.1:0")
	g2 := gw{t: t, base: base, token: gatewayToken}
	var again gateway.AckResponse
	status, raw = g2.do(ctx, "POST", "/v1/sets/"+set+"/acks", ackBody("ack-bad", held[0], held[1]), &again)
	require.Equal(t, http.StatusOK, status, "%s", raw)
	require.Equal(t, first, again, "a repeat answers what the request answered")

	e = conflict(g2, ackBody("ack-bad", held[2], held[3]))
	require.Equal(t, "request_id", e.Field, "%s", e.Message)
	left := g2.feed(ctx, set, "", n, 0).Items
	require.ElementsMatch(t, ids(held[2:]), ids(left), "the refused batch acknowledged nothing")

	var second gateway.AckResponse
	status, raw = g2.do(ctx, "POST", "/v1/sets/"+set+"/acks", ackBody("ack-2", held[2], held[3]), &second)
	require.Equal(t, http.StatusOK, status, "%s", raw)
	require.Equal(t, gateway.AckResponse{Receipts: 2, Acknowledged: 2}, second)
}
