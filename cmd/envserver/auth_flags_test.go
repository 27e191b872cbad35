package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/internal/tlsfiles"
	"github.com/turnstile-rl/turnstile/internal/tlsfiles/tlstest"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

func TestDataTokenSettingsRefused(t *testing.T) {
	t.Setenv(failpoint.EnvVar, "")
	const tok = "cmd-test-token-0123"
	for _, tc := range []struct {
		name, envData, envControl string
		args                      []string
		want                      string
	}{
		{"no data token", "", "", nil, "--insecure-no-data-auth"},
		{"equal tokens", tok, tok, nil, "equal"},
		{"equal tokens by flag", "", "", []string{"--data-token", tok, "--control-token", tok}, "equal"},
		{"data token with a newline", tok + "\n", "", nil, "--data-token"},
		{"short data token", "d", "", nil, "--data-token (or $" + protocol.DataTokenEnvVar + "): 1 characters, want at least 16"},
		{"short control token", tok, "c", nil, "--control-token (or $" + protocol.ControlTokenEnvVar + "): 1 characters"},
		{"token and insecure", tok, "", []string{"--insecure-no-data-auth"}, "exclude"},
		{"key without certificate", tok, "", []string{"--tls-key", "/nonexistent/key.pem"}, "--tls-cert"},
		{"client CA without certificate", tok, "", []string{"--tls-client-ca", "/nonexistent/ca.pem"}, "--tls-cert"},
		{"bad HTTP timeout", tok, "", []string{"--http-read-timeout", "0s"}, "--http-read-timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(protocol.DataTokenEnvVar, tc.envData)
			t.Setenv(protocol.ControlTokenEnvVar, tc.envControl)
			err := run(context.Background(), append([]string{"--listen", "127.0.0.1:0", "--envs", "counter"}, tc.args...), io.Discard)
			require.ErrorContains(t, err, tc.want, "run = %v, want an error mentioning %q", err, tc.want)
		})
	}
}

func TestInsecureNoDataAuth(t *testing.T) {
	t.Setenv(failpoint.EnvVar, "")
	t.Setenv(protocol.DataTokenEnvVar, "")
	base := startRun(t, "--data-token", "", "--insecure-no-data-auth")
	_, err := protocol.NewClient(base, nil).Stats(context.Background())
	require.NoError(t, err, "stats without a token on an explicitly open data plane")
}

// TestTLS serves HTTPS and mutual TLS with certificates made for the test:
// a client trusting the test CA gets through, one that does not is refused
// at the handshake; with a client CA, only a client certificate it signed
// is accepted.
func TestTLS(t *testing.T) {
	t.Setenv(failpoint.EnvVar, "")
	certs := tlstest.New(t)
	client := func(t *testing.T, f tlsfiles.ClientFiles) *http.Client {
		t.Helper()
		cfg, err := f.Config()
		require.NoError(t, err)
		return tlsfiles.HTTPClient(cfg)
	}
	stats := func(base string, hc *http.Client) error {
		_, err := protocol.NewDataClient(base, testDataToken, hc).Stats(context.Background())
		return err
	}

	t.Run("server TLS", func(t *testing.T) {
		base := startRun(t, "--tls-cert", certs.ServerCert, "--tls-key", certs.ServerKey)
		require.True(t, strings.HasPrefix(base, "https://127.0.0.1:"), "ready file holds %q, want an https URL", base)
		require.NoError(t, stats(base, client(t, tlsfiles.ClientFiles{CA: certs.CA})), "stats over TLS")
		require.Error(t, stats(base, client(t, tlsfiles.ClientFiles{CA: certs.OtherCA})), "a client trusting another CA got through")
		require.Error(t, stats(strings.Replace(base, "https://", "http://", 1), nil), "plain HTTP was answered by the TLS server")
	})
	t.Run("mutual TLS", func(t *testing.T) {
		t.Setenv("TURNSTILE_TLS_CERT", certs.ServerCert)
		t.Setenv("TURNSTILE_TLS_KEY", certs.ServerKey)
		t.Setenv("TURNSTILE_TLS_CLIENT_CA", certs.CA)
		base := startRun(t)
		require.NoError(t, stats(base, client(t, tlsfiles.ClientFiles{CA: certs.CA, Cert: certs.ClientCert, Key: certs.ClientKey})), "stats with a client certificate")
		for name, f := range map[string]tlsfiles.ClientFiles{
			"no client certificate":          {CA: certs.CA},
			"certificate of an unrelated CA": {CA: certs.CA, Cert: certs.OtherCert, Key: certs.OtherKey},
		} {
			assert.Error(t, stats(base, client(t, f)), "%s: the server accepted the connection", name)
		}
		// The tokens still apply inside mutual TLS.
		hc := client(t, tlsfiles.ClientFiles{CA: certs.CA, Cert: certs.ClientCert, Key: certs.ClientKey})
		resp, err := hc.Get(base + "/v1/stats")
		require.NoError(t, err)
		defer resp.Body.Close()
		var eb protocol.ErrorBody
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "mutual TLS without the data token answered %d %+v", resp.StatusCode, eb)
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&eb), "mutual TLS without the data token answered %d %+v", resp.StatusCode, eb)
		require.Equal(t, protocol.CodeUnauthorized, eb.Error.Code, "mutual TLS without the data token answered %d %+v", resp.StatusCode, eb)
		require.NotNil(t, resp.TLS, "connection state %+v", resp.TLS)
		require.GreaterOrEqual(t, resp.TLS.Version, uint16(tls.VersionTLS12), "connection state %+v", resp.TLS)
	})
}
