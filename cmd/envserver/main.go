// Command envserver hosts environments behind the participant data plane:
// sessions keyed by rollout id, mutations applied at most once per request
// id, stale attempts fenced out.
//
//	envserver --listen 127.0.0.1:0 --ready-file /tmp/env.url --envs counter
//
// With --ready-file it writes its base URL (http://HOST:PORT) to that file
// once it is listening, so a test harness can use port 0 and learn the port.
// Failpoints are armed through TURNSTILE_FAILPOINTS. The data plane wants a
// bearer token, from TURNSTILE_DATA_TOKEN or --data-token (without one the
// server refuses to start unless --insecure-no-data-auth). The checkpoint
// control plane (/v1/control/…) is on only with a different bearer token,
// from TURNSTILE_CONTROL_TOKEN or --control-token (the variables keep the
// tokens out of the process list); --name is the participant name it
// reports. --tls-cert/--tls-key serve HTTPS, --tls-client-ca requires client
// certificates (mutual TLS); the ready file then holds an https:// URL.
//
// --remote puts an environment that is already served over HTTP (a NeMo Gym
// resources server, or a Gymnasium-style reset/step server) behind the
// same protocol (package envs/remote):
//
//	envserver --envs '' --remote name=weather,url=http://127.0.0.1:9000,kind=nemo-gym,tools=tools.json
package main

import (
	"github.com/turnstile-rl/turnstile/cmd/internal/cli"
	"github.com/turnstile-rl/turnstile/internal/atomicfile"
	"github.com/turnstile-rl/turnstile/internal/logging"
	"github.com/turnstile-rl/turnstile/internal/metrics"

	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/catalog"
	"github.com/turnstile-rl/turnstile/internal/artifact"
	"github.com/turnstile-rl/turnstile/internal/bearer"
	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/internal/httpserver"
	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/internal/tlsfiles"
	"github.com/turnstile-rl/turnstile/participants/envserver"
	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/participants/remote"
)

// Defaults and names of the command's settings.
const (
	ListenEnvVar = "TURNSTILE_ENV_LISTEN"
	// MetricsEnvVar is the default of --metrics-listen.
	MetricsEnvVar   = "TURNSTILE_ENV_METRICS_LISTEN"
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
	logLevel      string
	logFormat     string
	listen        string
	metricsListen string
	readyFile     string
	name          string
	controlToken  string
	dataToken     string
	insecureData  bool
	retired       int
	retiredGrace  time.Duration
	forgetAfter   time.Duration
	tls           tlsfiles.ServerFiles
	http          httpserver.Timeouts
	checkpoints   artifact.Settings
	fileMode      fs.FileMode
	envs          []envs.Environment
	remotes       []remote.Config
	restartOnly   []string
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("envserver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := DefaultListen
	if v := os.Getenv(ListenEnvVar); v != "" {
		listen = v
	}
	names := catalog.HostedNames()

	var cfg config
	var err error
	if cfg.http, err = httpserver.FromLookup(os.LookupEnv); err != nil {
		return config{}, err
	}
	if cfg.checkpoints, err = artifact.SettingsFromLookup(os.LookupEnv); err != nil {
		return config{}, err
	}
	if cfg.fileMode, err = storage.FileModeFromLookup(os.LookupEnv); err != nil {
		return config{}, err
	}
	cfg.http.AddFlags(fs)
	fs.StringVar(&cfg.listen, "listen", listen, "address to listen on (port 0 picks a free port); default from $"+ListenEnvVar)
	fs.StringVar(&cfg.metricsListen, "metrics-listen", os.Getenv(MetricsEnvVar), "serve Prometheus metrics at /metrics on this address (empty: none); default from $"+MetricsEnvVar)
	fs.StringVar(&cfg.readyFile, "ready-file", "", "once listening, atomically write the base URL to this file")
	fs.StringVar(&cfg.name, "name", envserver.DefaultServerName, "participant name reported by the control plane and written into checkpoints")
	fs.StringVar(&cfg.controlToken, "control-token", os.Getenv(protocol.ControlTokenEnvVar),
		"bearer token of the checkpoint control plane; empty turns it off; default from $"+protocol.ControlTokenEnvVar)
	fs.StringVar(&cfg.dataToken, "data-token", os.Getenv(protocol.DataTokenEnvVar),
		"bearer token of the data plane (must differ from the control token); default from $"+protocol.DataTokenEnvVar)
	fs.BoolVar(&cfg.insecureData, "insecure-no-data-auth", false, "serve the data plane without a token (local development only)")
	fs.IntVar(&cfg.retired, "retired-sessions", envserver.DefaultRetiredSessions,
		"how many finished (retired) sessions keep their stored responses for retries; beyond it the least recently used drop theirs")
	fs.DurationVar(&cfg.retiredGrace, "retired-grace", envserver.DefaultRetiredGrace,
		"how long a finished session keeps its stored responses after its last use; negative: no time limit. A retry of a dropped session's request is refused (session_retired), never applied again")
	fs.DurationVar(&cfg.forgetAfter, "forget-after", envserver.DefaultForgetAfter,
		"how long a finished rollout whose stored responses were dropped is still remembered (its fence, so a late request of an old attempt is refused stale_attempt) after its retirement or last fence change; then it is forgotten and no longer in checkpoints. Keep it above the longest environment call timeout of your sets; negative: never forget")
	cfg.tls.AddFlags(fs, os.Getenv)
	fs.StringVar(&cfg.logLevel, "log-level", logging.DefaultLevel, "log level: debug, info, warn or error")
	fs.StringVar(&cfg.logFormat, "log-format", logging.DefaultFormat, "log format: json or console")
	restartOnly := fs.String("restart-only", "", "comma-separated hosted environments to serve restart_only whatever mode they declare (turns replay or export off for them: their rollouts start over after a restore)")
	envList := fs.String("envs", strings.Join(names, ","), "comma-separated environments to host (known: "+strings.Join(names, ", ")+"); may be empty with --remote")
	fs.Func("remote", "host an environment served over HTTP (repeatable): name=NAME,url=URL,kind=nemo-gym|gymnasium[,tools=FILE][,timeout=DURATION]; "+
		"restart_only unless the remote declares export/restore", func(v string) error {
		rc, err := remote.ParseSpec(v)
		if err == nil {
			cfg.remotes = append(cfg.remotes, rc)
		}
		return err
	})
	cli.SetUsage(fs, "Hosts turnstile environments behind the participant protocol (data plane and checkpoint control plane).", append([]cli.Setting{
		{Env: ListenEnvVar, Default: DefaultListen, Meaning: "address to listen on"},
		{Env: protocol.ControlTokenEnvVar, Meaning: "bearer token of the control plane (empty: control plane off)"},
		{Env: protocol.DataTokenEnvVar, Meaning: "bearer token of the data plane (required unless --insecure-no-data-auth)"},
		{Env: tlsfiles.EnvCert, Meaning: "HTTPS certificate chain (PEM)"},
		{Env: tlsfiles.EnvKey, Meaning: "HTTPS private key (PEM)"},
		{Env: tlsfiles.EnvClientCA, Meaning: "CA of client certificates: mutual TLS"},
		{Env: MetricsEnvVar, Meaning: "address of /metrics (empty: none)"},
		{Env: storage.EnvFileMode, Default: "0600", Meaning: "mode of the checkpoint files it writes (directories: the same plus x where r is set)"},
		{Env: failpoint.EnvVar, Meaning: "crash tests only: named failpoints to arm"},
	}, append(cli.CheckpointSettings(), cli.HTTPSettings()...)...))
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := cfg.http.Validate(); err != nil {
		return config{}, err
	}
	if cfg.envs, err = selectEnvs(*envList, names); err != nil {
		return config{}, err
	}
	for _, n := range strings.Split(*restartOnly, ",") {
		if n = strings.TrimSpace(n); n != "" {
			cfg.restartOnly = append(cfg.restartOnly, n)
		}
	}
	if len(cfg.envs) == 0 && len(cfg.remotes) == 0 {
		return config{}, errors.New("--envs: no environment selected")
	}
	if cfg.retired < 1 {
		return config{}, fmt.Errorf("--retired-sessions: %d, want at least 1", cfg.retired)
	}
	if cfg.retiredGrace == 0 {
		return config{}, errors.New("--retired-grace: 0 would drop every response as its session finishes; give a duration, or a negative one for no time limit")
	}
	if cfg.forgetAfter == 0 {
		return config{}, errors.New("--forget-after: 0 would forget a rollout's fence as soon as it finishes; give a duration, or a negative one to never forget")
	}
	if strings.TrimSpace(cfg.name) == "" {
		return config{}, errors.New("--name: empty participant name")
	}
	for _, tok := range []struct{ setting, value string }{
		{"--control-token (or $" + protocol.ControlTokenEnvVar + ")", cfg.controlToken},
		{"--data-token (or $" + protocol.DataTokenEnvVar + ")", cfg.dataToken},
	} {
		if err := bearer.Check(tok.setting, tok.value); err != nil {
			return config{}, err
		}
	}
	return cfg, nil
}

// logListening says where the server listens and how it is protected.
func logListening(log *zap.Logger, cfg config, base string) {
	names := make([]string, 0, len(cfg.envs))
	for _, e := range cfg.envs {
		names = append(names, e.Spec().Name)
	}
	log.Info("env server listening", zap.String("url", base), zap.Strings("envs", names),
		zap.String("name", cfg.name), zap.Bool("control_plane", cfg.controlToken != ""),
		zap.Bool("data_auth", !cfg.insecureData), zap.Bool("tls", cfg.tls.Enabled()), zap.Bool("mutual_tls", cfg.tls.ClientCA != ""))
	if cfg.insecureData {
		log.Warn("the data plane is unauthenticated (--insecure-no-data-auth): any process that reaches it can mutate sessions")
	}
}

// selectEnvs builds the catalog's environments named in list (comma
// separated, duplicates ignored).
func selectEnvs(list string, hosted []string) ([]envs.Environment, error) {
	var out []envs.Environment
	seen := map[string]bool{}
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		if n == "" || seen[n] {
			continue
		}
		seen[n] = true
		e, err := catalog.Find(n)
		if err != nil {
			return nil, fmt.Errorf("--envs: %w", err)
		}
		if !e.Hosted() {
			return nil, fmt.Errorf("--envs: %s runs in %s, not in this server (hosted here: %s)", n, e.Remote, strings.Join(hosted, ", "))
		}
		out = append(out, e.New())
	}
	return out, nil
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

	for _, rc := range cfg.remotes {
		env, err := remote.New(ctx, rc, nil)
		if err != nil {
			return err
		}
		cfg.envs = append(cfg.envs, env)
	}
	// Checkpoint locations may be object-store URLs: the coordinator names
	// them, this process's environment holds the credentials.
	opener := &storage.Opener{FileMode: cfg.fileMode}
	defer opener.Close()
	srv, err := envserver.NewServer(envserver.ServerConfig{Envs: cfg.envs, Failpoints: fps, Logger: log,
		Name: cfg.name, ControlToken: cfg.controlToken, DataToken: cfg.dataToken, InsecureNoDataAuth: cfg.insecureData,
		Storage: opener, RetiredSessions: cfg.retired, RetiredGrace: cfg.retiredGrace, ForgetAfter: cfg.forgetAfter, RestartOnly: cfg.restartOnly,
		Checkpoints: cfg.checkpoints, WriteTimeout: cfg.http.Write})
	if err != nil {
		return cli.Usage(err)
	}
	tlsCfg, err := cfg.tls.Config()
	if err != nil {
		return cli.Usage(err)
	}
	ln, scheme, err := tlsfiles.Listen(cfg.listen, tlsCfg)
	if err != nil {
		return err
	}
	base := scheme + ln.Addr().String()
	handler, err := serveMetrics(ctx, cfg, srv, log)
	if err != nil {
		_ = ln.Close()
		return err
	}
	hs := cfg.http.Server(handler)
	hs.TLSConfig = tlsCfg
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()

	if cfg.readyFile != "" {
		if err := atomicfile.WriteFile(cfg.readyFile, []byte(base), 0o644); err != nil {
			_ = hs.Close()
			return fmt.Errorf("write ready file: %w", err)
		}
	}
	logListening(log, cfg, base)

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

// serveMetrics serves the server's metrics on cfg.metricsListen and
// returns srv instrumented; an empty address serves none and returns srv
// as it is.
func serveMetrics(ctx context.Context, cfg config, srv *envserver.Server, log *zap.Logger) (http.Handler, error) {
	addr := cfg.metricsListen
	if addr == "" {
		return srv, nil
	}
	reg := metrics.NewRegistry()
	stat := func(v func(protocol.Stats) float64) func() float64 { return func() float64 { return v(srv.Stats()) } }
	metrics.RegisterFuncs(reg, "env",
		metrics.Func{Name: "applied_total", Help: "Mutations (start, operate, verify) applied.", Counter: true, Value: stat(func(s protocol.Stats) float64 { return float64(s.Applied) })},
		metrics.Func{Name: "replayed_total", Help: "Mutations answered with their stored response instead of applied again.", Counter: true, Value: stat(func(s protocol.Stats) float64 { return float64(s.Replayed) })},
		metrics.Func{Name: "refused_total", Help: "Requests refused with a 4xx (stale attempt, revision mismatch, bad input …).", Counter: true, Value: stat(func(s protocol.Stats) float64 { return float64(s.Refused) })},
		metrics.Func{Name: "parked_total", Help: "Requests answered \"parked\" while admission was closed for a checkpoint.", Counter: true, Value: stat(func(s protocol.Stats) float64 { return float64(s.Parked) })},
		metrics.Func{Name: "sessions", Help: "Live sessions.", Value: stat(func(s protocol.Stats) float64 { return float64(s.Sessions) })},
	)
	bound, err := metrics.Serve(ctx, addr, reg, cfg.http, func(err error) { log.Error("metrics", zap.Error(err)) })
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen: %w", err)
	}
	log.Info("serving metrics", zap.String("url", "http://"+bound+metrics.Path))
	return metrics.InstrumentHandler(reg, "env", srv), nil
}
