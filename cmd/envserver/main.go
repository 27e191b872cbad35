// Command envserver hosts environments behind the participant data plane:
// sessions keyed by rollout id, mutations applied at most once per request
// id, stale attempts fenced out.
//
//	envserver --listen 127.0.0.1:0 --ready-file /tmp/env.url --envs counter
//
// With --ready-file it writes its base URL (http://HOST:PORT) to that file
// once it is listening, so a test harness can use port 0 and learn the port.
// Failpoints are armed through TURNSTILE_FAILPOINTS. The checkpoint control
// plane (/v1/control/…) is on only with a bearer token, from
// TURNSTILE_CONTROL_TOKEN or --control-token (the variable keeps the token out
// of the process list); --name is the participant name it reports.
package main

import (
	"github.com/turnstile-rl/turnstile/atomicfile"
	"github.com/turnstile-rl/turnstile/cmd/internal/cli"
	"github.com/turnstile-rl/turnstile/logging"

	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/catalog"
	"github.com/turnstile-rl/turnstile/envserver"
	"github.com/turnstile-rl/turnstile/failpoint"
	"github.com/turnstile-rl/turnstile/protocol"
	"github.com/turnstile-rl/turnstile/storage"
)

// Defaults and names of the command's settings.
const (
	ListenEnvVar    = "TURNSTILE_ENV_LISTEN"
	DefaultListen   = "127.0.0.1:8091"
	shutdownTimeout = 10 * time.Second
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if code := cli.Report(os.Stderr, "envserver", run(ctx, os.Args[1:], os.Stderr)); code != cli.ExitOK {
		stop()
		os.Exit(code)
	}
}

// config is the parsed command line.
type config struct {
	logLevel     string
	logFormat    string
	listen       string
	readyFile    string
	name         string
	controlToken string
	envs         []envs.Environment
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("envserver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := DefaultListen
	if v := os.Getenv(ListenEnvVar); v != "" {
		listen = v
	}
	names := catalog.Names()

	var cfg config
	fs.StringVar(&cfg.listen, "listen", listen, "address to listen on (port 0 picks a free port); default from $"+ListenEnvVar)
	fs.StringVar(&cfg.readyFile, "ready-file", "", "once listening, atomically write the base URL to this file")
	fs.StringVar(&cfg.name, "name", envserver.DefaultServerName, "participant name reported by the control plane and written into checkpoints")
	fs.StringVar(&cfg.controlToken, "control-token", os.Getenv(protocol.ControlTokenEnvVar),
		"bearer token of the checkpoint control plane; empty turns it off; default from $"+protocol.ControlTokenEnvVar)
	fs.StringVar(&cfg.logLevel, "log-level", logging.DefaultLevel, "log level: debug, info, warn or error")
	fs.StringVar(&cfg.logFormat, "log-format", logging.DefaultFormat, "log format: json or console")
	envList := fs.String("envs", strings.Join(names, ","), "comma-separated environments to host (known: "+strings.Join(names, ", ")+")")
	cli.SetUsage(fs, "Hosts turnstile environments behind the participant protocol (data plane and checkpoint control plane).", []cli.Setting{
		{Env: ListenEnvVar, Default: DefaultListen, Meaning: "address to listen on"},
		{Env: protocol.ControlTokenEnvVar, Meaning: "bearer token of the control plane (empty: control plane off)"},
		{Env: failpoint.EnvVar, Meaning: "crash tests only: named failpoints to arm"},
	})
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	seen := map[string]bool{}
	for _, n := range strings.Split(*envList, ",") {
		n = strings.TrimSpace(n)
		if n == "" || seen[n] {
			continue
		}
		seen[n] = true
		e, err := catalog.Find(n)
		if err != nil {
			return config{}, fmt.Errorf("--envs: %w", err)
		}
		cfg.envs = append(cfg.envs, e.New())
	}
	if len(cfg.envs) == 0 {
		return config{}, errors.New("--envs: no environment selected")
	}
	if strings.TrimSpace(cfg.name) == "" {
		return config{}, errors.New("--name: empty participant name")
	}
	if cfg.controlToken != strings.TrimSpace(cfg.controlToken) {
		// A token with stray whitespace (a trailing newline from a file)
		// would never match what a client sends.
		return config{}, errors.New("--control-token: leading or trailing whitespace")
	}
	return cfg, nil
}

// run serves until ctx is cancelled, then shuts down gracefully.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return cli.Usage(err)
	}
	fps, err := failpoint.FromEnv()
	if err != nil {
		return fmt.Errorf("bad %s: %w", failpoint.EnvVar, err)
	}
	log, err := logging.New(stderr, cfg.logLevel, cfg.logFormat)
	if err != nil {
		return cli.Usage(err)
	}
	defer func() { _ = log.Sync() }()

	// Checkpoint locations may be object-store URLs: the coordinator names
	// them, this process's environment holds the credentials.
	opener := &storage.Opener{}
	defer opener.Close()
	srv, err := envserver.NewServer(envserver.ServerConfig{Envs: cfg.envs, Failpoints: fps, Logger: log,
		Name: cfg.name, ControlToken: cfg.controlToken, Storage: opener})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.listen, err)
	}
	base := "http://" + ln.Addr().String()
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()

	if cfg.readyFile != "" {
		if err := atomicfile.WriteFile(cfg.readyFile, []byte(base), 0o644); err != nil {
			_ = hs.Close()
			return fmt.Errorf("write ready file: %w", err)
		}
	}
	names := make([]string, 0, len(cfg.envs))
	for _, e := range cfg.envs {
		names = append(names, e.Spec().Name)
	}
	log.Info("env server listening", zap.String("url", base), zap.Strings("envs", names),
		zap.String("name", cfg.name), zap.Bool("control_plane", cfg.controlToken != ""))

	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("env server shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}
