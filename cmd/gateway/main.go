// Command gateway serves turnstile's HTTP API for training pipelines (see
// package gateway and its openapi.json): submit, summary, results, export,
// the results feed, acknowledgements, staleness, checkpoint, restore and
// resume, over the Go client library. It keeps no state of its own, so any
// number may run against one Temporal and a restarted one loses nothing.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/turnstile-rl/turnstile/cmd/internal/cli"
	"github.com/turnstile-rl/turnstile/gateway"
	"github.com/turnstile-rl/turnstile/internal/atomicfile"
	"github.com/turnstile-rl/turnstile/internal/bearer"
	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/internal/httpserver"
	"github.com/turnstile-rl/turnstile/internal/location"
	"github.com/turnstile-rl/turnstile/internal/logging"
	"github.com/turnstile-rl/turnstile/internal/retention"
	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workers"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// Environment variables the gateway reads besides the workers' and
// Temporal's own.
const (
	EnvAddr            = "TURNSTILE_GATEWAY_ADDR"
	EnvToken           = "TURNSTILE_GATEWAY_TOKEN"
	EnvOperatorToken   = "TURNSTILE_GATEWAY_OPERATOR_TOKEN"
	EnvStallWindow     = "TURNSTILE_GATEWAY_STALL_WINDOW"
	EnvCheckpointRoot  = "TURNSTILE_CHECKPOINT_ROOT"
	EnvDatasetRoot     = "TURNSTILE_DATASET_ROOT"
	EnvDatasetMaxBytes = "TURNSTILE_DATASET_MAX_BYTES"
	DefaultAddr        = "127.0.0.1:8088"
)

const (
	dialTimeout     = 10 * time.Second
	shutdownTimeout = 10 * time.Second
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if code := cli.Report(os.Stderr, "gateway", run(ctx, os.Args[1:], os.Stderr)); code != cli.ExitOK {
		os.Exit(code)
	}
}

// config is the gateway's command line and environment.
type config struct {
	addr, token, taskQueue, transcripts, checkpointRoot string
	operatorToken, datasetRoot                          string
	datasetMaxBytes                                     int64
	readyFile, logLevel, logFormat                      string
	insecureNoAuth                                      bool
	stallWindow, feedSettle                             time.Duration
	conn                                                workers.Connection
	http                                                httpserver.Timeouts
	// controlToken and dataToken are the environment servers' tokens this
	// process holds (for resumes), which the gateway's own must differ from.
	controlToken, dataToken string
}

func env(key, def string) string {
	if v := strings.TrimSpace(os.Getenv(key)); v != "" {
		return v
	}
	return def
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	stall, err := time.ParseDuration(env(EnvStallWindow, gateway.DefaultStallWindow.String()))
	if err != nil {
		return c, fmt.Errorf("%s: %w", EnvStallWindow, err)
	}
	maxBytes, err := strconv.ParseInt(env(EnvDatasetMaxBytes, strconv.Itoa(gateway.DefaultDatasetMaxBytes)), 10, 64)
	if err != nil {
		return c, fmt.Errorf("%s: %w", EnvDatasetMaxBytes, err)
	}
	if c.http, err = httpserver.FromLookup(os.LookupEnv); err != nil {
		return c, err
	}
	c.http.AddFlags(fs)
	c.controlToken, c.dataToken = os.Getenv(protocol.ControlTokenEnvVar), os.Getenv(protocol.DataTokenEnvVar)
	fs.StringVar(&c.addr, "addr", env(EnvAddr, DefaultAddr), "address to listen on (port 0 picks a free one); default from $"+EnvAddr)
	fs.StringVar(&c.token, "token", os.Getenv(EnvToken), "the trainer role's bearer token (submit, results, feed, acknowledgements, policy version); default from $"+EnvToken)
	fs.StringVar(&c.operatorToken, "operator-token", os.Getenv(EnvOperatorToken), "the operator role's bearer token (checkpoints, restores, resumes, and every trainer route); empty: no one may checkpoint, restore or resume; default from $"+EnvOperatorToken)
	fs.BoolVar(&c.insecureNoAuth, "insecure-no-auth", false, "serve without a token (local use only)")
	fs.StringVar(&c.taskQueue, "task-queue", env(workers.EnvTaskQueue, rollout.TaskQueue), "task queue rollouts start on; default from $"+workers.EnvTaskQueue)
	fs.StringVar(&c.transcripts, "transcripts", env(workers.EnvTranscriptDir, workers.DefaultTranscriptDir), "the workers' transcript directory (feed, export); default from $"+workers.EnvTranscriptDir)
	fs.StringVar(&c.checkpointRoot, "checkpoint-root", os.Getenv(EnvCheckpointRoot), "directory checkpoints go under, as the workers see it (empty refuses checkpoints and restores); default from $"+EnvCheckpointRoot)
	fs.StringVar(&c.datasetRoot, "dataset-root", os.Getenv(EnvDatasetRoot), "directory dataset_path resolves in (regular files only; empty refuses dataset_path); default from $"+EnvDatasetRoot)
	fs.Int64Var(&c.datasetMaxBytes, "dataset-max-bytes", maxBytes, "largest dataset file the gateway reads; default from $"+EnvDatasetMaxBytes)
	fs.DurationVar(&c.stallWindow, "stall-window", stall, "watchdog: a set with rollouts working and no progress for this long makes its feed answer 409 set_stalled; default from $"+EnvStallWindow)
	fs.DurationVar(&c.feedSettle, "feed-settle", gateway.DefaultFeedSettle, "a finished rollout enters the feed this long after it finished (visibility lag)")
	fs.StringVar(&c.readyFile, "ready-file", "", "once listening, atomically write the base URL to this file")
	fs.StringVar(&c.logLevel, "log-level", logging.DefaultLevel, "log level: debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log-format", logging.DefaultFormat, "log format: json or console")
	fs.StringVar(&c.conn.Address, "address", "", "Temporal frontend host:port (env TEMPORAL_ADDRESS; default localhost:7233)")
	fs.StringVar(&c.conn.Namespace, "namespace", "", "Temporal namespace (env TEMPORAL_NAMESPACE; default default)")
	fs.StringVar(&c.conn.ConfigFile, "config-file", "", "temporal.toml to read (env TEMPORAL_CONFIG_FILE)")
	fs.StringVar(&c.conn.Profile, "profile", "", "profile of temporal.toml (env TEMPORAL_PROFILE)")
	cli.SetUsage(fs, "Serves turnstile's HTTP API for training pipelines (GET /v1/openapi.json describes it).", append(settings(), cli.HTTPSettings()...))
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return c, c.validate()
}

// settings are the environment variables the gateway reads, for --help.
func settings() []cli.Setting {
	return []cli.Setting{
		{Env: EnvAddr, Default: DefaultAddr, Meaning: "address to listen on"},
		{Env: EnvToken, Meaning: "the trainer role's bearer token (required unless --insecure-no-auth)"},
		{Env: EnvOperatorToken, Meaning: "the operator role's bearer token (checkpoints, restores, resumes)"},
		{Env: EnvDatasetRoot, Meaning: "directory dataset_path resolves in (empty refuses dataset_path)"},
		{Env: EnvDatasetMaxBytes, Default: strconv.Itoa(gateway.DefaultDatasetMaxBytes), Meaning: "largest dataset file read"},
		{Env: EnvStallWindow, Default: gateway.DefaultStallWindow.String(), Meaning: "watchdog window of the feed"},
		{Env: EnvCheckpointRoot, Meaning: "directory checkpoints go under"},
		{Env: workers.EnvTaskQueue, Default: rollout.TaskQueue, Meaning: "task queue"},
		{Env: workers.EnvTranscriptDir, Default: workers.DefaultTranscriptDir, Meaning: "the workers' transcript directory"},
		{Env: protocol.ControlTokenEnvVar, Meaning: "environment servers' control token (resumes)"},
		{Env: workers.EnvEnvURL + ", " + workers.EnvEnvServers + ", " + workers.EnvAllowedEnvURLs, Meaning: "the workers' environment servers: a submission naming another is refused (as the workers read them)"},
		{Env: workers.EnvModelBaseURL + ", " + workers.EnvModelEndpoints + ", " + workers.EnvAllowedModelURLs, Meaning: "the workers' model endpoints, likewise"},
		{Env: workers.EnvAllowedParticipants, Meaning: "participants beyond the named servers a checkpoint, restore or resume may name"},
		{Env: "TEMPORAL_ADDRESS", Default: "localhost:7233", Meaning: "Temporal frontend (also TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS_*, temporal.toml, as the Temporal CLI reads them)"},
	}
}

func (c *config) validate() error {
	switch {
	case c.token == "" && !c.insecureNoAuth:
		return fmt.Errorf("--token (or $%s) is required; --insecure-no-auth serves without one, for local use only", EnvToken)
	case c.token != "" && c.insecureNoAuth:
		return errors.New("give --token or --insecure-no-auth, not both")
	case c.token != strings.TrimSpace(c.token):
		return errors.New("--token: leading or trailing whitespace")
	case c.operatorToken != strings.TrimSpace(c.operatorToken):
		return errors.New("--operator-token: leading or trailing whitespace")
	case c.operatorToken != "" && c.operatorToken == c.token:
		return errors.New("--operator-token equals --token: give each role its own token")
	case c.operatorToken != "" && c.insecureNoAuth:
		return errors.New("give --operator-token or --insecure-no-auth, not both")
	case c.datasetMaxBytes <= 0:
		return fmt.Errorf("--dataset-max-bytes %d: want a positive size", c.datasetMaxBytes)
	case c.stallWindow <= 0:
		return fmt.Errorf("--stall-window %s: want a positive duration", c.stallWindow)
	case c.feedSettle < 0:
		return fmt.Errorf("--feed-settle %s: want a non-negative duration", c.feedSettle)
	case c.taskQueue == "":
		return errors.New("--task-queue: empty")
	}
	if err := c.checkTokens(); err != nil {
		return err
	}
	if err := c.http.Validate(); err != nil {
		return err
	}
	if c.checkpointRoot != "" {
		abs, err := filepath.Abs(c.checkpointRoot)
		if err != nil {
			return fmt.Errorf("--checkpoint-root: %w", err)
		}
		c.checkpointRoot = abs
	}
	if c.datasetRoot != "" {
		abs, err := filepath.Abs(c.datasetRoot)
		if err != nil {
			return fmt.Errorf("--dataset-root: %w", err)
		}
		c.datasetRoot = abs
	}
	return nil
}

// checkTokens refuses a short gateway token (either role's), and one equal
// to the environment servers' tokens this process holds: a trainer holding
// the gateway's token would hold theirs.
func (c *config) checkTokens() error {
	for _, t := range []struct{ setting, token string }{
		{"--token (or $" + EnvToken + ")", c.token},
		{"--operator-token (or $" + EnvOperatorToken + ")", c.operatorToken},
	} {
		if err := bearer.Check(t.setting, t.token); err != nil {
			return err
		}
		if err := bearer.Distinct(t.token, t.setting, c.controlToken, "$"+protocol.ControlTokenEnvVar); err != nil {
			return err
		}
		if err := bearer.Distinct(t.token, t.setting, c.dataToken, "$"+protocol.DataTokenEnvVar); err != nil {
			return err
		}
	}
	return nil
}

// run serves until ctx is cancelled, then shuts down gracefully.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	c, err := parseFlags(args, stderr)
	if err != nil {
		return cli.Usage(err)
	}
	log, err := logging.New(stderr, c.logLevel, c.logFormat)
	if err != nil {
		return cli.Usage(err)
	}
	defer func() { _ = log.Sync() }()
	opts, err := workers.ClientOptionsWith(log, c.conn)
	if err != nil {
		return err
	}
	tc, err := workers.Dial(ctx, opts, dialTimeout)
	if err != nil {
		return err
	}
	defer tc.Close()
	store, err := transcriptstore.Open(c.transcripts)
	if err != nil {
		return fmt.Errorf("--transcripts: %w", err)
	}
	dest, err := workers.GatewayDestinations(os.LookupEnv)
	if err != nil {
		return cli.Usage(err)
	}
	fps, err := failpoint.FromEnv()
	if err != nil {
		return cli.Usage(fmt.Errorf("%s: %w", failpoint.EnvVar, err))
	}
	backend := trainer.New(tc, c.taskQueue)
	backend.Failpoints = fps
	srv, err := gateway.New(gateway.Config{
		Token: c.token, OperatorToken: c.operatorToken, InsecureNoAuth: c.insecureNoAuth, CheckpointRoot: c.checkpointRoot, Transcripts: store,
		ControlToken: c.controlToken, Destinations: dest, DatasetRoot: c.datasetRoot, DatasetMaxBytes: c.datasetMaxBytes,
		StallWindow: c.stallWindow, FeedSettle: c.feedSettle, Logger: log,
		WriteTimeout: c.http.Write, Pin: pinner(c.checkpointRoot),
	}, backend)
	if err != nil {
		return err
	}
	return serve(ctx, c, srv.Handler(), log, workers.HostPort(opts))
}

// pinner pins checkpoints under root (a directory, relative ones against
// the working directory, or a storage URL), opened at each pin; nil
// without a root.
func pinner(root string) func(ctx context.Context, set, tag string) ([]string, error) {
	if root == "" {
		return nil
	}
	return func(ctx context.Context, set, tag string) ([]string, error) {
		where := root
		if !location.IsURL(where) {
			abs, err := filepath.Abs(where)
			if err != nil {
				return nil, fmt.Errorf("--checkpoint-root %s: %w", root, err)
			}
			where = abs
		}
		var opener storage.Opener
		defer opener.Close()
		st, err := opener.Open(ctx, where)
		if err != nil {
			return nil, fmt.Errorf("--checkpoint-root %s: %w", root, err)
		}
		return retention.Pin(ctx, st, set, tag)
	}
}

// serve listens, writes the ready file and serves until ctx is done.
func serve(ctx context.Context, c config, h http.Handler, log *zap.Logger, temporal string) error {
	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", c.addr, err)
	}
	base := "http://" + ln.Addr().String()
	hs := c.http.Server(h)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	if c.readyFile != "" {
		if err := atomicfile.WriteFile(c.readyFile, []byte(base), 0o644); err != nil {
			_ = hs.Close()
			return fmt.Errorf("write ready file: %w", err)
		}
	}
	log.Info("gateway listening", zap.String("url", base), zap.String("temporal", temporal), zap.String("task_queue", c.taskQueue),
		zap.Bool("auth", !c.insecureNoAuth), zap.Bool("operator_role", c.operatorToken != ""), zap.String("dataset_root", c.datasetRoot),
		zap.Duration("stall_window", c.stallWindow), zap.Int("pid", os.Getpid()))
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("gateway shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}
