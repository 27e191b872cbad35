package integration_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/soak"
)

// TestSoakShort is the CI version of `make soak` (about two minutes): a
// hundred concurrent rollouts over five environments (every class) fed for
// a minute, on two workers and two environment servers, with a policy
// answering in 1–3 s and injecting 503s and 429s, a checkpoint every 20 s,
// a worker SIGKILLed every 20 s (10 s out of step) and samples every 20 s.
// Every rollout must complete exactly once (one completed run, one
// receipt, one export line), the environment servers' counters must match
// the results, and no process may grow without bound.
func TestSoakShort(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	cfg := soak.Defaults()
	cfg.BinDir, cfg.TemporalCLI, cfg.OutDir = bins.dir, bins.temporal, t.TempDir()
	cfg.DevConfig = filepath.Join(bins.root, "temporal-dev.yaml")
	cfg.Duration, cfg.DrainTimeout = time.Minute, 3*time.Minute
	cfg.Concurrency = 100
	cfg.CheckpointEvery, cfg.CheckpointTimeout = 20*time.Second, time.Minute
	cfg.WorkerKillEvery, cfg.WorkerDownFor = 20*time.Second, 3*time.Second
	cfg.EnvKillEvery = 25 * time.Second // tried at 25 s and 50 s, once a checkpoint committed; recovered by RecoverServer
	cfg.SampleEvery = 20 * time.Second
	cfg.Logf = t.Logf
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	rep, err := soak.Run(ctx, cfg)
	require.NoError(t, err)
	var out strings.Builder
	rep.Print(&out)
	t.Log("\n" + out.String())
	require.NoError(t, rep.Err())
	require.GreaterOrEqual(t, rep.Started, cfg.Concurrency, "the set was kept full")
	require.Equal(t, rep.Started, rep.Completed)
	require.Equal(t, rep.Started, rep.Exported)
	require.Positive(t, rep.WorkerKills)
	require.Positive(t, rep.EnvKills, "an environment server was killed and its rollouts recovered")
	committed := 0
	for _, cp := range rep.Checkpoints {
		if cp.Err == "" {
			committed++
		}
	}
	require.Positive(t, committed, "at least one checkpoint committed under load")
	require.Contains(t, soak.Chart(rep), "<polyline", "the samples are plotted")
}
