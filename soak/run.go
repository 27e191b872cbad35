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

	"github.com/turnstile-rl/turnstile/client"
	"github.com/turnstile-rl/turnstile/internal/stack"
	"github.com/turnstile-rl/turnstile/rollout"
)

// run is one soak in progress.
type run struct {
	cfg   Config
	st    *soakStack
	ts    *client.Client
	set   string
	root  string // checkpoint root
	start time.Time
	rng   *rand.Rand // the fault schedule; used by one goroutine at a time

	mu        sync.Mutex
	report    Report
	serverOf  map[string]int // rollout id → environment server index
	submitted int
	lastCP    string // the last committed checkpoint
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
	cfg.Logf("starting the stack: dev server, 2 environment servers, policy server, 2 workers")
	st, err := startStack(ctx, cfg)
	defer st.stop()
	if err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	r.st, r.ts = st, client.New(st.tc, rollout.TaskQueue)
	if err := stack.WaitFor(ctx, "workers polling", nil, readyTimeout, r.polled); err != nil {
		return nil, fmt.Errorf("soak: %w", err)
	}
	r.sample(ctx, "idle")
	if err := r.load(ctx); err != nil {
		return &r.report, err
	}
	if err := r.drain(ctx); err != nil {
		r.problem("drain: %v", err)
	}
	r.sample(ctx, "drained")
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
	loops := []struct {
		every time.Duration
		step  func(context.Context) error
	}{
		{feedEvery, r.feed},
		{r.cfg.CheckpointEvery, r.checkpoint},
		{r.cfg.WorkerKillEvery, r.killWorker},
		{r.cfg.SampleEvery, func(ctx context.Context) error { r.sample(ctx, "load"); return nil }},
	}
	if r.cfg.EnvKillEvery > 0 {
		loops = append(loops, struct {
			every time.Duration
			step  func(context.Context) error
		}{r.cfg.EnvKillEvery, r.killEnv})
	}
	for _, l := range loops {
		g.Go(func() error { return every(gctx, ctx, l.every, l.step) })
	}
	err := g.Wait()
	r.report.Load = time.Since(r.start)
	return err
}

// every calls step(ctx) each interval until loadCtx is done; a step's
// error ends the load.
func every(loadCtx, ctx context.Context, interval time.Duration, step func(context.Context) error) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-loadCtx.Done():
			return nil
		case <-t.C:
			if err := step(ctx); err != nil {
				return err
			}
		}
	}
}

func (r *run) problem(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.report.Problems = append(r.report.Problems, fmt.Sprintf(format, args...))
}

func (r *run) since() time.Duration { return time.Since(r.start).Round(time.Second) }
