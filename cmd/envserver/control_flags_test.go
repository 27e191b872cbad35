package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/participants/envserver"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// testDataToken is the data token startRun gives the command.
const testDataToken = "cmd-test-data-token-0123"

// startRun runs the command in the background (with --data-token
// testDataToken; a later --data-token in args wins) and returns its base
// URL once the ready file appears; the command stops at cleanup.
func startRun(t *testing.T, args ...string) string {
	t.Helper()
	ready := filepath.Join(t.TempDir(), "env.url")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"--listen", "127.0.0.1:0", "--ready-file", ready, "--envs", "counter", "--data-token", testDataToken}, args...), io.Discard)
	}()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done, "run")
	})
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case err := <-done:
			done <- nil // for the cleanup, which waits for run to return
			require.Failf(t, "run returned before ready", "run returned %v", err)
		case <-deadline:
			require.Fail(t, "no ready file")
		case <-tick.C:
			if b, err := os.ReadFile(ready); err == nil {
				return string(b)
			}
		}
	}
}

func TestControlTokenAndName(t *testing.T) {
	t.Setenv(failpoint.EnvVar, "")
	ctx := context.Background()
	cases := []struct {
		name     string
		envToken string
		args     []string
		token    string // the token that works; "" means the control plane is off
		wantName string
	}{
		{"off by default", "", nil, "", envserver.DefaultServerName},
		{"token from the environment", "env-control-token-0123", []string{"--name", "env-7"}, "env-control-token-0123", "env-7"},
		{"flag overrides the environment", "env-control-token-0123", []string{"--control-token", "flag-control-token-0123"}, "flag-control-token-0123", envserver.DefaultServerName},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(protocol.ControlTokenEnvVar, tc.envToken)
			base := startRun(t, tc.args...)
			_, err := protocol.NewControlClient(base, "wrong", nil).Status(ctx)
			var re *protocol.RemoteError
			if tc.token == "" {
				require.True(t, asRemote(err, &re), "status without a configured token = %v", err)
				require.Equal(t, http.StatusNotFound, re.Status, "status without a configured token = %v", err)
				require.Equal(t, protocol.CodeControlDisabled, re.Code, "status without a configured token = %v", err)
				return
			}
			require.True(t, asRemote(err, &re), "status with a wrong token = %v", err)
			require.Equal(t, http.StatusUnauthorized, re.Status, "status with a wrong token = %v", err)
			caps, err := protocol.NewControlClient(base, tc.token, nil).Capabilities(ctx)
			require.NoError(t, err, "capabilities = %+v, %v", caps, err)
			require.Equal(t, tc.wantName, caps.Name, "capabilities = %+v, %v", caps, err)
			require.Equal(t, protocol.ComponentEnvironmentServer, caps.Component, "capabilities = %+v, %v", caps, err)
		})
	}
}

func asRemote(err error, re **protocol.RemoteError) bool { return errors.As(err, re) }

func TestControlSettingsRefused(t *testing.T) {
	t.Setenv(failpoint.EnvVar, "")
	for _, tc := range []struct {
		name, envToken string
		args           []string
		want           string
	}{
		{"empty name", "", []string{"--name", " "}, "--name"},
		{"token with a newline", "tok\n", nil, "--control-token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(protocol.ControlTokenEnvVar, tc.envToken)
			err := run(context.Background(), append([]string{"--listen", "127.0.0.1:0"}, tc.args...), io.Discard)
			require.ErrorContains(t, err, tc.want, "run = %v, want an error mentioning %q", err, tc.want)
		})
	}
}
