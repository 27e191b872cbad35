// Package stranger_test keeps honest the participant written from the
// protocol documents alone (integration/testdata/stranger/participant.py, a
// Python program of the standard library): every numbered rule of
// docs/protocol/RULES.md must pass against it, R14 and R27 aside (it hosts
// no restart_only, stateless or replay environment, so the kit reports them
// SKIP).
package stranger_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/participants/conformance"
)

const (
	dataToken       = "stranger-data-token"
	controlToken    = "stranger-control-token"
	retiredSessions = 3
)

// TestStrangerConformance starts the participant twice (one with a control
// token, one without) and runs the conformance kit against them.
func TestStrangerConformance(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed: the participant written from the documents is a Python program")
	}
	script, err := filepath.Abs(filepath.Join("..", "testdata", "stranger", "participant.py"))
	require.NoError(t, err)

	url := startParticipant(t, python, script, "stranger-0", controlToken)
	off := startParticipant(t, python, script, "stranger-no-control", "")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	results, err := conformance.Run(ctx, conformance.Config{
		URL: url, DataToken: dataToken, ControlToken: controlToken,
		Env: "counter", Task: json.RawMessage(`{"target":5}`), Tool: "increment", Args: json.RawMessage(`{"amount":1}`),
		RestartEnv: "", Dir: t.TempDir(), RetiredSessions: retiredSessions, NoControlURL: off,
	})
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, conformance.Print(&out, results))
	t.Logf("conformance kit against the participant written from the documents:\n%s", out.String())
	require.Len(t, results, len(conformance.Rules())+1, "one result per rule, and the clean-up")
	for _, r := range results {
		if r.ID == "R14" || r.ID == "R27" || r.ID == "R28" { // optional environments (restart_only/stateless, replay) and the optional lease it does not have
			require.Equal(t, conformance.Skip, r.Verdict, "%s %s: %s", r.ID, r.Name, r.Evidence)
			continue
		}
		require.Equal(t, conformance.Pass, r.Verdict, "%s %s: %s", r.ID, r.Name, r.Evidence)
	}
}

// startParticipant runs participant.py on a free loopback port and returns
// its URL (from its ready file); the process is killed when the test ends.
func startParticipant(t *testing.T, python, script, name, control string) string {
	t.Helper()
	ready := filepath.Join(t.TempDir(), "ready")
	var logs bytes.Buffer
	cmd := exec.Command(python, script, "--listen", "127.0.0.1:0", "--name", name, "--ready-file", ready,
		"--data-token", dataToken, "--control-token", control, "--retired-sessions", "3")
	cmd.Env = append(os.Environ(), "TURNSTILE_DATA_TOKEN=", "TURNSTILE_CONTROL_TOKEN=")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("participant %s output:\n%s", name, logs.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b, err := os.ReadFile(ready); err == nil && strings.HasSuffix(string(b), "\n") {
			return strings.TrimSpace(string(b))
		}
		select {
		case <-done:
			t.Fatalf("participant %s exited before it was ready", name)
		default:
		}
		require.True(t, time.Now().Before(deadline), "participant %s not ready within 30s", name)
		time.Sleep(50 * time.Millisecond)
	}
}
