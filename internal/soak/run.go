package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"golang.org/x/sync/errgroup"

	"github.com/turnstile-rl/turnstile/internal/stack"
	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// run is one soak in progress.
type run struct {
	cfg   Config
	st    *soakStack
	ts    *trainer.Client
	set   string
	root  string // checkpoint root
	start time.Time
	rngMu sync.Mutex
	rng   *rand.Rand // the fault schedule; drawn through pick, by the fault loops at once

	// envFault keeps the faults aimed at the environment servers and the
	// policy (SIGKILLs of a server, network faults) one at a time, so each
	// detection is explained by one fault.
	envFault sync.Mutex

	mu        sync.Mutex
	report    Report
	serverOf  map[string]int // rollout id → environment server index
	submitted int
	cps       checkpointState
}

// Run runs one soak and returns its report; the error is for a soak that
// could not run (a process that would not start), while invariant
// violations are the report's Problems (see Report.Err).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	r := &run{
		cfg: cfg, set: fmt.Sprintf("soak-%d", time.Now().Unix()%1e6), root: filepath.Join(cfg.OutDir, "checkpoints"),
		rng: rand.New(rand.NewPCG(uint64(cfg.Seed), 0x50a4)), serverOf: map[string]int{},
	}
	r.report.Set, r.report.Config = r.set, cfg
	if err := os.MkdirAll(r.root, 0o755); err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	cfg.Logf("starting the stack: dev server, Toxiproxy, 2 environment servers, policy server, 2 workers")
	st, err := startStack(ctx, cfg)
	defer st.stop()
	if err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	r.st, r.ts = st, trainer.New(st.tc, rollout.TaskQueue)
	if err := stack.WaitFor(ctx, "workers polling", nil, readyTimeout, r.polled); err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	r.sample(ctx, "idle")
	if err := r.setUp(ctx); err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	if err := r.load(ctx); err != nil {
		// The report must not read PASS: no check ran.
		r.problem("load stopped, so no end check ran: %v", err)
		return &r.report, err
	}
	if err := r.drain(ctx); err != nil {
		r.problem("drain: %v", err)
	}
	r.sample(ctx, "drained")
	r.tearDown(ctx)
	r.check(ctx)
	return &r.report, nil
}

func (r *run) polled() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := r.st.tc.DescribeTaskQueue(ctx, rollout.TaskQueue, enumspb.TASK_QUEUE_TYPE_WORKFLOW)
	return err == nil && len(resp.GetPollers()) > 0
}

// load feeds rollouts and injects faults for the configured duration. The
// loops watch loadCtx; what they started (a checkpoint, a restart) runs to
// its end under ctx.
func (r *run) load(ctx context.Context) error {
	r.start = time.Now()
	loadCtx, cancel := context.WithTimeout(ctx, r.cfg.Duration)
	defer cancel()
	r.cfg.Logf("load: %d concurrent rollouts for %s", r.cfg.Concurrency, r.cfg.Duration)
	g, gctx := errgroup.WithContext(loadCtx)
	// Worker kills come half an interval out of step, so with equal
	// intervals a sample never lands on a worker that just died; the
	// feeder starts at once. Nothing here checkpoints or recovers: the
	// schedule and the watchdog do; the trainer loop only watches the
	// schedule's fires, moves its tag on and collects garbage.
	loops := []loop{
		{feedEvery, time.Millisecond, r.feed},
		{trainerEvery, 0, r.trainerStep},
		{r.cfg.WorkerKillEvery, r.cfg.WorkerKillEvery / 2, r.killWorker},
		{r.cfg.SampleEvery, 0, func(ctx context.Context) error { r.sample(ctx, "load"); return nil }},
	}
	if r.cfg.EnvKillEvery > 0 {
		// Half an interval first; killEnv waits for a committed
		// checkpoint, so there is one to recover from.
		loops = append(loops, loop{r.cfg.EnvKillEvery, r.cfg.EnvKillEvery / 2, r.killEnv})
	}
	if r.cfg.NetFaultEvery > 0 {
		loops = append(loops, loop{r.cfg.NetFaultEvery, r.cfg.NetFaultEvery / 4, r.netFault})
	}
	for _, l := range loops {
		g.Go(func() error { return l.run(gctx, ctx) })
	}
	err := g.Wait()
	r.report.Load = time.Since(r.start)
	return err
}

// loop is one periodic step of the load: first at first (or at every, when
// first is zero), then every interval.
type loop struct {
	every, first time.Duration
	step         func(context.Context) error
}

// run calls step(ctx) on schedule until loadCtx is done; a step's error
// ends the load.
func (l loop) run(loadCtx, ctx context.Context) error {
	first := l.first
	if first == 0 {
		first = l.every
	}
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-loadCtx.Done():
			return nil
		case <-t.C:
			began := time.Now()
			if err := l.step(ctx); err != nil {
				return err
			}
			// The next step is due an interval after this one began (at
			// once, if this one overran it).
			t.Reset(max(0, l.every-time.Since(began)))
		}
	}
}

func (r *run) problem(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.report.Problems = append(r.report.Problems, fmt.Sprintf(format, args...))
}

// since is the time since the load began, zero before.
func (r *run) since() time.Duration {
	if r.start.IsZero() {
		return 0
	}
	return time.Since(r.start).Round(time.Second)
}

// pick draws the index of the process to kill among n.
func (r *run) pick(n int) int {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return r.rng.IntN(n)
}
