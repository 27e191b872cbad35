package main

import (
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// With an API key configured, every route but /healthz asks for it.
func TestAPIKey(t *testing.T) {
	const key = "policy-test-api-key-0123"
	t.Setenv("TURNSTILE_POLICY_API_KEY", key)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0"}, io.Discard, func(u string) { ready <- u })
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	var base string
	select {
	case base = <-ready:
	case err := <-done:
		done <- err
		t.Fatalf("run ended before listening: %v", err)
	}
	status := func(url, token string) int {
		t.Helper()
		req, err := http.NewRequest("GET", url, nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusUnauthorized, status(base+"/models", ""))
	require.Equal(t, http.StatusUnauthorized, status(base+"/models", "wrong-key-of-some-length"))
	require.Equal(t, http.StatusOK, status(base+"/models", key))
	require.Equal(t, http.StatusOK, status(base[:len(base)-len("/v1")]+"/healthz", ""))
}

func TestAPIKeyTooShort(t *testing.T) {
	t.Setenv("TURNSTILE_POLICY_API_KEY", "short")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A server that accepted the key would serve until cancelled.
	err := run(ctx, []string{"--listen", "127.0.0.1:0"}, io.Discard, func(string) { cancel() })
	require.ErrorContains(t, err, "--api-key (or $TURNSTILE_POLICY_API_KEY): 5 characters, want at least 16")
}
