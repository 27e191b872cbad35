package integration_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/soak"
	"github.com/turnstile-rl/turnstile/internal/stack"
)

// TestSoakShort is the CI version of `make soak` (about two minutes): a
// hundred concurrent rollouts over five environments (every class) fed for
// a minute, on two workers and two environment servers behind Toxiproxy,
// with a policy answering in 1–3 s and injecting 503s and 429s, and nothing
// playing the operator: checkpoints from the set's schedule every 15 s
// (keep 2, the first step pinned, a garbage collection every second
// commit), a worker SIGKILLed every 20 s, an environment server SIGKILLed
// at 30 s once a checkpoint has committed, brought back at its address by
// its supervisor and recovered by the set's watchdog, a partition or a
// slow link every 10 s, and samples every 15 s. Every rollout must
// complete exactly once (one completed run, one receipt, one export line),
// the never-killed server's counters must match the results, and no
// process may grow after the warm-up.
func TestSoakShort(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	cfg := soak.Defaults()
	cfg.BinDir, cfg.TemporalCLI, cfg.OutDir = bins.dir, bins.temporal, t.TempDir()
	if dir := os.Getenv("TURNSTILE_SOAK_OUT"); dir != "" {
		cfg.OutDir = dir // kept for a look afterwards: logs, the dev server's database, checkpoints
	}
	var err error
	cfg.Toxiproxy, err = stack.FindToxiproxy(bins.root)
	require.NoError(t, err)
	cfg.DevConfig = filepath.Join(bins.root, "temporal-dev.yaml")
	cfg.Duration, cfg.DrainTimeout = time.Minute, 3*time.Minute
	cfg.Concurrency = 100
	cfg.CheckpointEvery, cfg.CheckpointTimeout, cfg.Keep, cfg.TagEvery, cfg.GCEvery = 15*time.Second, time.Minute, 2, 1, 2
	cfg.WorkerKillEvery, cfg.WorkerDownFor = 20*time.Second, 3*time.Second
	cfg.EnvKillEvery, cfg.EnvDownFor = 30*time.Second, 8*time.Second
	cfg.WatchEvery, cfg.WatchTimeout, cfg.WatchMisses, cfg.WatchBound = time.Second, time.Second, 3, 5*time.Second
	cfg.NetFaultEvery, cfg.PartitionFor, cfg.SlowFor = 10*time.Second, 2*time.Second, 8*time.Second
	cfg.SampleEvery, cfg.FlatAfter = 15*time.Second, 30*time.Second
	// Finished rollouts are forgotten within the run, so the checkpoint
	// root holds those of the last ~45 s, not every one since the start.
	cfg.RetiredGrace, cfg.ForgetAfter = 45*time.Second, 30*time.Second
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
	require.NotEmpty(t, rep.EnvKills, "an environment server was killed")
	require.GreaterOrEqual(t, len(rep.Detections), len(rep.EnvKills), "the watchdog declared every killed server dead")
	require.Positive(t, rep.Detections[0].Detect, "the declaration is timed against its kill")
	require.NotEmpty(t, rep.Checkpoints.Committed, "the schedule's checkpoints committed under load")
	require.NotEmpty(t, rep.Checkpoints.Pinned, "the trainer pinned its first step")
	require.NotEmpty(t, rep.Checkpoints.GCs, "the trainer collected garbage")
	require.NotEmpty(t, rep.NetFaults, "network faults were injected")
	require.Contains(t, soak.Chart(rep), "<polyline", "the samples are plotted")
}
