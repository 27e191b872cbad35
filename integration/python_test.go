package integration_test

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPythonParticipantCheckpointKillEverythingRestore is the whole recovery
// story with an environment written in another language: a set of notes
// rollouts runs on the Python participant (clients/python/examples/participant,
// on the participant library turnstile.participant),
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

// TestPythonCounterCheckpointKillEverythingRestore is the same story for
// the counter environment of the Python example (counter.py, some fifty
// lines on the participant library): its rollouts, driven by the bundled
// policy server's scripted counter policy, come through a checkpoint, a
// SIGKILL of everything and a restore equal to an uninterrupted run.
func TestPythonCounterCheckpointKillEverythingRestore(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	recoverSet(t, []string{"counter"}, 12, recoverOptions{python: true})
}

// startPythonParticipant starts the Python participant on the environment
// server's address (kept across restarts, like startEnvServer) under the
// participant name env-0, and waits for its ready file and health.
func (c *cluster) startPythonParticipant() *proc {
	c.t.Helper()
	py, err := exec.LookPath("python3")
	require.NoError(c.t, err, "the Python participant needs python3")
	script := filepath.Join(bins.root, "clients", "python", "examples", "participant", "participant.py")
	return c.startEnvProcess("python-participant", py, []string{script}, "PYTHONDONTWRITEBYTECODE=1")
}

// startParticipant starts the environment server the options ask for.
func (c *cluster) startParticipant(opts recoverOptions) *proc {
	if opts.python {
		return c.startPythonParticipant()
	}
	return c.startEnvServer()
}
