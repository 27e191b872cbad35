// Command policyserver serves the scripted policies behind an
// OpenAI-compatible Chat Completions endpoint (streamed or whole, with
// vLLM's token fields), vLLM's token-in routes (/v1/completions with a
// token-id prompt, /inference/v1/generate) that continue a generation from
// its token prefix, and GET /stats with the tokens each request generated;
// with optional latency, pacing and injected errors, so rollouts can be
// run, interrupted and compared without a real model.
//
//	policyserver --listen 127.0.0.1:0 --ready-file /tmp/policy.url --latency 200ms --jitter 50ms --error-rate 0.05
//	policyserver --tokens-per-second 50 --pad-tokens 2000   # 40-second answers to kill a worker in
//
// --tls-cert/--tls-key (TURNSTILE_TLS_CERT, TURNSTILE_TLS_KEY) serve HTTPS;
// --tls-client-ca (TURNSTILE_TLS_CLIENT_CA) also requires client
// certificates signed by that CA (mutual TLS).
package main

import (
	"github.com/turnstile-rl/turnstile/cmd/internal/cli"
	"github.com/turnstile-rl/turnstile/internal/atomicfile"
	"github.com/turnstile-rl/turnstile/internal/bearer"
	"github.com/turnstile-rl/turnstile/internal/httpserver"
	"github.com/turnstile-rl/turnstile/internal/logging"
	"github.com/turnstile-rl/turnstile/internal/metrics"

	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/turnstile-rl/turnstile/internal/policy"
	"github.com/turnstile-rl/turnstile/internal/tlsfiles"
	"go.uber.org/zap"
)

const (
	// ListenEnv overrides the default listen address.
	ListenEnv = "TURNSTILE_POLICY_LISTEN"
	// MetricsEnv is the default of --metrics-listen.
	MetricsEnv = "TURNSTILE_POLICY_METRICS_LISTEN"
	// APIKeyEnv is the default of --api-key: the bearer token every route
	// but /healthz asks for (set it to the workers' TURNSTILE_MODEL_API_KEY).
	APIKeyEnv     = "TURNSTILE_POLICY_API_KEY"
	defaultListen = "127.0.0.1:8092"
	// shutdownGrace bounds how long in-flight requests may finish on exit.
	shutdownGrace = 10 * time.Second
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if code := cli.Report(os.Stderr, "policyserver", run(ctx, os.Args[1:], os.Stderr, nil)); code != cli.ExitOK {
		stop()
		os.Exit(code)
	}
}

// options are the parsed command line.
type options struct {
	logLevel      string
	logFormat     string
	listen        string
	metricsListen string
	readyFile     string
	faultSeed     uint64
	tls           tlsfiles.ServerFiles
	http          httpserver.Timeouts
	server        policy.ServerConfig
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("policyserver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := defaultListen
	if v := os.Getenv(ListenEnv); v != "" {
		listen = v
	}
	var err error
	if o.http, err = httpserver.FromLookup(os.LookupEnv); err != nil {
		return options{}, err
	}
	o.http.AddFlags(fs)
	fs.StringVar(&o.server.APIKey, "api-key", os.Getenv(APIKeyEnv), "bearer token every route but /healthz asks for (the workers' TURNSTILE_MODEL_API_KEY); empty serves without one; default from $"+APIKeyEnv)
	fs.StringVar(&o.listen, "listen", listen, "address to listen on (port 0 picks a free port); default from $"+ListenEnv)
	fs.StringVar(&o.metricsListen, "metrics-listen", os.Getenv(MetricsEnv), "serve Prometheus metrics at /metrics on this address (empty: none); default from $"+MetricsEnv)
	fs.StringVar(&o.readyFile, "ready-file", "", "once listening, atomically write the base URL (http://host:port/v1) to this file")
	fs.DurationVar(&o.server.Latency, "latency", 0, "mean delay of a chat completion, e.g. 200ms")
	fs.DurationVar(&o.server.Jitter, "jitter", 0, "uniform spread of the delay around --latency, e.g. 50ms")
	fs.Float64Var(&o.server.ErrorRate, "error-rate", 0, "probability of an injected 503")
	fs.Float64Var(&o.server.RateLimitRate, "rate-limit-rate", 0, "probability of an injected 429")
	fs.DurationVar(&o.server.RetryAfter, "retry-after", time.Second, "Retry-After of injected errors")
	fs.Float64Var(&o.server.Imperfection, "imperfection", 0, "probability that a policy deliberately misses an episode")
	fs.StringVar(&o.server.PolicyVersion, "policy-version", "", "policy version reported in the X-Policy-Version header of every completion")
	fs.Float64Var(&o.server.TokensPerSecond, "tokens-per-second", 0, "generation pace: a streamed answer sends one token every 1/rate seconds, a whole one waits for all of them (0: at once)")
	fs.IntVar(&o.server.PadTokens, "pad-tokens", 0, "tokens of deterministic filler before the content of every answer that offers tools: long answers (gym answers are never padded)")
	fs.Uint64Var(&o.faultSeed, "fault-seed", 0, "seed of latency and error injection; 0 picks one at random")
	o.tls.AddFlags(fs, os.Getenv)
	fs.StringVar(&o.logLevel, "log-level", logging.DefaultLevel, "log level: debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", logging.DefaultFormat, "log format: json or console")
	cli.SetUsage(fs, "Serves the catalog's scripted policies behind an OpenAI-compatible Chat Completions endpoint.", append([]cli.Setting{
		{Env: ListenEnv, Default: defaultListen, Meaning: "address to listen on"},
		{Env: APIKeyEnv, Meaning: "bearer token of every route but /healthz (empty: none)"},
		{Env: tlsfiles.EnvCert, Meaning: "HTTPS certificate chain (PEM)"},
		{Env: tlsfiles.EnvKey, Meaning: "HTTPS private key (PEM)"},
		{Env: tlsfiles.EnvClientCA, Meaning: "CA of client certificates: mutual TLS"},
		{Env: MetricsEnv, Meaning: "address of /metrics (empty: none)"},
	}, cli.HTTPSettings()...))
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	o.server.Policies = policies()
	if err := o.server.Validate(); err != nil {
		return options{}, fmt.Errorf("invalid flags: %w", err)
	}
	if err := bearer.Check("--api-key (or $"+APIKeyEnv+")", o.server.APIKey); err != nil {
		return options{}, err
	}
	if err := o.http.Validate(); err != nil {
		return options{}, err
	}
	return o, nil
}

// run serves until ctx is done, then shuts down gracefully. ready, if not
// nil, is called with the base URL once the server is listening and the
// ready file is written.
func run(ctx context.Context, args []string, stderr io.Writer, ready func(baseURL string)) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return cli.Usage(err)
	}
	log, err := logging.New(stderr, o.logLevel, o.logFormat)
	if err != nil {
		return cli.Usage(err)
	}
	defer func() { _ = log.Sync() }()
	o.server.Logger = log
	if o.faultSeed != 0 {
		o.server.Rand = rand.New(rand.NewPCG(o.faultSeed, 0))
	}

	tlsCfg, err := o.tls.Config()
	if err != nil {
		return cli.Usage(err)
	}
	ln, scheme, err := tlsfiles.Listen(o.listen, tlsCfg)
	if err != nil {
		return err
	}
	baseURL := scheme + strings.TrimPrefix(baseURL(ln.Addr()), "http://")
	handler := policy.NewServer(o.server)
	if o.metricsListen != "" {
		reg := metrics.NewRegistry()
		bound, err := metrics.Serve(ctx, o.metricsListen, reg, o.http, func(err error) { log.Error("metrics", zap.Error(err)) })
		if err != nil {
			_ = ln.Close()
			return fmt.Errorf("--metrics-listen: %w", err)
		}
		log.Info("serving metrics", zap.String("url", "http://"+bound+metrics.Path))
		handler = metrics.InstrumentHandler(reg, "policy", handler)
	}
	srv := o.http.Server(handler)
	srv.TLSConfig = tlsCfg
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	if o.readyFile != "" {
		if err := atomicfile.WriteFile(o.readyFile, []byte(baseURL+"\n"), 0o644); err != nil {
			_ = srv.Close()
			return fmt.Errorf("write ready file: %w", err)
		}
	}
	log.Sugar().Infow("policy server listening", "base_url", baseURL, "models", o.server.Policies.Names(),
		"latency", o.server.Latency, "jitter", o.server.Jitter, "error_rate", o.server.ErrorRate,
		"rate_limit_rate", o.server.RateLimitRate, "imperfection", o.server.Imperfection,
		"tokens_per_second", o.server.TokensPerSecond, "pad_tokens", o.server.PadTokens, "policy_version", o.server.PolicyVersion,
		"tls", tlsCfg != nil, "mutual_tls", o.tls.ClientCA != "", "api_key", o.server.APIKey != "")
	if ready != nil {
		ready(baseURL)
	}

	select {
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-serveErr; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// baseURL is the OpenAI base URL of a listener; an unspecified address
// (0.0.0.0, ::) is reported as loopback, which is where local clients reach it.
func baseURL(addr net.Addr) string {
	host, port := "127.0.0.1", ""
	if tcp, ok := addr.(*net.TCPAddr); ok {
		port = fmt.Sprint(tcp.Port)
		switch {
		case tcp.IP.IsUnspecified() && tcp.IP.To4() == nil:
			host = "::1"
		case !tcp.IP.IsUnspecified():
			host = tcp.IP.String()
		}
	} else {
		_, port, _ = net.SplitHostPort(addr.String())
	}
	return "http://" + net.JoinHostPort(host, port) + policy.BasePath
}
