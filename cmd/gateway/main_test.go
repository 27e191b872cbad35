package main

import (
	"bytes"
	"context"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/cmd/internal/cli"
	"github.com/turnstile-rl/turnstile/internal/httpserver"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

func TestHelpListsSettings(t *testing.T) {
	var out bytes.Buffer
	_, err := parseFlags([]string{"-h"}, &out)
	require.ErrorIs(t, err, flag.ErrHelp, "-h: %v", err)
	require.Equal(t, cli.ExitOK, cli.ExitCode(cli.Usage(err)), "-h: %v", err)
	for _, want := range []string{"-addr", "-token", "-insecure-no-auth", "-stall-window", "-checkpoint-root", "-transcripts", "-task-queue",
		EnvAddr, EnvToken, EnvStallWindow, "TEMPORAL_ADDRESS", "TURNSTILE_CONTROL_TOKEN"} {
		assert.Contains(t, out.String(), want, "usage lacks %s:\n%s", want, out.String())
	}
}

func TestParseFlags(t *testing.T) {
	const tok = "gateway-test-token-0123"
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string // error substring; empty for success
	}{
		{name: "no token", want: "--token"},
		{name: "token", args: []string{"--token", tok}},
		{name: "token from env", env: map[string]string{EnvToken: tok}},
		{name: "explicitly insecure", args: []string{"--insecure-no-auth"}},
		{name: "both", args: []string{"--token", tok, "--insecure-no-auth"}, want: "not both"},
		{name: "padded token", args: []string{"--token", " " + tok}, want: "whitespace"},
		{name: "short token", args: []string{"--token", "t"}, want: "--token (or $" + EnvToken + "): 1 characters, want at least 16"},
		{name: "token equal to the control token", args: []string{"--token", tok}, env: map[string]string{protocol.ControlTokenEnvVar: tok},
			want: "$" + protocol.ControlTokenEnvVar + " are equal"},
		{name: "token equal to the data token", env: map[string]string{EnvToken: tok, protocol.DataTokenEnvVar: tok},
			want: "$" + protocol.DataTokenEnvVar + " are equal"},
		{name: "zero window", args: []string{"--token", tok, "--stall-window", "0s"}, want: "--stall-window"},
		{name: "bad window env", env: map[string]string{EnvToken: tok, EnvStallWindow: "soon"}, want: EnvStallWindow},
		{name: "negative settle", args: []string{"--token", tok, "--feed-settle", "-1s"}, want: "--feed-settle"},
		{name: "argument", args: []string{"--token", tok, "extra"}, want: "unexpected arguments"},
		{name: "bad idle timeout", args: []string{"--token", tok}, env: map[string]string{httpserver.EnvIdleTimeout: "-1s"}, want: httpserver.EnvIdleTimeout},
		{name: "zero write timeout flag", args: []string{"--token", tok, "--http-write-timeout", "0s"}, want: "--http-write-timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{EnvToken, EnvStallWindow, EnvAddr, EnvCheckpointRoot, protocol.ControlTokenEnvVar, protocol.DataTokenEnvVar, httpserver.EnvIdleTimeout} {
				t.Setenv(k, tt.env[k])
			}
			_, err := parseFlags(tt.args, &bytes.Buffer{})
			if tt.want == "" {
				require.NoError(t, err)
			} else {
				require.ErrorContains(t, err, tt.want)
			}
		})
	}
}

func TestDefaultsFromEnvironment(t *testing.T) {
	t.Setenv(EnvToken, "gateway-test-token-0123")
	t.Setenv(EnvAddr, "127.0.0.1:9999")
	t.Setenv(EnvStallWindow, "90s")
	t.Setenv(EnvCheckpointRoot, "ckpt")
	c, err := parseFlags(nil, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:9999", c.addr, "config %+v", c)
	require.Equal(t, 90*time.Second, c.stallWindow, "config %+v", c)
	require.True(t, strings.HasSuffix(c.checkpointRoot, "/ckpt"), "config %+v", c)
	require.True(t, strings.HasPrefix(c.checkpointRoot, "/"), "config %+v", c)
}

// TestRunRefusesBadFlagsAsUsage: a bad command line exits 2 before any
// connection is tried.
func TestRunRefusesBadFlagsAsUsage(t *testing.T) {
	t.Setenv(EnvToken, "")
	err := run(context.Background(), []string{"--stall-window", "0s", "--insecure-no-auth"}, &bytes.Buffer{})
	require.Equal(t, cli.ExitUsage, cli.ExitCode(err), "exit %d (%v), want %d", cli.ExitCode(err), err, cli.ExitUsage)
}
