// Command worker runs a turnstile worker: it polls the rollout task queue and
// hosts the Rollout workflow and its activities until SIGINT or SIGTERM.
//
// Settings come from the environment: TURNSTILE_* (see package workers) and
// the Temporal CLI's own TEMPORAL_* variables or temporal.toml profile.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"

	"github.com/turnstile-rl/turnstile/cmd/internal/cli"
	"github.com/turnstile-rl/turnstile/internal/cpuprofile"
	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/internal/httpserver"
	"github.com/turnstile-rl/turnstile/internal/logging"
	"github.com/turnstile-rl/turnstile/internal/metrics"
	"github.com/turnstile-rl/turnstile/workers"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// dialTimeout bounds the connection attempt at start-up, so an unreachable
// Temporal is reported instead of retried forever.
const dialTimeout = 10 * time.Second

func main() {
	if code := cli.Report(os.Stderr, "worker", run(os.Args[1:])); code != cli.ExitOK {
		os.Exit(code)
	}
}

// parseFlags reads the command line. The worker takes its settings from the
// environment only (like the Temporal CLI's TEMPORAL_* variables), so
// --help lists them and anything else on the command line is a usage error.
func parseFlags(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cli.SetUsage(fs, "Polls the rollout task queue (Rollout and its activities) and its -control queue (Checkpoint, Restore and the coordinator activities, with slots of their own) until SIGINT or SIGTERM.", settings())
	if err := fs.Parse(args); err != nil {
		return cli.Usage(err)
	}
	if fs.NArg() > 0 {
		return cli.Usage(fmt.Errorf("unexpected arguments %q: the worker's settings come from the environment (see --help)", fs.Args()))
	}
	return nil
}

// settings are the environment variables the worker reads, for --help.
func settings() []cli.Setting {
	return []cli.Setting{
		{Env: "TEMPORAL_ADDRESS", Default: "localhost:7233", Meaning: "Temporal frontend (also TEMPORAL_NAMESPACE, TEMPORAL_PROFILE, TEMPORAL_TLS_*, temporal.toml, as the Temporal CLI reads them)"},
		{Env: workers.EnvTaskQueue, Default: rollout.TaskQueue, Meaning: "task queue"},
		{Env: workers.EnvTranscriptDir, Default: workers.DefaultTranscriptDir, Meaning: "transcript store, shared by every worker"},
		{Env: workers.EnvEnvURL, Default: workers.DefaultEnvURL, Meaning: "default environment server"},
		{Env: workers.EnvModelBaseURL, Default: workers.DefaultModelBaseURL, Meaning: "default OpenAI-compatible endpoint"},
		{Env: workers.EnvModelAPIKey, Meaning: "model API key (or " + workers.EnvOpenAIAPIKey + "); never written to history"},
		{Env: workers.EnvEnvServers, Meaning: "more environment servers by name, name=url,… (a token of one's own in TURNSTILE_DATA_TOKEN_<NAME>, TURNSTILE_CONTROL_TOKEN_<NAME>)"},
		{Env: workers.EnvModelEndpoints, Meaning: "more model endpoints by name, name=url,… (a key of one's own in TURNSTILE_MODEL_API_KEY_<NAME>)"},
		{Env: workers.EnvAllowedEnvURLs, Meaning: "URL prefixes a rollout may name as its environment server (http://host:* for any port); default none"},
		{Env: workers.EnvAllowedModelURLs, Meaning: "URL prefixes a rollout may name as its model endpoint; default none"},
		{Env: workers.EnvAllowedParticipants, Meaning: "URL prefixes a checkpoint, restore or recovery may name as participants (they get the control token); default none"},
		{Env: workers.EnvAllowedStoreEndpoints, Meaning: "object-store endpoints a checkpoint root may name (aws: AWS's own); default the transcript store's"},
		{Env: workers.EnvControlToken, Meaning: "bearer token of the environment servers' control plane (checkpoint, restore, start-overs)"},
		{Env: workers.EnvDataToken, Meaning: "bearer token of the environment servers' data plane"},
		{Env: workers.EnvTLSCA, Meaning: "CA certificate (PEM) trusted for environment servers and the model endpoint over HTTPS"},
		{Env: workers.EnvTLSClientCert, Meaning: "client certificate (PEM) for servers that require mutual TLS (with " + workers.EnvTLSClientKey + ")"},
		{Env: workers.EnvLogLevel, Default: workers.DefaultLogLevel, Meaning: "log level: debug, info, warn, error"},
		{Env: workers.EnvLogFormat, Default: workers.DefaultLogFormat, Meaning: "log format: json or console"},
		{Env: failpoint.EnvVar, Meaning: "crash tests only: named failpoints to arm"},
		{Env: workers.EnvMetricsListen, Meaning: "serve Prometheus metrics at /metrics on this address, e.g. 127.0.0.1:9093 (empty: none)"},
		{Env: workers.EnvCPUProfile, Meaning: "write a CPU profile of the whole run to this file (make bench -cpuprofile)"},
	}
}

func run(args []string) error {
	if err := parseFlags(args, os.Stderr); err != nil {
		return err
	}
	cfg, err := workers.ConfigFromEnv()
	if err != nil {
		return err
	}
	logger, err := logging.New(os.Stderr, cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		return err
	}
	defer func() { _ = logger.Sync() }()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	stopProfile, err := cpuprofile.Start(os.Getenv(workers.EnvCPUProfile))
	if err != nil {
		return fmt.Errorf("%s: %w", workers.EnvCPUProfile, err)
	}
	defer stopProfile()

	opts, err := workers.ClientOptions(logger)
	if err != nil {
		return err
	}
	reg, closeMetrics, err := serveMetrics(ctx, cfg.MetricsListen, cfg.HTTP, &opts, logger)
	if err != nil {
		return err
	}
	defer closeMetrics()
	c, err := workers.Dial(ctx, opts, dialTimeout)
	if err != nil {
		return err
	}
	defer c.Close()

	w, err := workers.New(c, cfg, logger, reg)
	if err != nil {
		return err
	}
	logger.Info("worker starting",
		zap.String("temporal", workers.HostPort(opts)),
		zap.String("namespace", workers.Namespace(opts)),
		zap.String("task_queue", cfg.TaskQueue),
		zap.Int("pid", os.Getpid()),
	)
	// Run stops the worker gracefully (in-flight tasks finish or are
	// abandoned after the stop timeout) once the interrupt channel fires.
	if err := w.Run(interruptOn(ctx)); err != nil {
		return fmt.Errorf("worker on task queue %s: %w", cfg.TaskQueue, err)
	}
	logger.Info("worker stopped")
	return nil
}

// serveMetrics serves /metrics on addr, with the SDK's metrics routed into
// the registry through opts; an empty addr serves nothing (nil registry).
func serveMetrics(ctx context.Context, addr string, timeouts httpserver.Timeouts, opts *client.Options, logger *zap.Logger) (prometheus.Registerer, func(), error) {
	if addr == "" {
		return nil, func() {}, nil
	}
	reg := metrics.NewRegistry()
	handler, closeSDK, err := metrics.SDKHandler(reg)
	if err != nil {
		return nil, nil, err
	}
	opts.MetricsHandler = handler
	bound, err := metrics.Serve(ctx, addr, reg, timeouts, func(err error) { logger.Error("metrics", zap.Error(err)) })
	if err != nil {
		_ = closeSDK()
		return nil, nil, fmt.Errorf("%s: %w", workers.EnvMetricsListen, err)
	}
	logger.Info("serving metrics", zap.String("url", "http://"+bound+metrics.Path))
	return reg, func() { _ = closeSDK() }, nil
}

// interruptOn adapts ctx to the channel worker.Run waits on.
func interruptOn(ctx context.Context) <-chan any {
	ch := make(chan any)
	go func() {
		<-ctx.Done()
		close(ch)
	}()
	return ch
}
