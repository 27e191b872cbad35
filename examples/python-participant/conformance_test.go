package pythonparticipant_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/protocol/conformance"
)

// TestConformanceKit runs the conformance kit (protocol/conformance, the
// package behind bin/conformance) against the Python participant: every
// numbered rule of docs/protocol/RULES.md must PASS; none may FAIL or SKIP.
func TestConformanceKit(t *testing.T) {
	p := startParticipant(t, "py-conformance")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	results, err := conformance.Run(ctx, conformance.Config{
		URL: p.url, DataToken: dataToken, ControlToken: controlToken,
		Env: "notes", Task: json.RawMessage(`{"steps":3}`), Tool: "list_notes", Args: json.RawMessage(`{}`),
		RestartEnv: "stopwatch", RestartTask: json.RawMessage(`{"laps":2}`),
		Dir: t.TempDir(),
	})
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, conformance.Print(&out, results))
	t.Logf("conformance kit against the Python participant:\n%s", out.String())
	require.Len(t, results, len(conformance.Rules()), "one result per rule")
	for _, r := range results {
		require.Equal(t, conformance.Pass, r.Verdict, "%s %s: %s", r.ID, r.Name, r.Evidence)
	}
}
