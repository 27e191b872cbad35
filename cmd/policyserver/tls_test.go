package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/tlsfiles"
	"github.com/turnstile-rl/turnstile/internal/tlsfiles/tlstest"
)

// TestTLSAndMutualTLS serves the policy over HTTPS with certificates made
// for the test, then requires client certificates.
func TestTLSAndMutualTLS(t *testing.T) {
	certs := tlstest.New(t)
	get := func(t *testing.T, base string, files tlsfiles.ClientFiles) error {
		t.Helper()
		cfg, err := files.Config()
		require.NoError(t, err)
		resp, err := tlsfiles.HTTPClient(cfg).Get(base + "/models")
		if err != nil {
			return err
		}
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "models answered")
		return nil
	}
	for _, tc := range []struct {
		name   string
		args   []string
		accept []tlsfiles.ClientFiles
		refuse []tlsfiles.ClientFiles
	}{
		{"TLS", []string{"--tls-cert", certs.ServerCert, "--tls-key", certs.ServerKey},
			[]tlsfiles.ClientFiles{{CA: certs.CA}}, []tlsfiles.ClientFiles{{CA: certs.OtherCA}, {}}},
		{"mutual TLS", []string{"--tls-cert", certs.ServerCert, "--tls-key", certs.ServerKey, "--tls-client-ca", certs.CA},
			[]tlsfiles.ClientFiles{{CA: certs.CA, Cert: certs.ClientCert, Key: certs.ClientKey}},
			[]tlsfiles.ClientFiles{{CA: certs.CA}, {CA: certs.CA, Cert: certs.OtherCert, Key: certs.OtherKey}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			ready := make(chan string, 1)
			done := make(chan error, 1)
			go func() {
				done <- run(ctx, append([]string{"--listen", "127.0.0.1:0"}, tc.args...), io.Discard, func(u string) { ready <- u })
			}()
			t.Cleanup(func() {
				cancel()
				assert.NoError(t, <-done, "run")
			})
			var base string
			select {
			case base = <-ready:
			case err := <-done:
				done <- nil
				require.Failf(t, "run ended before listening", "run returned %v", err)
			}
			require.True(t, strings.HasPrefix(base, "https://127.0.0.1:"), "base URL %q, want https", base)
			for _, f := range tc.accept {
				assert.NoError(t, get(t, base, f), "client %+v refused", f)
			}
			for _, f := range tc.refuse {
				assert.Error(t, get(t, base, f), "client %+v accepted", f)
			}
		})
	}
	err := run(context.Background(), []string{"--listen", "127.0.0.1:0", "--tls-cert", certs.ServerCert}, io.Discard, nil)
	require.ErrorContains(t, err, "--tls-key", "a certificate without its key: run = %v", err)
}
