package pythonparticipant_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/tlsfiles"
	"github.com/turnstile-rl/turnstile/internal/tlsfiles/tlstest"
	"github.com/turnstile-rl/turnstile/participants/conformance"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// TestConformanceKit runs the conformance kit (protocol/conformance, the
// package behind bin/conformance) against the Python participant: every
// numbered rule of docs/protocol/RULES.md must PASS, but R27, which it skips
// (it hosts no replay environment); none may FAIL.
func TestConformanceKit(t *testing.T) {
	p := startParticipant(t, "py-conformance", "--retired-sessions", fmt.Sprint(retiredSessions))
	off := startParticipant(t, "py-no-control", "--control-token", "")
	runKit(t, p.url, nil, off.url)
}

// retiredSessions bounds the verified sessions the participants of these
// tests keep the receipts of, small so the kit drives past it (R3).
const retiredSessions = 3

// TestConformanceKitOverMutualTLS: the participant serves HTTPS and asks for
// client certificates (certificates generated in the test); the kit passes
// every rule with a client certificate, and a client without one is turned
// away at the handshake.
func TestConformanceKitOverMutualTLS(t *testing.T) {
	files := tlstest.New(t)
	p := startParticipant(t, "py-tls", "--tls-cert", files.ServerCert, "--tls-key", files.ServerKey, "--tls-client-ca", files.CA,
		"--retired-sessions", fmt.Sprint(retiredSessions))
	require.True(t, strings.HasPrefix(p.url, "https://"), "ready file holds %s", p.url)
	cfg, err := tlsfiles.ClientFiles{CA: files.CA, Cert: files.ClientCert, Key: files.ClientKey}.Config()
	require.NoError(t, err)
	runKit(t, p.url, tlsfiles.HTTPClient(cfg), "")

	for name, cf := range map[string]tlsfiles.ClientFiles{
		"no client certificate":            {CA: files.CA},
		"a certificate of an unrelated CA": {CA: files.CA, Cert: files.OtherCert, Key: files.OtherKey},
	} {
		cfg, err := cf.Config()
		require.NoError(t, err)
		_, err = protocol.NewDataClient(p.url, dataToken, tlsfiles.HTTPClient(cfg)).Stats(context.Background())
		require.Error(t, err, name)
		var re *protocol.RemoteError
		require.False(t, errors.As(err, &re), "%s: refused at the handshake, not answered: %v", name, err)
	}
}

// runKit runs the conformance kit against the participant at url (and,
// when noControl is set, the instance there without a control token) and
// requires every rule to pass.
func runKit(t *testing.T, url string, hc *http.Client, noControl string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	results, err := conformance.Run(ctx, conformance.Config{
		URL: url, DataToken: dataToken, ControlToken: controlToken, HTTPClient: hc,
		Env: "notes", Task: json.RawMessage(`{"steps":3}`), Tool: "list_notes", Args: json.RawMessage(`{}`),
		RestartEnv: "stopwatch", RestartTask: json.RawMessage(`{"laps":2}`),
		Dir: t.TempDir(), RetiredSessions: retiredSessions, NoControlURL: noControl,
	})
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, conformance.Print(&out, results))
	t.Logf("conformance kit against the Python participant at %s:\n%s", url, out.String())
	require.Len(t, results, len(conformance.Rules())+1, "one result per rule, and the clean-up")
	for _, r := range results {
		if r.ID == "R27" || r.ID == "R28" {
			// The Python participant hosts no replay environment and
			// holds no lease (prepare_lease_v1).
			require.Equal(t, conformance.Skip, r.Verdict, "%s %s: %s", r.ID, r.Name, r.Evidence)
			continue
		}
		require.Equal(t, conformance.Pass, r.Verdict, "%s %s: %s", r.ID, r.Name, r.Evidence)
	}
}
