package stack

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	tclient "go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/internal/devenv"
	"github.com/turnstile-rl/turnstile/workers"
)

// StartServer starts a server binary (an environment or policy server) with
// args plus a --ready-file, and waits until it has written its base URL
// there and health(base) answers 200. It returns the process and base URL.
func (l *Launcher) StartServer(ctx context.Context, name, bin string, args, env []string, health func(string) string, timeout time.Duration) (*Proc, string, error) {
	ready := filepath.Join(l.Dir, fmt.Sprintf("%s-ready-%d", name, time.Now().UnixNano()))
	p, err := l.Start(name, bin, append(append([]string(nil), args...), "--ready-file", ready), env...)
	if err != nil {
		return nil, "", err
	}
	var base string
	err = WaitFor(ctx, name, p, timeout, func() bool {
		u, ok := ReadyURL(ready)
		if !ok {
			return false
		}
		base = u
		return Healthy(health(base))
	})
	return p, base, err
}

// Temporal is how to start a dev server: the CLI binary, the
// temporal-dev.yaml it takes its settings from, and extra arguments.
type Temporal struct {
	CLI, DevConfig string
	Extra          []string
	// Port is the frontend port (0: a free one); DB the database file (""
	// in-memory). A test about Temporal's own crash restarts the server on
	// the same port and file, so the workers reconnect to it.
	Port int
	DB   string
	// MetricsPort serves the server's Prometheus /metrics there (0: a free
	// port the CLI chooses and does not tell).
	MetricsPort int
}

// StartTemporal starts an in-memory, headless dev server with t's settings
// on a free port and returns it with its address and a client connected
// once it answers health checks (the caller closes it).
func (l *Launcher) StartTemporal(ctx context.Context, t Temporal, timeout time.Duration) (*Proc, string, tclient.Client, error) {
	// A dev server started on a free port can lose one of the ports
	// it derives from it to another process starting at the same moment: it
	// then exits before it is ready, and starts again on another port.
	attempts := 1
	if t.Port == 0 {
		attempts = 3
	}
	for i := 1; ; i++ {
		p, hostPort, c, err := l.startTemporalOnce(ctx, t, timeout)
		if err == nil || p == nil || i == attempts {
			return p, hostPort, c, err
		}
		if exited, _ := p.Exited(); !exited {
			return p, hostPort, c, err
		}
	}
}

func (l *Launcher) startTemporalOnce(ctx context.Context, t Temporal, timeout time.Duration) (*Proc, string, tclient.Client, error) {
	cfg, err := devenv.Load(t.DevConfig)
	if err != nil {
		return nil, "", nil, err
	}
	port := t.Port
	if port == 0 {
		if port, err = FreePort(); err != nil {
			return nil, "", nil, err
		}
	}
	headless := true
	args, err := cfg.StartDevArgs(devenv.DefaultEnv, devenv.Overrides{Port: port, DBFilename: t.DB, Headless: &headless, LogLevel: "error", MetricsPort: t.MetricsPort})
	if err != nil {
		return nil, "", nil, err
	}
	p, err := l.Start("temporal", t.CLI, append(args, t.Extra...))
	if err != nil {
		return nil, "", nil, err
	}
	hostPort := fmt.Sprintf("127.0.0.1:%d", port)
	var c tclient.Client
	err = WaitFor(ctx, "temporal dev server", p, timeout, func() bool {
		c, err = Dial(ctx, hostPort)
		return err == nil
	})
	return p, hostPort, c, err
}

// Dial connects a quiet client to hostPort and checks the server's health.
func Dial(ctx context.Context, hostPort string) (tclient.Client, error) {
	c, err := tclient.Dial(tclient.Options{HostPort: hostPort, Logger: Quiet{}})
	if err != nil {
		return nil, err
	}
	hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := c.CheckHealth(hctx, &tclient.CheckHealthRequest{}); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// WorkerEnv is the environment of a worker process (bin/worker reads its
// settings from the environment, as an operator would set them).
type WorkerEnv struct {
	HostPort, EnvURL, ModelURL, Store string
	ControlToken, DataToken           string
	// MetricsListen, when set, serves the worker's /metrics there.
	MetricsListen string
	// LogLevel defaults to warn.
	LogLevel string
	// AllowLoopback admits every environment server, participant, model
	// endpoint and object-store endpoint on loopback (any port) as a
	// destination of the worker's secrets: the servers a test, a benchmark
	// or a soak starts listen on free ports there. Without it the worker
	// admits only EnvURL, ModelURL and the store's endpoint.
	AllowLoopback bool
}

// Loopback is the allowlist entry of every port of loopback.
const Loopback = "http://127.0.0.1:*"

// Environ is w as NAME=value entries.
func (w WorkerEnv) Environ() []string {
	level := w.LogLevel
	if level == "" {
		level = "warn"
	}
	env := []string{
		"TEMPORAL_ADDRESS=" + w.HostPort,
		"TEMPORAL_NAMESPACE=default",
		workers.EnvEnvURL + "=" + w.EnvURL,
		workers.EnvModelBaseURL + "=" + w.ModelURL,
		workers.EnvTranscriptDir + "=" + w.Store,
		workers.EnvControlToken + "=" + w.ControlToken,
		workers.EnvDataToken + "=" + w.DataToken,
		workers.EnvLogLevel + "=" + level,
	}
	if w.MetricsListen != "" {
		env = append(env, workers.EnvMetricsListen+"="+w.MetricsListen)
	}
	if w.AllowLoopback {
		env = append(env, workers.EnvAllowedParticipants+"="+Loopback, workers.EnvAllowedModelURLs+"="+Loopback,
			workers.EnvAllowedStoreEndpoints+"="+Loopback)
	}
	return env
}

// Quiet drops the SDK's logs (readiness probes, drivers' own clients).
type Quiet struct{}

func (Quiet) Debug(string, ...any) {}
func (Quiet) Info(string, ...any)  {}
func (Quiet) Warn(string, ...any)  {}
func (Quiet) Error(string, ...any) {}
