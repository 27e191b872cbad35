package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

func TestRunServesAndShutsDown(t *testing.T) {
	t.Setenv(failpoint.EnvVar, "")
	t.Setenv(protocol.DataTokenEnvVar, "data-token-from-env")
	ready := filepath.Join(t.TempDir(), "env.url")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--ready-file", ready, "--envs", "counter"}, io.Discard)
	}()

	// Wait for the ready file (written atomically, so it is complete once present).
	var base string
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for base == "" {
		select {
		case err := <-done:
			require.Failf(t, "run returned before ready", "run returned %v", err)
		case <-deadline:
			require.Fail(t, "no ready file")
		case <-tick.C:
			if b, err := os.ReadFile(ready); err == nil {
				base = string(b)
			}
		}
	}
	require.True(t, strings.HasPrefix(base, "http://127.0.0.1:"), "ready file holds %q", base)
	require.False(t, strings.HasSuffix(base, ":0"), "ready file holds %q", base)
	_, err := protocol.NewClient(base, nil).Stats(context.Background())
	require.True(t, isUnauthorized(err), "stats without the data token = %v, want 401 unauthorized", err)
	c := protocol.NewDataClient(base, "data-token-from-env", nil)
	_, err = c.Stats(context.Background())
	require.NoError(t, err, "stats")
	_, err = c.Start(context.Background(), protocol.StartRequest{
		Identity: protocol.Identity{RolloutID: "r", RequestID: "r/seed"}, Env: "counter", Task: []byte(`{"target":1}`),
	})
	require.NoError(t, err, "start")
	cancel()
	require.NoError(t, <-done, "run after cancel")
}

func TestRunRefusesBadSettings(t *testing.T) {
	for _, tc := range []struct {
		name, failpoints string
		args             []string
		want             string
	}{
		{"unknown env", "", []string{"--listen", "127.0.0.1:0", "--envs", "counter,nope"}, `unknown environment "nope"`},
		{"no env", "", []string{"--listen", "127.0.0.1:0", "--envs", " , "}, "no environment"},
		{"bad failpoint", "env.after-apply-before-reply=explode", []string{"--listen", "127.0.0.1:0"}, failpoint.EnvVar},
		{"stray argument", "", []string{"--listen", "127.0.0.1:0", "extra"}, "unexpected arguments"},
		{"no retired sessions", "", []string{"--listen", "127.0.0.1:0", "--retired-sessions", "0"}, "--retired-sessions: 0"},
		{"zero retired grace", "", []string{"--listen", "127.0.0.1:0", "--retired-grace", "0s"}, "--retired-grace: 0"},
		{"zero forget-after", "", []string{"--listen", "127.0.0.1:0", "--forget-after", "0s"}, "--forget-after: 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(failpoint.EnvVar, tc.failpoints)
			err := run(context.Background(), tc.args, io.Discard)
			require.ErrorContains(t, err, tc.want, "run = %v, want an error mentioning %q", err, tc.want)
		})
	}
}

func isUnauthorized(err error) bool {
	var re *protocol.RemoteError
	return errors.As(err, &re) && re.Status == http.StatusUnauthorized && re.Code == protocol.CodeUnauthorized
}
