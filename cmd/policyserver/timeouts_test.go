package main

import (
	"context"
	"io"
	"testing"

	"github.com/turnstile-rl/turnstile/internal/httpserver"
	"github.com/turnstile-rl/turnstile/internal/testsupport"
)

// The policy server and its metrics listener close an idle keep-alive
// connection after the idle timeout and cut off a trickled body.
func TestHTTPTimeouts(t *testing.T) {
	t.Setenv(httpserver.EnvIdleTimeout, "300ms")
	t.Setenv(httpserver.EnvReadTimeout, "1s")
	t.Setenv(httpserver.EnvReadHeaderTimeout, "1s")
	metricsAddr := testsupport.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--metrics-listen", metricsAddr}, io.Discard, func(u string) { ready <- u })
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
	addr := testsupport.HostPort(base)

	t.Run("idle keep-alive", func(t *testing.T) { testsupport.RequireIdleClosed(t, addr, "/v1/models", "") })
	t.Run("idle keep-alive of the metrics listener", func(t *testing.T) { testsupport.RequireIdleClosed(t, metricsAddr, "/metrics", "") })
	t.Run("trickled body", func(t *testing.T) { testsupport.RequireTrickleCutOff(t, addr, "/v1/chat/completions", "") })
}
