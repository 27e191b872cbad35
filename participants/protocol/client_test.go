package protocol_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// TestClientsSendEveryRoute pins the method, path and token each client
// method sends: the paths are derived from the Route constants the server's
// mux registers, and must stay what they were when spelled out.
func TestClientsSendEveryRoute(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.EscapedPath()+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		_, _ = w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	ctx := context.Background()
	c := protocol.NewClient(srv.URL+"/", nil)
	cc := protocol.NewControlClient(srv.URL, "tok", nil)
	id := protocol.Identity{RolloutID: "set/r 1"}
	calls := []func() error{
		func() error { _, err := c.Start(ctx, protocol.StartRequest{Identity: id}); return err },
		func() error { _, err := c.Operate(ctx, protocol.OperateRequest{Identity: id}); return err },
		func() error { _, err := c.Verify(ctx, protocol.VerifyRequest{Identity: id}); return err },
		func() error { _, err := c.Session(ctx, id.RolloutID); return err },
		func() error { _, err := c.Stats(ctx); return err },
		func() error { _, err := cc.Capabilities(ctx); return err },
		func() error { _, err := cc.Status(ctx); return err },
		func() error { _, err := cc.Prepare(ctx, protocol.PrepareRequest{}); return err },
		func() error { _, err := cc.Commit(ctx, protocol.CommitRequest{}); return err },
		func() error { _, err := cc.Restore(ctx, protocol.RestoreRequest{}); return err },
		func() error { _, err := cc.Resume(ctx, "k"); return err },
		func() error { _, err := cc.ResumeRestore(ctx, "k", "r"); return err },
		func() error { _, err := cc.Retire(ctx, "r", 1); return err },
	}
	for i, call := range calls {
		require.NoError(t, call(), "call %d", i)
	}
	want := []string{
		"POST /v1/sessions ",
		"POST /v1/sessions/set%2Fr%201/operate ",
		"POST /v1/sessions/set%2Fr%201/verify ",
		"GET /v1/sessions/set%2Fr%201 ",
		"GET /v1/stats ",
		"GET /v1/control/capabilities Bearer tok",
		"GET /v1/control/status Bearer tok",
		"POST /v1/control/prepare Bearer tok",
		"POST /v1/control/commit Bearer tok",
		"POST /v1/control/restore Bearer tok",
		"POST /v1/control/resume Bearer tok",
		"POST /v1/control/resume Bearer tok",
		"POST /v1/control/retire Bearer tok",
	}
	require.True(t, slices.Equal(seen, want), "sent\n%q\nwant\n%q", seen, want)
}

// TestRemoteError: an error answer in the envelope keeps its code and
// message; anything else is named by its status.
func TestRemoteError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/stats" {
			http.Error(w, "gateway down", http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"error":{"code":"stale_attempt","message":"old"}}`))
	}))
	defer srv.Close()
	c := protocol.NewClient(srv.URL, nil)
	var re *protocol.RemoteError
	_, err := c.Start(context.Background(), protocol.StartRequest{})
	require.ErrorAs(t, err, &re, "start: %v", err)
	require.Equal(t, protocol.RemoteError{Status: 409, Code: protocol.CodeStaleAttempt, Message: "old"}, *re, "start: %v", err)
	_, err = c.Stats(context.Background())
	require.ErrorAs(t, err, &re, "stats: %v", err)
	require.Equal(t, protocol.RemoteError{Status: 502, Code: "http_502", Message: "gateway down"}, *re, "stats: %v", err)
}
