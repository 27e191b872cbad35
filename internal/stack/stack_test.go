package stack

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestProcLifecycle(t *testing.T) {
	l := &Launcher{Dir: t.TempDir()}
	p, err := l.Start("sleeper", "/bin/sh", []string{"-c", "echo one; echo two; exec sleep 60"})
	require.NoError(t, err)
	require.NoError(t, WaitFor(context.Background(), "output", p, 10*time.Second, func() bool { return strings.Contains(p.Tail(5), "two") }))
	require.Equal(t, "two", p.Tail(1))
	done, _ := p.Exited()
	require.False(t, done)
	require.Len(t, l.Live("sleeper"), 1)
	p.Kill()
	require.ErrorContains(t, p.Err(), "killed")
	require.Empty(t, l.Live("sleeper"))
}

func TestWaitForEndedProcess(t *testing.T) {
	l := &Launcher{Dir: t.TempDir()}
	p, err := l.Start("failing", "/bin/sh", []string{"-c", "echo cannot start >&2; exit 3"})
	require.NoError(t, err)
	err = WaitFor(context.Background(), "never ready", p, time.Minute, func() bool { return false })
	require.ErrorContains(t, err, "failing exited")
	require.ErrorContains(t, err, "cannot start", "the log's tail is in the error")
	require.ErrorContains(t, WaitFor(context.Background(), "never", nil, 100*time.Millisecond, func() bool { return false }), "not ready after")
}

func TestStartServerReadsReadyFile(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	l := &Launcher{Dir: t.TempDir()}
	// The "server" writes the test server's URL to its ready file, as
	// envserver and policyserver do with their own.
	script := filepath.Join(l.Dir, "server.sh")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\nwhile [ \"$1\" != --ready-file ]; do shift; done\necho "+srv.URL+" > \"$2\"\nexec sleep 60\n"), 0o755))
	p, url, err := l.StartServer(context.Background(), "server", script, []string{"--listen", "x"}, nil, EnvHealth, 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, srv.URL, url)
	l.StopAll(time.Second)
	done, _ := p.Exited()
	require.True(t, done)
}
