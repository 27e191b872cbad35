package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/cmd/internal/cli"
	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/arithmetic"
	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/envs/sandbox"
	"github.com/turnstile-rl/turnstile/participants/conformance"
	"github.com/turnstile-rl/turnstile/participants/envserver"
)

func TestRunAgainstTheGoEnvServer(t *testing.T) {
	srv, err := envserver.NewServer(envserver.ServerConfig{Envs: []envs.Environment{counter.New(), arithmetic.New(), sandbox.New()}, DataToken: "d", ControlToken: "c"})
	require.NoError(t, err)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	var out, errOut bytes.Buffer
	err = run(context.Background(), []string{"--url", hs.URL, "--data-token", "d", "--control-token", "c"}, &out, &errOut)
	require.NoError(t, err, "run: %v\n%s%s", err, out.String(), errOut.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, len(conformance.Rules())+1, "%d lines for %d rules and the clean-up:\n%s", len(lines), len(conformance.Rules()), out.String())
	for _, l := range lines {
		assert.True(t, strings.HasPrefix(l, "PASS "), "line %q", l)
	}
	assert.True(t, strings.HasPrefix(lines[len(lines)-1], "PASS "+conformance.CleanupID+" "), "last line %q", lines[len(lines)-1])
	// A wrong token fails rules and exits 1, not 2.
	out.Reset()
	err = run(context.Background(), []string{"--url", hs.URL, "--data-token", "wrong", "--control-token", "c"}, &out, &errOut)
	require.ErrorIs(t, err, errFailed, "run with a wrong data token = %v (exit %d):\n%s", err, cli.ExitCode(err), out.String())
	require.Equal(t, cli.ExitFailure, cli.ExitCode(err), "run with a wrong data token = %v (exit %d):\n%s", err, cli.ExitCode(err), out.String())
	require.Contains(t, out.String(), "FAIL R", "run with a wrong data token = %v (exit %d):\n%s", err, cli.ExitCode(err), out.String())
}

func TestRunRefusesBadCommandLines(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--url"},
		{[]string{"--url", "http://x", "--task", "{"}, "--task"},
		{[]string{"--url", "http://x", "--replay-calls", `[{"arguments":{}}]`}, "--replay-calls"},
		{[]string{"--url", "http://x", "--dir", "relative"}, "--dir"},
		{[]string{"--url", "http://x", "extra"}, "unexpected"},
		{[]string{"--url", "http://x", "--tls-cert", "/c.pem"}, "both"},
		{[]string{"--url", "http://x", "--retired-sessions", "-1"}, "--retired-sessions"},
		{[]string{"--url", "http://x", "--end-to-end", "--bin", "/nonexistent", "--temporal", "/nonexistent/temporal"}, "end-to-end"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), tc.args, &out, &errOut)
		require.Equal(t, cli.ExitUsage, cli.ExitCode(err), "run %q = %v (exit %d), want a usage error naming %q", tc.args, err, cli.ExitCode(err), tc.want)
		require.ErrorContains(t, err, tc.want, "run %q = %v (exit %d), want a usage error naming %q", tc.args, err, cli.ExitCode(err), tc.want)
	}
	var out bytes.Buffer
	err := run(context.Background(), []string{"--list"}, &out, &out)
	require.NoError(t, err, "--list = %v:\n%s", err, out.String())
	require.Contains(t, out.String(), "R16 ", "--list = %v:\n%s", err, out.String())
	require.Contains(t, out.String(), "R27 replay-restore", "--list = %v:\n%s", err, out.String())
}
