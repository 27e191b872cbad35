package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/turnstile-rl/turnstile/gateway"
	"github.com/turnstile-rl/turnstile/internal/httpserver"
	"github.com/turnstile-rl/turnstile/internal/testsupport"
)

// stubBackend answers nothing: the timeout tests never get as far as the
// backend.
type stubBackend struct{ gateway.Backend }

const timeoutTestToken = "gateway-timeout-test-token"

// The gateway closes an idle keep-alive connection after the idle timeout
// and cuts off a submission body trickled by a token holder.
func TestHTTPTimeouts(t *testing.T) {
	t.Setenv(httpserver.EnvIdleTimeout, "300ms")
	t.Setenv(httpserver.EnvReadTimeout, "1s")
	t.Setenv(httpserver.EnvReadHeaderTimeout, "1s")
	ready := filepath.Join(t.TempDir(), "gateway.url")
	c, err := parseFlags([]string{"--token", timeoutTestToken, "--addr", "127.0.0.1:0", "--ready-file", ready}, io.Discard)
	require.NoError(t, err)
	srv, err := gateway.New(gateway.Config{Token: timeoutTestToken}, stubBackend{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, c, srv.Handler(), zap.NewNop(), "none") }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	var base []byte
	require.Eventually(t, func() bool {
		base, err = os.ReadFile(ready)
		return err == nil
	}, 30*time.Second, 10*time.Millisecond)
	addr := testsupport.HostPort(string(base))

	t.Run("idle keep-alive", func(t *testing.T) { testsupport.RequireIdleClosed(t, addr, "/healthz", "") })
	t.Run("trickled body", func(t *testing.T) {
		testsupport.RequireTrickleCutOff(t, addr, "/v1/sets", "Authorization: Bearer "+timeoutTestToken)
	})
}
