package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	tclient "go.temporal.io/sdk/client"

	procs "github.com/turnstile-rl/turnstile/internal/stack"
	"github.com/turnstile-rl/turnstile/workers"
)

// readyTimeout bounds how long a process may take to become ready.
const readyTimeout = 2 * time.Minute

// stack is the set of processes one bench run measures.
type stack struct {
	cfg    Config
	logf   func(string, ...any)
	launch *procs.Launcher

	temporal, worker, floor, env, policy, slow *procs.Proc
	hostPort                                   string
	client                                     tclient.Client
	envURL, policyURL, slowURL                 string
	store                                      string
	token                                      string
	// metricsURL is the dev server's Prometheus /metrics; server the
	// figures read from it around each row.
	metricsURL string
	server     []ServerMetrics
	// workerStarts numbers the turnstile worker's starts, so each start's
	// CPU profile has a file of its own.
	workerStarts int
	// profiled: a scenario ran on the profiled worker's current start.
	profiled bool
	// workerEnv is added to the turnstile worker's environment (a row
	// comparing the worker's settings restarts it with its own).
	workerEnv []string
}

// Task queues of the two workers under test.
const (
	floorQueue = "bench-floor"
)

// stopAll stops every process, newest first, the dev server last.
func (s *stack) stopAll() {
	if s.client != nil {
		s.client.Close()
	}
	s.launch.StopAll(15 * time.Second)
}

// startTemporal starts an in-memory, headless dev server with the settings
// of temporal-dev.yaml on a free port, plus cache sizes for the largest set.
func (s *stack) startTemporal(ctx context.Context) error {
	// The dev server caches 8,096 workflows' mutable state; a larger set
	// would thrash it (and measure the cache, not turnstile).
	maxSet := s.cfg.Concurrency
	for _, n := range s.cfg.CheckpointSizes {
		maxSet = max(maxSet, n)
	}
	for _, n := range s.cfg.QueuedSizes {
		maxSet = max(maxSet, n)
	}
	extra := []string{"--dynamic-config-value", fmt.Sprintf("history.hostLevelCacheMaxSize=%d", max(8096, 2*maxSet))}
	metricsPort, err := procs.FreePort()
	if err != nil {
		return err
	}
	s.temporal, s.hostPort, s.client, err = s.launch.StartTemporal(ctx,
		procs.Temporal{CLI: s.cfg.Temporal, DevConfig: s.cfg.DevConfig, Extra: extra, MetricsPort: metricsPort}, readyTimeout)
	s.metricsURL = fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort)
	return err
}

// startServer starts a binary that writes its base URL to --ready-file and
// answers healthURL(base) once ready; it returns the base URL.
func (s *stack) startServer(ctx context.Context, name string, args []string, health func(string) string) (*procs.Proc, string, error) {
	bin := filepath.Join(s.cfg.BinDir, strings.TrimSuffix(name, "-slow"))
	return s.launch.StartServer(ctx, name, bin, append([]string{"--listen", "127.0.0.1:0", "--log-level", "warn"}, args...), nil, health, readyTimeout)
}

// startAll brings up the whole stack.
func (s *stack) startAll(ctx context.Context) error {
	s.token = "bench-control-token"
	s.launch = &procs.Launcher{Dir: s.cfg.OutDir}
	// The environment server refuses to start without a data-plane token
	// (R1 of docs/protocol/RULES.md); the bench's stack is private, so a fixed one will do.
	s.store = filepath.Join(s.cfg.OutDir, "transcripts")
	s.logf("starting the Temporal dev server")
	if err := s.startTemporal(ctx); err != nil {
		return err
	}
	var err error
	if s.env, s.envURL, err = s.startServer(ctx, "envserver", []string{"--control-token", s.token, "--data-token", benchDataToken, "--name", "env-0"},
		procs.EnvHealth); err != nil {
		return err
	}
	if s.policy, s.policyURL, err = s.startServer(ctx, "policyserver", nil, procs.PolicyHealth); err != nil {
		return err
	}
	if s.slow, s.slowURL, err = s.startServer(ctx, "policyserver-slow", []string{
		"--latency", s.cfg.SlowPolicy.String(), "--jitter", s.cfg.SlowJitter.String(), "--fault-seed", "7",
	}, procs.PolicyHealth); err != nil {
		return err
	}
	if err := s.startWorker(ctx); err != nil {
		return err
	}
	return s.startFloorWorker(ctx)
}

// startWorker starts the turnstile worker (bin/worker) with the worker's
// own settings, as an operator would.
func (s *stack) startWorker(ctx context.Context) error {
	env := procs.WorkerEnv{
		HostPort: s.hostPort, EnvURL: s.envURL, ModelURL: s.policyURL, Store: s.store,
		ControlToken: s.token, DataToken: benchDataToken, AllowLoopback: true,
	}.Environ()
	s.workerStarts++
	if s.cfg.CPUProfile {
		env = append(env, workers.EnvCPUProfile+"="+filepath.Join(s.cfg.OutDir, WorkerProfileName(s.workerStarts)))
	}
	env = append(env, s.workerEnv...)
	var err error
	if s.worker, err = s.launch.Start("worker", filepath.Join(s.cfg.BinDir, "worker"), nil, env...); err != nil {
		return err
	}
	return procs.WaitFor(ctx, "turnstile worker", s.worker, readyTimeout, func() bool { return s.polled(ctx, workerQueue) })
}

// WorkerProfileName is the CPU profile file of the turnstile worker's
// start n (1 for the first): a restart writes a file of its own.
func WorkerProfileName(n int) string { return fmt.Sprintf("worker-%d.pprof", n) }

// restartWorker stops the turnstile worker and starts it again with env
// added to its environment (nil: its own settings).
func (s *stack) restartWorker(ctx context.Context, env []string) error {
	s.worker.Stop(15 * time.Second)
	s.workerEnv = env
	if err := s.startWorker(ctx); err != nil {
		return fmt.Errorf("restart the worker: %w", err)
	}
	if s.cfg.CPUProfile {
		s.logf("worker restarted (%q): CPU profile from here in %s", env, WorkerProfileName(s.workerStarts))
	}
	return nil
}

// startFloorWorker starts the floor's worker: the bench binary itself, in
// its floor-worker mode, so its CPU is measured apart like the worker's.
func (s *stack) startFloorWorker(ctx context.Context) error {
	var err error
	s.floor, err = s.launch.Start("floor-worker", filepath.Join(s.cfg.BinDir, "bench"),
		[]string{FloorWorkerCommand, "--address", s.hostPort, "--task-queue", floorQueue})
	if err != nil {
		return err
	}
	return procs.WaitFor(ctx, "floor worker", s.floor, readyTimeout, func() bool { return s.polled(ctx, floorQueue) })
}

func (s *stack) polled(ctx context.Context, queue string) bool {
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := s.client.DescribeTaskQueue(dctx, queue, enumspb.TASK_QUEUE_TYPE_WORKFLOW)
	return err == nil && len(resp.GetPollers()) > 0
}

// cpuSample is the CPU time of each process at one moment.
type cpuSample map[string]time.Duration

func (s *stack) sampleCPU(worker *procs.Proc) cpuSample {
	out := cpuSample{}
	for name, p := range map[string]*procs.Proc{"temporal": s.temporal, "worker": worker, "envserver": s.env, "policyserver": s.policy} {
		if p != nil {
			out[name] = p.CPU()
		}
	}
	return out
}

// perTurn is the CPU ms per turn of each process between two samples.
func perTurn(before, after cpuSample, turns int) map[string]float64 {
	out := map[string]float64{}
	if turns == 0 {
		return out
	}
	for name, a := range after {
		out[name] = float64(a-before[name]) / float64(time.Millisecond) / float64(turns)
	}
	return out
}

// benchDataToken is the data-plane token of the bench's environment server.
const benchDataToken = "bench-data-token"
