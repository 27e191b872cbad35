package soak

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	tclient "go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/internal/stack"
)

// readyTimeout bounds how long a process may take to become ready.
const readyTimeout = 2 * time.Minute

// Tokens of the soak's private environment servers.
const (
	controlToken = "soak-control-token"
	dataToken    = "soak-data-plane-token"
)

// member is one process of the soak's stack that is sampled, killed and
// replaced: its role name, its current process, its metrics address and,
// for an environment server, its base URL.
type member struct {
	role    string
	proc    *stack.Proc
	metrics string
	url     string
	killed  bool // an environment server replaced during the soak
}

// soakStack is the dev server, two environment servers, the policy server
// and two workers.
type soakStack struct {
	cfg      Config
	launch   *stack.Launcher
	hostPort string
	tc       tclient.Client
	store    string
	modelURL string

	mu      sync.Mutex
	envs    [2]*member
	workers [2]*member
	policy  *member
}

func startStack(ctx context.Context, cfg Config) (*soakStack, error) {
	s := &soakStack{cfg: cfg, launch: &stack.Launcher{Dir: cfg.OutDir}, store: filepath.Join(cfg.OutDir, "transcripts")}
	var err error
	extra := []string{"--dynamic-config-value", fmt.Sprintf("history.hostLevelCacheMaxSize=%d", max(8096, 4*cfg.Concurrency))}
	if _, s.hostPort, s.tc, err = s.launch.StartTemporal(ctx, stack.Temporal{CLI: cfg.TemporalCLI, DevConfig: cfg.DevConfig, Extra: extra}, readyTimeout); err != nil {
		return s, err
	}
	for i := range s.envs {
		if s.envs[i], err = s.startEnv(ctx, i); err != nil {
			return s, err
		}
	}
	if err := s.startPolicy(ctx); err != nil {
		return s, err
	}
	for i := range s.workers {
		if err := s.startWorker(ctx, i); err != nil {
			return s, err
		}
	}
	return s, nil
}

// stop stops every process, the dev server last.
func (s *soakStack) stop() {
	if s.tc != nil {
		s.tc.Close()
	}
	s.launch.StopAll(10 * time.Second)
}

// startEnv starts environment server i on a free port (a replacement gets
// a new address, as a rescheduled server would).
func (s *soakStack) startEnv(ctx context.Context, i int) (*member, error) {
	m := &member{role: fmt.Sprintf("env-%d", i)}
	var err error
	if m.metrics, err = stack.FreeAddr(); err != nil {
		return nil, err
	}
	args := []string{
		"--listen", "127.0.0.1:0", "--control-token", controlToken, "--data-token", dataToken,
		"--name", m.role, "--metrics-listen", m.metrics, "--log-level", "warn",
	}
	if s.cfg.RetiredGrace > 0 {
		args = append(args, "--retired-grace", s.cfg.RetiredGrace.String())
	}
	m.proc, m.url, err = s.launch.StartServer(ctx, m.role, filepath.Join(s.cfg.BinDir, "envserver"), args, nil, stack.EnvHealth, readyTimeout)
	return m, err
}

func (s *soakStack) startPolicy(ctx context.Context) error {
	m := &member{role: "policy"}
	var err error
	if m.metrics, err = stack.FreeAddr(); err != nil {
		return err
	}
	m.proc, s.modelURL, err = s.launch.StartServer(ctx, m.role, filepath.Join(s.cfg.BinDir, "policyserver"), []string{
		"--listen", "127.0.0.1:0", "--metrics-listen", m.metrics, "--log-level", "warn",
		"--latency", s.cfg.PolicyLatency.String(), "--jitter", s.cfg.PolicyJitter.String(),
		"--error-rate", fmt.Sprint(s.cfg.ErrorRate), "--rate-limit-rate", fmt.Sprint(s.cfg.RateLimitRate),
		"--fault-seed", fmt.Sprint(uint64(s.cfg.Seed)),
	}, nil, stack.PolicyHealth, readyTimeout)
	s.policy = m
	return err
}

// startWorker starts worker i (again), on the same metrics address, and
// waits until it serves its metrics (it does once connected to Temporal).
func (s *soakStack) startWorker(ctx context.Context, i int) error {
	s.mu.Lock()
	m := s.workers[i]
	if m == nil {
		m = &member{role: fmt.Sprintf("worker-%d", i)}
		s.workers[i] = m
	}
	envURL := s.envs[0].url
	s.mu.Unlock()
	if m.metrics == "" {
		var err error
		if m.metrics, err = stack.FreeAddr(); err != nil {
			return err
		}
	}
	env := stack.WorkerEnv{
		HostPort: s.hostPort, EnvURL: envURL, ModelURL: s.modelURL, Store: s.store,
		ControlToken: controlToken, DataToken: dataToken, MetricsListen: m.metrics, AllowLoopback: true,
	}.Environ()
	p, err := s.launch.Start(m.role, filepath.Join(s.cfg.BinDir, "worker"), nil, env...)
	if err != nil {
		return err
	}
	s.mu.Lock()
	m.proc = p
	s.mu.Unlock()
	return stack.WaitFor(ctx, m.role, p, readyTimeout, func() bool { return stack.Healthy("http://" + m.metrics + "/metrics") })
}

// envURL is the current address of environment server i.
func (s *soakStack) envURL(i int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.envs[i].url
}

// envURLs are the current environment servers: the checkpoint's
// participants.
func (s *soakStack) envURLs() []string {
	return []string{s.envURL(0), s.envURL(1)}
}

// members are the processes sampled, in a fixed order.
func (s *soakStack) members() []member {
	s.mu.Lock()
	defer s.mu.Unlock()
	return []member{*s.workers[0], *s.workers[1], *s.envs[0], *s.envs[1], *s.policy}
}
