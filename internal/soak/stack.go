package soak

import (
	"context"
	"fmt"
	"net/url"
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
// restarted: its role name, its current process, its metrics address and,
// for an environment server, the address it listens at (its supervisor
// brings it back there) and the base URL the set names it by (its proxy's,
// or its own without network faults).
type member struct {
	role    string
	proc    *stack.Proc
	metrics string
	listen  string
	url     string
	proxy   *stack.Proxy
	killed  bool // an environment server restarted during the soak
	down    bool // killed and not yet recovered: the feeder passes it by
}

// soakStack is the dev server, Toxiproxy, two environment servers, the
// policy server and two workers.
type soakStack struct {
	cfg      Config
	launch   *stack.Launcher
	temporal *stack.Proc
	hostPort string
	tc       tclient.Client
	store    string
	db       string
	modelURL string
	toxi     *stack.Toxiproxy

	mu      sync.Mutex
	envs    [2]*member
	workers [2]*member
	policy  *member
}

func startStack(ctx context.Context, cfg Config) (*soakStack, error) {
	s := &soakStack{cfg: cfg, launch: &stack.Launcher{Dir: cfg.OutDir}, store: filepath.Join(cfg.OutDir, "transcripts"),
		db: filepath.Join(cfg.OutDir, "temporal.db")}
	var err error
	// The database is a file, so its disk use is measured; in WAL mode
	// with synchronous=normal, so a commit does not wait for an fsync (the
	// dev server's default journal fsyncs every transaction: on the
	// shared machine the rollouts' workflow tasks then queued for minutes).
	extra := []string{"--dynamic-config-value", fmt.Sprintf("history.hostLevelCacheMaxSize=%d", max(8096, 4*cfg.Concurrency)),
		"--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=normal"}
	if s.temporal, s.hostPort, s.tc, err = s.launch.StartTemporal(ctx, stack.Temporal{CLI: cfg.TemporalCLI, DevConfig: cfg.DevConfig, Extra: extra, DB: s.db}, readyTimeout); err != nil {
		return s, err
	}
	if cfg.NetFaultEvery > 0 {
		if s.toxi, err = s.launch.StartToxiproxy(ctx, cfg.Toxiproxy, readyTimeout); err != nil {
			return s, err
		}
	}
	for i := range s.envs {
		m := &member{role: fmt.Sprintf("env-%d", i)}
		if m.listen, err = stack.FreeAddr(); err != nil {
			return s, err
		}
		if err := s.startEnv(ctx, m); err != nil {
			return s, err
		}
		if m.url, m.proxy, err = s.front(m.role, m.url); err != nil {
			return s, err
		}
		s.envs[i] = m
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

// front puts a Toxiproxy proxy in front of base and returns the URL
// clients use: the proxy's, or base itself without network faults.
func (s *soakStack) front(name, base string) (string, *stack.Proxy, error) {
	if s.toxi == nil {
		return base, nil, nil
	}
	p, err := s.toxi.Front(name, base)
	if err != nil {
		return "", nil, err
	}
	return p.URL, p, nil
}

// stop stops every process, the dev server last.
func (s *soakStack) stop() {
	if s.tc != nil {
		s.tc.Close()
	}
	s.launch.StopAll(10 * time.Second)
}

// startEnv starts environment server m at its listen address (again,
// after a kill: its supervisor brings it back at the same address).
func (s *soakStack) startEnv(ctx context.Context, m *member) error {
	if m.metrics == "" {
		var err error
		if m.metrics, err = stack.FreeAddr(); err != nil {
			return err
		}
	}
	args := []string{
		"--listen", m.listen, "--control-token", controlToken, "--data-token", dataToken,
		"--name", m.role, "--metrics-listen", m.metrics, "--log-level", "warn",
	}
	if s.cfg.RetiredGrace > 0 {
		args = append(args, "--retired-grace", s.cfg.RetiredGrace.String())
	}
	if s.cfg.ForgetAfter > 0 {
		args = append(args, "--forget-after", s.cfg.ForgetAfter.String())
	}
	p, base, err := s.launch.StartServer(ctx, m.role, filepath.Join(s.cfg.BinDir, "envserver"), args, nil, stack.EnvHealth, readyTimeout)
	if err != nil {
		return err
	}
	if u, perr := url.Parse(base); perr != nil || u.Host != m.listen {
		p.Kill()
		return fmt.Errorf("%s listens at %s, want %s", m.role, base, m.listen)
	}
	s.mu.Lock()
	m.proc = p
	if m.url == "" {
		m.url = base
	}
	s.mu.Unlock()
	return nil
}

func (s *soakStack) startPolicy(ctx context.Context) error {
	m := &member{role: "policy"}
	var err error
	if m.metrics, err = stack.FreeAddr(); err != nil {
		return err
	}
	var base string
	m.proc, base, err = s.launch.StartServer(ctx, m.role, filepath.Join(s.cfg.BinDir, "policyserver"), []string{
		"--listen", "127.0.0.1:0", "--metrics-listen", m.metrics, "--log-level", "warn",
		"--latency", s.cfg.PolicyLatency.String(), "--jitter", s.cfg.PolicyJitter.String(),
		"--error-rate", fmt.Sprint(s.cfg.ErrorRate), "--rate-limit-rate", fmt.Sprint(s.cfg.RateLimitRate),
		"--fault-seed", fmt.Sprint(uint64(s.cfg.Seed)),
	}, nil, stack.PolicyHealth, readyTimeout)
	s.policy = m
	if err != nil {
		return err
	}
	s.modelURL, m.proxy, err = s.front(m.role, base)
	m.url = s.modelURL
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

// envURL is the address the set names environment server i by.
func (s *soakStack) envURL(i int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.envs[i].url
}

// envURLs are the environment servers as the set names them: the
// checkpoints' participants and the watchdog's.
func (s *soakStack) envURLs() []string {
	return []string{s.envURL(0), s.envURL(1)}
}

// upEnvs are the indexes of the environment servers the feeder may use:
// every one not killed and waiting for its recovery (both, if both are).
func (s *soakStack) upEnvs() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var up []int
	for i, m := range s.envs {
		if !m.down {
			up = append(up, i)
		}
	}
	if len(up) == 0 {
		return []int{0, 1}
	}
	return up
}

// setDown marks environment server i down (killed, not yet recovered) or
// up again.
func (s *soakStack) setDown(i int, down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.envs[i].down = down
	if down {
		s.envs[i].killed = true
	}
}

// members are the processes with a metrics endpoint, in a fixed order.
func (s *soakStack) members() []member {
	s.mu.Lock()
	defer s.mu.Unlock()
	return []member{*s.workers[0], *s.workers[1], *s.envs[0], *s.envs[1], *s.policy}
}

// proxies are the network fault targets, in a fixed order: the two
// environment servers' and the policy's.
func (s *soakStack) proxies() []*stack.Proxy {
	return []*stack.Proxy{s.envs[0].proxy, s.envs[1].proxy, s.policy.proxy}
}
