package httpserver_test

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/httpserver"
	"github.com/turnstile-rl/turnstile/internal/testsupport"
)

func lookup(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

func TestFromLookup(t *testing.T) {
	got, err := httpserver.FromLookup(lookup(nil))
	require.NoError(t, err)
	require.Equal(t, httpserver.Defaults(), got)

	got, err = httpserver.FromLookup(lookup(map[string]string{httpserver.EnvIdleTimeout: "5s", httpserver.EnvWriteTimeout: " 10m "}))
	require.NoError(t, err)
	require.Equal(t, 5*time.Second, got.Idle)
	require.Equal(t, 10*time.Minute, got.Write)

	for _, bad := range []string{"0s", "-1s", "soon"} {
		_, err := httpserver.FromLookup(lookup(map[string]string{httpserver.EnvReadTimeout: bad}))
		require.ErrorContains(t, err, httpserver.EnvReadTimeout, bad)
	}
}

func TestValidate(t *testing.T) {
	require.NoError(t, httpserver.Defaults().Validate())
	zero := httpserver.Defaults()
	zero.Write = 0
	require.ErrorContains(t, zero.Validate(), "--http-write-timeout")
	inverted := httpserver.Defaults()
	inverted.ReadHeader, inverted.Read = time.Minute, time.Second
	require.ErrorContains(t, inverted.Validate(), "--http-read-header-timeout")
}

func TestServerSetsEveryTimeout(t *testing.T) {
	hs := httpserver.Timeouts{Idle: time.Second}.Server(http.NotFoundHandler())
	d := httpserver.Defaults()
	require.Equal(t, d.ReadHeader, hs.ReadHeaderTimeout)
	require.Equal(t, d.Read, hs.ReadTimeout)
	require.Equal(t, d.Write, hs.WriteTimeout)
	require.Equal(t, time.Second, hs.IdleTimeout)
}

// serve serves a handler that reads the whole body with short timeouts.
func serve(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hs := httpserver.Timeouts{ReadHeader: time.Second, Read: time.Second, Write: time.Second, Idle: 300 * time.Millisecond}.Server(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, err := io.Copy(io.Discard, r.Body); err != nil {
				http.Error(w, err.Error(), http.StatusRequestTimeout)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		}))
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	return ln.Addr().String()
}

func TestIdleConnectionClosed(t *testing.T) {
	testsupport.RequireIdleClosed(t, serve(t), "/", "")
}

func TestTrickledBodyCutOff(t *testing.T) {
	testsupport.RequireTrickleCutOff(t, serve(t), "/", "")
}
