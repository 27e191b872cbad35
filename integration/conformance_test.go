package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/arithmetic"
	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/internal/endtoend"
	"github.com/turnstile-rl/turnstile/internal/testsupport/brokenparticipant"
	"github.com/turnstile-rl/turnstile/participants/conformance"
	"github.com/turnstile-rl/turnstile/participants/envserver"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
)

// endToEnd is the kit's end-to-end stage on this package's binaries.
func endToEnd(t *testing.T, rollouts int) endtoend.Config {
	t.Helper()
	return endtoend.Config{BinDir: bins.dir, TemporalCLI: bins.temporal, DevConfig: filepath.Join(bins.root, "temporal-dev.yaml"),
		WorkDir: t.TempDir(), Rollouts: rollouts}
}

// TestConformanceKitEndToEnd is the whole kit against the Go environment
// server process, ending with its end-to-end stage: after every rule and
// the clean-up, a set through the real coordinator on the same server (a
// checkpoint of a server the kit has just used, which used to abort
// MemberMissing on the kit's leftover sessions), a SIGKILL of everything
// the stage started, and a restore under the default restore id on the
// live server, equal to the uninterrupted run.
func TestConformanceKitEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	replayCalls, err := conformance.ParseCalls(conformance.DefaultReplayCalls)
	require.NoError(t, err)
	c := newCluster(t)
	c.startEnvServer()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	res, err := conformance.Run(ctx, conformance.Config{URL: c.envURL, DataToken: c.dataToken, ControlToken: c.token,
		Dir: t.TempDir(), RestartEnv: conformance.DefaultRestartEnv, RestartTask: json.RawMessage(conformance.DefaultRestartTask),
		ReplayEnv: conformance.DefaultReplayEnv, ReplayTask: json.RawMessage(conformance.DefaultReplayTask), ReplayCalls: replayCalls,
		EndToEnd: endToEnd(t, endtoend.DefaultRollouts).Stage()})
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, conformance.Print(&out, res))
	t.Logf("conformance kit with the end-to-end stage:\n%s", out.String())
	require.Len(t, res, len(conformance.Rules())+2, "every rule, the clean-up and the end-to-end stage")
	for _, r := range res {
		assert.Equal(t, conformance.Pass, r.Verdict, "%s %s: %s", r.ID, r.Name, r.Evidence)
	}
	require.Equal(t, conformance.EndToEndID, res[len(res)-1].ID)
}

// TestEndToEndFailsTheRollbackBug: a participant that keeps R11 literally
// (no live-rollback exception, RULES.md R18) refuses the end-to-end stage's
// restore under the default restore id. The restore used to report every
// rollout restored and exit 0 while every rollout then failed
// attempt_not_installed; now it fails, naming the participant and the
// rollouts it did not install, and so does the stage.
func TestEndToEndFailsTheRollbackBug(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	const data, control = "e2e-data-token-0123456789", "e2e-control-token-0123456789"
	srv, err := envserver.NewServer(envserver.ServerConfig{Envs: []envs.Environment{counter.New(), arithmetic.New()}, Name: "literal",
		DataToken: data, ControlToken: control})
	require.NoError(t, err)
	hs := httptest.NewServer(brokenparticipant.LiteralR11(srv))
	t.Cleanup(hs.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	work := endToEnd(t, 2)
	_, err = work.Stage()(ctx, conformance.Target{URL: hs.URL, DataToken: data, ControlToken: control, Env: counter.Name,
		Prefix: "literal", Dir: t.TempDir()})
	require.Error(t, err, "a restore the participant refused must not pass")
	t.Logf("the end-to-end stage fails: %v", err)
	for _, want := range []string{"restore of checkpoint literal-k1", checkpoint.ErrNotInstalled, "stale_checkpoint", hs.URL, "literal-cut-0000"} {
		require.ErrorContains(t, err, want)
	}
	logs, _ := filepath.Glob(filepath.Join(work.WorkDir, "worker-*.log"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		require.False(t, strings.Contains(string(b), "attempt_not_installed"), "no rollout was started as an attempt the participant did not install (%s)", l)
	}
}
