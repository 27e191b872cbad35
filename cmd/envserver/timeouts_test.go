package main

import (
	"testing"

	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/internal/httpserver"
	"github.com/turnstile-rl/turnstile/internal/testsupport"
)

// The data plane, the control plane and the metrics listener close an
// idle keep-alive connection after the idle timeout and cut off a body
// trickled slower than the read timeout allows, even from a token holder.
func TestHTTPTimeouts(t *testing.T) {
	t.Setenv(failpoint.EnvVar, "")
	t.Setenv(httpserver.EnvIdleTimeout, "300ms")
	t.Setenv(httpserver.EnvReadTimeout, "1s")
	t.Setenv(httpserver.EnvReadHeaderTimeout, "1s")
	metricsAddr := testsupport.FreeAddr(t)
	base := startRun(t, "--metrics-listen", metricsAddr, "--control-token", "cmd-test-control-token")
	addr := testsupport.HostPort(base)

	t.Run("idle keep-alive", func(t *testing.T) { testsupport.RequireIdleClosed(t, addr, "/healthz", "") })
	t.Run("idle keep-alive of the metrics listener", func(t *testing.T) { testsupport.RequireIdleClosed(t, metricsAddr, "/metrics", "") })
	t.Run("trickled mutation body", func(t *testing.T) {
		testsupport.RequireTrickleCutOff(t, addr, "/v1/sessions", "Authorization: Bearer "+testDataToken)
	})
	t.Run("trickled control body", func(t *testing.T) {
		testsupport.RequireTrickleCutOff(t, addr, "/v1/control/prepare", "Authorization: Bearer cmd-test-control-token")
	})
}
