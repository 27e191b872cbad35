package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	tclient "go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/devenv"
	"github.com/turnstile-rl/turnstile/workers"
)

// readyTimeout bounds how long a process may take to become ready.
const readyTimeout = 2 * time.Minute

// proc is one process the bench started; it is stopped by its PID.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, waits up to grace, then SIGKILL.
func (p *proc) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	}
}

// cpu is the process's user+system CPU time so far, read from /proc (zero
// where there is none: the figure is then absent, not wrong).
func (p *proc) cpu() time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses and may hold
	// spaces: utime and stime are the 12th and 13th of them.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const clockTicks = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / clockTicks
}

// stack is the set of processes one bench run measures.
type stack struct {
	cfg   Config
	logf  func(string, ...any)
	mu    sync.Mutex
	procs []*proc

	temporal, worker, floor, env, policy, slow *proc
	hostPort                                   string
	client                                     tclient.Client
	envURL, policyURL, slowURL                 string
	store                                      string
	token                                      string
}

// Task queues of the two workers under test.
const (
	floorQueue = "bench-floor"
)

func (s *stack) start(name, bin string, args []string, env ...string) (*proc, error) {
	logPath := filepath.Join(s.cfg.OutDir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	return p, nil
}

// stopAll stops every process, newest first, the dev server last.
func (s *stack) stopAll() {
	if s.client != nil {
		s.client.Close()
	}
	s.mu.Lock()
	procs := append([]*proc(nil), s.procs...)
	s.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].stop(15 * time.Second)
	}
}

// waitFor polls cond until it holds, p exits or readyTimeout passes.
func waitFor(ctx context.Context, what string, p *proc, cond func() bool) error {
	deadline := time.Now().Add(readyTimeout)
	for !cond() {
		if p != nil && p.exited() {
			return fmt.Errorf("%s: %s exited (%v) before it was ready; log %s", what, p.name, p.err, p.log)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not ready after %s", what, readyTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond): // readiness probe interval
		}
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startTemporal starts an in-memory, headless dev server with the settings
// of temporal-dev.yaml on a free port, plus cache sizes for the largest set.
func (s *stack) startTemporal(ctx context.Context) error {
	dev, err := devenv.Load(s.cfg.DevConfig)
	if err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	headless := true
	args, err := dev.StartDevArgs(devenv.DefaultEnv, devenv.Overrides{Port: port, Headless: &headless, LogLevel: "error"})
	if err != nil {
		return err
	}
	// The dev server caches 8,096 workflows' mutable state; a larger set
	// would thrash it (and measure the cache, not turnstile).
	maxSet := s.cfg.Concurrency
	for _, n := range s.cfg.CheckpointSizes {
		maxSet = max(maxSet, n)
	}
	args = append(args, "--dynamic-config-value", fmt.Sprintf("history.hostLevelCacheMaxSize=%d", max(8096, 2*maxSet)))
	if s.temporal, err = s.start("temporal", s.cfg.Temporal, args); err != nil {
		return err
	}
	s.hostPort = fmt.Sprintf("127.0.0.1:%d", port)
	return waitFor(ctx, "temporal dev server", s.temporal, func() bool {
		c, err := tclient.Dial(tclient.Options{HostPort: s.hostPort, Logger: quiet{}})
		if err != nil {
			return false
		}
		hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if _, err := c.CheckHealth(hctx, &tclient.CheckHealthRequest{}); err != nil {
			c.Close()
			return false
		}
		s.client = c
		return true
	})
}

// startServer starts a binary that writes its base URL to --ready-file and
// answers healthURL(base) once ready; it returns the base URL.
func (s *stack) startServer(ctx context.Context, name string, args []string, health func(string) string) (*proc, string, error) {
	ready := filepath.Join(s.cfg.OutDir, name+".url")
	_ = os.Remove(ready)
	bin := filepath.Join(s.cfg.BinDir, strings.TrimSuffix(name, "-slow"))
	p, err := s.start(name, bin, append([]string{"--listen", "127.0.0.1:0", "--ready-file", ready, "--log-level", "warn"}, args...))
	if err != nil {
		return nil, "", err
	}
	var base string
	err = waitFor(ctx, name, p, func() bool {
		data, err := os.ReadFile(ready)
		if err != nil || len(data) == 0 {
			return false
		}
		base = strings.TrimSpace(string(data))
		return healthy(health(base))
	})
	return p, base, err
}

func healthy(url string) bool {
	resp, err := http.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func policyHealth(base string) string { return strings.TrimSuffix(base, "/v1") + "/healthz" }

// startAll brings up the whole stack.
func (s *stack) startAll(ctx context.Context) error {
	s.token = "bench-control-token"
	// The environment server refuses to start without a data-plane token
	// (issue 10); the bench's stack is private, so a fixed one will do.
	s.store = filepath.Join(s.cfg.OutDir, "transcripts")
	s.logf("starting the Temporal dev server")
	if err := s.startTemporal(ctx); err != nil {
		return err
	}
	var err error
	if s.env, s.envURL, err = s.startServer(ctx, "envserver", []string{"--control-token", s.token, "--data-token", benchDataToken, "--name", "env-0"},
		func(b string) string { return b + "/healthz" }); err != nil {
		return err
	}
	if s.policy, s.policyURL, err = s.startServer(ctx, "policyserver", nil, policyHealth); err != nil {
		return err
	}
	if s.slow, s.slowURL, err = s.startServer(ctx, "policyserver-slow", []string{
		"--latency", s.cfg.SlowPolicy.String(), "--jitter", s.cfg.SlowJitter.String(), "--fault-seed", "7",
	}, policyHealth); err != nil {
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
	env := []string{
		"TEMPORAL_ADDRESS=" + s.hostPort,
		"TEMPORAL_NAMESPACE=default",
		"TURNSTILE_ENV_URL=" + s.envURL,
		"TURNSTILE_MODEL_BASE_URL=" + s.policyURL,
		"TURNSTILE_TRANSCRIPT_DIR=" + s.store,
		"TURNSTILE_CONTROL_TOKEN=" + s.token,
		"TURNSTILE_DATA_TOKEN=" + benchDataToken,
		"TURNSTILE_LOG_LEVEL=warn",
	}
	if s.cfg.CPUProfile {
		env = append(env, workers.EnvCPUProfile+"="+filepath.Join(s.cfg.OutDir, "worker.pprof"))
	}
	var err error
	if s.worker, err = s.start("worker", filepath.Join(s.cfg.BinDir, "worker"), nil, env...); err != nil {
		return err
	}
	return waitFor(ctx, "turnstile worker", s.worker, func() bool { return s.polled(ctx, workerQueue) })
}

// startFloorWorker starts the floor's worker: the bench binary itself, in
// its floor-worker mode, so its CPU is measured apart like the worker's.
func (s *stack) startFloorWorker(ctx context.Context) error {
	var err error
	s.floor, err = s.start("floor-worker", filepath.Join(s.cfg.BinDir, "bench"),
		[]string{FloorWorkerCommand, "--address", s.hostPort, "--task-queue", floorQueue})
	if err != nil {
		return err
	}
	return waitFor(ctx, "floor worker", s.floor, func() bool { return s.polled(ctx, floorQueue) })
}

func (s *stack) polled(ctx context.Context, queue string) bool {
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := s.client.DescribeTaskQueue(dctx, queue, enumspb.TASK_QUEUE_TYPE_WORKFLOW)
	return err == nil && len(resp.GetPollers()) > 0
}

// cpuSample is the CPU time of each process at one moment.
type cpuSample map[string]time.Duration

func (s *stack) sampleCPU(worker *proc) cpuSample {
	out := cpuSample{}
	for name, p := range map[string]*proc{"temporal": s.temporal, "worker": worker, "envserver": s.env, "policyserver": s.policy} {
		if p != nil {
			out[name] = p.cpu()
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

// quiet drops the SDK's logs of readiness probes and the bench's client.
type quiet struct{}

func (quiet) Debug(string, ...any) {}
func (quiet) Info(string, ...any)  {}
func (quiet) Warn(string, ...any)  {}
func (quiet) Error(string, ...any) {}

// benchDataToken is the data-plane token of the bench's environment server.
const benchDataToken = "bench-data-token"
