package bench_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/bench"
	"github.com/turnstile-rl/turnstile/internal/devenv"
)

// The bench's smallest run takes every step on real processes and writes
// its three files; its figures are not judged here (a test never fails on
// a slow machine), only that each one was measured.
func TestSmokeRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a dev server and four processes")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+string(os.PathSeparator), "./cmd/worker", "./cmd/envserver", "./cmd/policyserver", "./cmd/gateway", "./cmd/bench")
	build.Dir = root
	out, err := build.CombinedOutput()
	require.NoError(t, err, string(out))
	temporal := os.Getenv("TURNSTILE_TEMPORAL_BIN")
	if temporal == "" {
		temporal, err = devenv.EnsureCLI(t.Context(), root)
		require.NoError(t, err)
	}
	cfg := bench.Smoke()
	cfg.Only = append(append([]string(nil), bench.Scenarios...), bench.ScenarioAdmission)
	cfg.CPUProfile = true
	cfg.BinDir, cfg.Temporal, cfg.DevConfig, cfg.OutDir = bin, temporal, filepath.Join(root, devenv.DefaultConfigFile), t.TempDir()
	cfg.Log = t.Logf
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	rep, err := bench.Run(ctx, cfg)
	require.NoError(t, err)

	require.NotNil(t, rep.Latency)
	require.Positive(t, rep.Latency.TurnMS.Floor)
	require.Positive(t, rep.Latency.TurnMS.Turnstile)
	require.Positive(t, rep.Latency.TurnMS.Lean, "the lean floor runs in the same run")
	require.Positive(t, rep.Latency.Streamed.Turnstile, "a streamed rollout with token capture runs beside it")
	require.Equal(t, rep.Latency.TurnMS.Lean, rep.Latency.Streamed.Lean, "against the same floors")
	require.NotNil(t, rep.Through)
	require.EqualValues(t, cfg.Concurrency*cfg.ThroughputTurns, rep.Through.Turns.Turnstile)
	require.Positive(t, rep.Through.TurnsPerSec.Floor)
	require.Positive(t, rep.Through.TurnsPerSec.Lean)
	require.Contains(t, rep.Through.CPUMSPerTurn, "temporal")
	require.NotNil(t, rep.Through.Tasks, "task latencies read from the runs' histories")
	require.Positive(t, rep.Through.Tasks.WorkflowStartToClose.Turnstile)
	require.Positive(t, rep.Through.Tasks.ActivityStartToClose.Floor)
	require.NotNil(t, rep.History)
	for i := range cfg.HistoryAt {
		require.Positive(t, rep.History.BytesPerTurn[i].Turnstile)
		require.Positive(t, rep.History.StreamedBytesPerTurn[i].Turnstile)
		require.Positive(t, rep.History.EventsPerTurn[i].Floor)
	}
	f := rep.History.Fixed
	require.NotNil(t, f, "fixed cost")
	require.Positive(t, f.Events.Turnstile)
	require.Positive(t, f.Events.Floor)
	require.Positive(t, f.Events.Lean)
	require.Equal(t, 2.0, f.VisibilityWrites.Lean, "the lean floor writes visibility at its start and close only")
	require.GreaterOrEqual(t, f.VisibilityWrites.Turnstile, 2.0, "start and close")
	turn, err := os.ReadFile(filepath.Join(cfg.OutDir, "history-turn-turnstile.jsonl"))
	require.NoError(t, err)
	require.Contains(t, string(turn), "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED", "one turn's events, written for reading")
	require.Len(t, rep.Cuts, 2, "one set started at once, one submitted through its admission")
	cut := rep.Cuts[0]
	require.Equal(t, cfg.CheckpointSizes[0], cut.InFlight, "every rollout was mid-episode at the cut")
	require.Equal(t, cut.InFlight, cut.Parked, "the checkpoint parked every in-flight rollout")
	require.Equal(t, cut.InFlight, cut.Restored, "the restore continued every one")
	require.Positive(t, cut.Bytes)
	require.Positive(t, cut.ManifestMS)
	require.Positive(t, cut.SubmitMS)
	require.Positive(t, cut.PastFirstTurnMS, "every rollout was past its first turn within the wait")
	require.Positive(t, cut.TurnP50MS, "turn latency read from the set's histories")
	require.GreaterOrEqual(t, cut.TurnP95MS, cut.TurnP50MS)
	queued := rep.Cuts[1]
	require.Equal(t, cfg.QueuedSizes[0], queued.Rollouts)
	require.Equal(t, cfg.MaxInFlight, queued.MaxInFlight)
	require.Equal(t, cfg.MaxInFlight, queued.InFlight, "the admission ran max_in_flight at the cut")
	require.Positive(t, queued.Parked, "the checkpoint parked the running rollouts")
	require.LessOrEqual(t, queued.Parked+queued.Queued, cfg.QueuedSizes[0])
	require.Positive(t, queued.Restored, "the restore continued the parked ones")
	require.Positive(t, queued.SubmitMS)
	require.Positive(t, queued.ManifestMS)

	require.Len(t, rep.Admission, len(cfg.AdmissionLevels)*len(cfg.AdmissionPollers), "one admission row per level and poller setting")
	for _, a := range rep.Admission {
		require.Positive(t, a.TurnsPerSec, "%s at %d", a.Pollers, a.MaxInFlight)
		require.Positive(t, a.Turns)
		require.GreaterOrEqual(t, a.FirstTaskP95MS, a.FirstTaskP50MS)
		require.Positive(t, a.TaskWaitP95MS, "workflow task waits read from the histories")
	}
	require.NotEmpty(t, rep.Server, "the dev server's metrics around the rows")
	var polled bool
	for _, m := range rep.Server {
		polled = polled || m.PollSuccess+m.PollSuccessSync > 0
		require.Positive(t, m.PersistenceOps, "%s", m.Row)
	}
	require.True(t, polled, "the server answered polls during some row")
	profiles, err := filepath.Glob(filepath.Join(cfg.OutDir, "worker-*.pprof"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(profiles), 2, "each start of the worker wrote its own profile (the killed one aside)")

	require.NotNil(t, rep.Feed, "feed")
	require.Positive(t, rep.Feed.ResultsPerSec.Turnstile, "through the gateway")
	require.Positive(t, rep.Feed.ResultsPerSec.Lean, "a plain update loop")
	require.Positive(t, rep.Feed.Pipelined, "through the gateway, acknowledging while reading on")
	require.Positive(t, rep.Feed.InProcess, "the client library")
	require.FileExists(t, filepath.Join(cfg.OutDir, bench.FeedProfileName), "the client library's side, profiled")

	var written struct {
		Rows []bench.Row `json:"rows"`
	}
	data, err := os.ReadFile(filepath.Join(cfg.OutDir, bench.JSONFile))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &written))
	require.Equal(t, rep.Rows(), written.Rows)
	csv, err := os.ReadFile(filepath.Join(cfg.OutDir, bench.CSVFile))
	require.NoError(t, err)
	require.Len(t, strings.Split(strings.TrimSpace(string(csv)), "\n"), len(written.Rows)+1)
	svg, err := os.ReadFile(filepath.Join(cfg.OutDir, bench.SVGFile))
	require.NoError(t, err)
	require.Contains(t, string(svg), "<svg")
	require.Contains(t, string(svg), "restore → all running")
}
