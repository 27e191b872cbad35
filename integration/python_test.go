package integration_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/turnstile-rl/turnstile/protocol"
)

// TestPythonParticipantCheckpointKillEverythingRestore is the whole recovery
// story with an environment written in another language: a set of notes
// rollouts runs on the Python participant (examples/python-participant),
// a checkpoint is cut mid-flight, then the worker, the Python participant
// and the in-memory Temporal dev server are SIGKILLed and the transcript
// store deleted; fresh processes restore the checkpoint and every rollout
// ends with the trajectory, reward and final revision of an uninterrupted
// run, with attempt N refused by the Python participant.
func TestPythonParticipantCheckpointKillEverythingRestore(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	recoverSet(t, []string{"notes"}, 12, recoverOptions{python: true})
}

// startPythonParticipant starts the Python participant on the environment
// server's address (kept across restarts, like startEnvServer) under the
// participant name env-0, and waits for its ready file and health.
func (c *cluster) startPythonParticipant() *proc {
	c.t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		c.t.Fatalf("the Python participant needs python3: %v", err)
	}
	listen := "127.0.0.1:0"
	if c.envURL != "" {
		listen = strings.TrimPrefix(c.envURL, "http://")
	}
	ready := filepath.Join(c.dir, fmt.Sprintf("py-ready-%d", time.Now().UnixNano()))
	script := filepath.Join(bins.root, "examples", "python-participant", "participant.py")
	p := c.start("python-participant", py,
		[]string{script, "--listen", listen, "--ready-file", ready, "--control-token", c.token, "--name", "env-0"},
		"PYTHONDONTWRITEBYTECODE=1", protocol.DataTokenEnvVar+"="+c.dataToken)
	c.waitFor("python participant", p, 30*time.Second, func() bool {
		data, err := os.ReadFile(ready)
		if err != nil || len(data) == 0 {
			return false
		}
		c.envURL = strings.TrimSpace(string(data))
		return healthy(c.envURL + "/healthz")
	})
	return p
}

// startParticipant starts the environment server the options ask for.
func (c *cluster) startParticipant(opts recoverOptions) *proc {
	if opts.python {
		return c.startPythonParticipant()
	}
	return c.startEnvServer()
}
