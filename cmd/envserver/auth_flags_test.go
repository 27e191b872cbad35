package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/internal/tlsfiles"
	"github.com/turnstile-rl/turnstile/internal/tlsfiles/tlstest"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

func TestDataTokenSettingsRefused(t *testing.T) {
	t.Setenv(failpoint.EnvVar, "")
	for _, tc := range []struct {
		name, envData, envControl string
		args                      []string
		want                      string
	}{
		{"no data token", "", "", nil, "--insecure-no-data-auth"},
		{"equal tokens", "same", "same", nil, "equal"},
		{"equal tokens by flag", "", "", []string{"--data-token", "t", "--control-token", "t"}, "equal"},
		{"data token with a newline", "tok\n", "", nil, "--data-token"},
		{"token and insecure", "d", "", []string{"--insecure-no-data-auth"}, "exclude"},
		{"key without certificate", "d", "", []string{"--tls-key", "/nonexistent/key.pem"}, "--tls-cert"},
		{"client CA without certificate", "d", "", []string{"--tls-client-ca", "/nonexistent/ca.pem"}, "--tls-cert"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(protocol.DataTokenEnvVar, tc.envData)
			t.Setenv(protocol.ControlTokenEnvVar, tc.envControl)
			err := run(context.Background(), append([]string{"--listen", "127.0.0.1:0", "--envs", "counter"}, tc.args...), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("run = %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}

func TestInsecureNoDataAuth(t *testing.T) {
	t.Setenv(failpoint.EnvVar, "")
	t.Setenv(protocol.DataTokenEnvVar, "")
	base := startRun(t, "--data-token", "", "--insecure-no-data-auth")
	if _, err := protocol.NewClient(base, nil).Stats(context.Background()); err != nil {
		t.Fatalf("stats without a token on an explicitly open data plane: %v", err)
	}
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
		if err != nil {
			t.Fatal(err)
		}
		return tlsfiles.HTTPClient(cfg)
	}
	stats := func(base string, hc *http.Client) error {
		_, err := protocol.NewDataClient(base, testDataToken, hc).Stats(context.Background())
		return err
	}

	t.Run("server TLS", func(t *testing.T) {
		base := startRun(t, "--tls-cert", certs.ServerCert, "--tls-key", certs.ServerKey)
		if !strings.HasPrefix(base, "https://127.0.0.1:") {
			t.Fatalf("ready file holds %q, want an https URL", base)
		}
		if err := stats(base, client(t, tlsfiles.ClientFiles{CA: certs.CA})); err != nil {
			t.Fatalf("stats over TLS: %v", err)
		}
		if err := stats(base, client(t, tlsfiles.ClientFiles{CA: certs.OtherCA})); err == nil {
			t.Fatal("a client trusting another CA got through")
		}
		if err := stats(strings.Replace(base, "https://", "http://", 1), nil); err == nil {
			t.Fatal("plain HTTP was answered by the TLS server")
		}
	})
	t.Run("mutual TLS", func(t *testing.T) {
		t.Setenv("TURNSTILE_TLS_CERT", certs.ServerCert)
		t.Setenv("TURNSTILE_TLS_KEY", certs.ServerKey)
		t.Setenv("TURNSTILE_TLS_CLIENT_CA", certs.CA)
		base := startRun(t)
		if err := stats(base, client(t, tlsfiles.ClientFiles{CA: certs.CA, Cert: certs.ClientCert, Key: certs.ClientKey})); err != nil {
			t.Fatalf("stats with a client certificate: %v", err)
		}
		for name, f := range map[string]tlsfiles.ClientFiles{
			"no client certificate":          {CA: certs.CA},
			"certificate of an unrelated CA": {CA: certs.CA, Cert: certs.OtherCert, Key: certs.OtherKey},
		} {
			if err := stats(base, client(t, f)); err == nil {
				t.Errorf("%s: the server accepted the connection", name)
			}
		}
		// The tokens still apply inside mutual TLS.
		hc := client(t, tlsfiles.ClientFiles{CA: certs.CA, Cert: certs.ClientCert, Key: certs.ClientKey})
		resp, err := hc.Get(base + "/v1/stats")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var eb protocol.ErrorBody
		if resp.StatusCode != http.StatusUnauthorized || json.NewDecoder(resp.Body).Decode(&eb) != nil || eb.Error.Code != protocol.CodeUnauthorized {
			t.Fatalf("mutual TLS without the data token answered %d %+v", resp.StatusCode, eb)
		}
		if resp.TLS == nil || resp.TLS.Version < tls.VersionTLS12 {
			t.Fatalf("connection state %+v", resp.TLS)
		}
	})
}
