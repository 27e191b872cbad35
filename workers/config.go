// Package workers builds a turnstile worker: configuration from the
// environment, the Temporal client options, logging (zap behind the SDK's
// logger interface) and the registrations of workflows and activities.
package workers

import (
	"github.com/turnstile-rl/turnstile/internal/artifact"
	"github.com/turnstile-rl/turnstile/internal/bearer"
	"github.com/turnstile-rl/turnstile/internal/destination"
	"github.com/turnstile-rl/turnstile/internal/httpserver"
	"github.com/turnstile-rl/turnstile/internal/location"
	"github.com/turnstile-rl/turnstile/internal/logging"
	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/participants/protocol"

	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"
	"go.uber.org/zap"

	"github.com/turnstile-rl/turnstile/internal/tlsfiles"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// Environment variables a worker reads. Temporal's own connection settings
// (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, temporal.toml …) are read by
// envconfig in ClientOptions.
const (
	EnvTranscriptDir = "TURNSTILE_TRANSCRIPT_DIR"
	EnvEnvURL        = destination.EnvEnvURL
	EnvModelBaseURL  = destination.EnvModelBaseURL
	EnvModelAPIKey   = "TURNSTILE_MODEL_API_KEY"
	EnvOpenAIAPIKey  = "OPENAI_API_KEY" // fallback for EnvModelAPIKey
	EnvTaskQueue     = "TURNSTILE_TASK_QUEUE"
	EnvLogLevel      = "TURNSTILE_LOG_LEVEL"
	EnvLogFormat     = "TURNSTILE_LOG_FORMAT"
	// EnvControlToken is the bearer token of the environment servers'
	// checkpoint control plane, used by the Checkpoint and Restore
	// coordinator activities.
	EnvControlToken = protocol.ControlTokenEnvVar
	// EnvDataToken is the bearer token of the environment servers' data
	// plane, sent by the environment activities.
	EnvDataToken = protocol.DataTokenEnvVar
	// EnvTLSCA, EnvTLSClientCert and EnvTLSClientKey are what the worker's
	// HTTP client (environment servers, model endpoint, control plane)
	// trusts and presents: a private CA and a client certificate for
	// mutual TLS.
	EnvTLSCA         = tlsfiles.EnvCA
	EnvTLSClientCert = tlsfiles.EnvClientCert
	EnvTLSClientKey  = tlsfiles.EnvClientKey
	// EnvCPUProfile, when set, names a file the worker writes a CPU
	// profile of its whole run to (for `make bench`; read by cmd/worker).
	EnvCPUProfile = "TURNSTILE_CPU_PROFILE"
	// Where each secret may go besides EnvEnvURL and EnvModelBaseURL (see
	// package destination): named servers and endpoints, and allowlists
	// by URL prefix.
	EnvEnvServers            = destination.EnvEnvServers
	EnvModelEndpoints        = destination.EnvModelEndpoints
	EnvAllowedEnvURLs        = destination.EnvAllowedEnvURLs
	EnvAllowedModelURLs      = destination.EnvAllowedModelURLs
	EnvAllowedParticipants   = destination.EnvAllowedParticipants
	EnvAllowedStoreEndpoints = destination.EnvAllowedStoreEndpoints
)

// Defaults, chosen so a worker started beside `make devserver` and the local
// environment and policy servers needs no settings at all.
const (
	DefaultTranscriptDir = ".turnstile/transcripts"
	DefaultEnvURL        = "http://127.0.0.1:8091"
	DefaultModelBaseURL  = "http://127.0.0.1:8092/v1"
	DefaultTaskQueue     = rollout.TaskQueue
	DefaultLogLevel      = logging.DefaultLevel
	DefaultLogFormat     = logging.DefaultFormat
)

// Config is what a worker needs besides the Temporal connection.
type Config struct {
	// TranscriptDir is where the transcript store lives: a directory (a
	// relative one is taken against the working directory) or an object
	// store URL (s3://bucket/prefix?region=…; see package storage). Every
	// worker of a deployment must name the same store.
	TranscriptDir string
	EnvURL        string
	ModelBaseURL  string
	// ModelAPIKey is held by the worker only; it never travels in workflow
	// input. Local OpenAI-compatible servers accept any key.
	ModelAPIKey string
	TaskQueue   string
	LogLevel    string
	LogFormat   string
	// ControlToken authorises checkpoint control calls to environment
	// servers, and start-overs (rollout.Activities.AuthoriseAttempt); like
	// the API key, it never travels in workflow input.
	ControlToken string
	// DataToken is sent to the environment servers' data plane.
	DataToken string
	// TLS names the CA the worker trusts and its client certificate; empty
	// means the system roots and no client certificate.
	TLS tlsfiles.ClientFiles
	// MetricsListen is the address /metrics is served on; empty serves none.
	MetricsListen string
	// HTTP are the timeouts of the metrics listener (httpserver.Env…).
	HTTP httpserver.Timeouts
	// ModelLimits bound what a model endpoint may answer (model.Env…).
	ModelLimits ModelLimits
	// FileMode is the mode of the files the worker writes into local
	// transcript and checkpoint directories (storage.EnvFileMode; default
	// storage.DefaultFileMode, private to the worker's user).
	FileMode fs.FileMode
	// Tuning is the data worker's pollers, slots and sticky cache.
	Tuning Tuning
	// Liveness bounds what a hung or cut-off environment server costs a
	// checkpoint (zero: the coordinator's defaults).
	Liveness Liveness
	// Prefix is how often a streamed generation's prefix is made durable.
	Prefix PrefixSettings
	// Destinations is where each secret may go (package destination): the
	// named servers and endpoints, their own tokens and the allowlists,
	// read by ConfigFromLookup. Nil admits EnvURL, ModelBaseURL and the
	// transcript store's endpoint only.
	Destinations *destination.Config
	// Checkpoints bounds what a restore reads of a checkpoint before it
	// trusts it, and carries the key checkpoints are signed and checked
	// with (artifact.EnvMaxIndexBytes, artifact.EnvKeyFile, …).
	Checkpoints artifact.Settings
}

// destinationDefaults is what the destinations build on: the default
// server and endpoint, the global secrets and the transcript store.
func (c Config) destinationDefaults() destination.Defaults {
	return destination.Defaults{
		EnvURL: c.EnvURL, ModelURL: c.ModelBaseURL,
		DataToken: c.DataToken, ControlToken: c.ControlToken, APIKey: c.ModelAPIKey,
		StoreLocations: []string{c.TranscriptDir},
	}
}

// destinations is Destinations, or the defaults alone.
func (c Config) destinations() (*destination.Config, error) {
	if c.Destinations != nil {
		return c.Destinations, nil
	}
	d, err := destination.FromLookup(func(string) (string, bool) { return "", false }, c.destinationDefaults())
	return &d, err
}

// ConfigFromEnv reads the configuration from the process environment.
func ConfigFromEnv() (Config, error) {
	return ConfigFromLookup(os.LookupEnv)
}

// ConfigFromLookup reads the configuration through lookup (os.LookupEnv in
// production, a map in tests). Unset or blank variables take their defaults.
func ConfigFromLookup(lookup func(string) (string, bool)) (Config, error) {
	get := func(key, def string) string {
		if v, ok := lookup(key); ok && strings.TrimSpace(v) != "" {
			return strings.TrimSpace(v)
		}
		return def
	}
	cfg := Config{
		TranscriptDir: get(EnvTranscriptDir, DefaultTranscriptDir),
		EnvURL:        get(EnvEnvURL, DefaultEnvURL),
		ModelBaseURL:  get(EnvModelBaseURL, DefaultModelBaseURL),
		ModelAPIKey:   get(EnvModelAPIKey, get(EnvOpenAIAPIKey, "")),
		TaskQueue:     get(EnvTaskQueue, DefaultTaskQueue),
		LogLevel:      strings.ToLower(get(EnvLogLevel, DefaultLogLevel)),
		LogFormat:     get(EnvLogFormat, DefaultLogFormat),
		ControlToken:  get(EnvControlToken, ""),
		DataToken:     get(EnvDataToken, ""),
		TLS:           tlsfiles.ClientFiles{CA: get(EnvTLSCA, ""), Cert: get(EnvTLSClientCert, ""), Key: get(EnvTLSClientKey, "")},
		MetricsListen: get(EnvMetricsListen, ""),
	}
	var err error
	if cfg.Tuning, err = tuningFromLookup(lookup); err != nil {
		return Config{}, err
	}
	if cfg.Liveness, err = livenessFromLookup(lookup); err != nil {
		return Config{}, err
	}
	if cfg.Checkpoints, err = artifact.SettingsFromLookup(lookup); err != nil {
		return Config{}, err
	}
	if cfg.HTTP, err = httpserver.FromLookup(lookup); err != nil {
		return Config{}, err
	}
	if cfg.FileMode, err = storage.FileModeFromLookup(lookup); err != nil {
		return Config{}, err
	}
	if cfg.ModelLimits, err = modelLimitsFromLookup(lookup); err != nil {
		return Config{}, err
	}
	if cfg.Prefix, err = prefixFromLookup(lookup); err != nil {
		return Config{}, err
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	dest, err := destination.FromLookup(lookup, cfg.destinationDefaults())
	if err != nil {
		return Config{}, err
	}
	if err := checkNamedTokens(dest); err != nil {
		return Config{}, err
	}
	cfg.Destinations = &dest
	return cfg, nil
}

// checkNamedTokens holds the tokens of named environment servers
// (destination.DataTokenPrefix…) to the length rule of the global ones
// (that a server's two differ, destination checks).
func checkNamedTokens(d destination.Config) error {
	for _, s := range d.EnvServers {
		dataSetting, controlSetting := destination.SecretVar(destination.DataTokenPrefix, s.Name), destination.SecretVar(destination.ControlTokenPrefix, s.Name)
		if err := bearer.Check(dataSetting, s.DataToken); err != nil {
			return err
		}
		if err := bearer.Check(controlSetting, s.ControlToken); err != nil {
			return err
		}
	}
	return nil
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	if c.TranscriptDir == "" {
		return fmt.Errorf("%s: empty transcript directory", EnvTranscriptDir)
	}
	if location.IsURL(c.TranscriptDir) {
		if _, err := location.Parse(c.TranscriptDir); err != nil {
			return fmt.Errorf("%s: %w", EnvTranscriptDir, err)
		}
	}
	for _, u := range []struct{ name, value string }{
		{EnvEnvURL, c.EnvURL},
		{EnvModelBaseURL, c.ModelBaseURL},
	} {
		if !strings.HasPrefix(u.value, "http://") && !strings.HasPrefix(u.value, "https://") {
			return fmt.Errorf("%s=%q: want an http:// or https:// URL", u.name, u.value)
		}
	}
	if c.DataToken != "" && c.DataToken == c.ControlToken {
		return fmt.Errorf("%s and %s are equal: the environment servers refuse that", EnvDataToken, EnvControlToken)
	}
	for _, tok := range []struct{ env, value string }{{EnvDataToken, c.DataToken}, {EnvControlToken, c.ControlToken}} {
		if err := bearer.Check(tok.env, tok.value); err != nil {
			return err
		}
	}
	if (c.TLS.Cert == "") != (c.TLS.Key == "") {
		return fmt.Errorf("%s and %s: a client certificate needs both", EnvTLSClientCert, EnvTLSClientKey)
	}
	if c.TaskQueue == "" {
		return fmt.Errorf("%s: empty task queue", EnvTaskQueue)
	}
	if c.MetricsListen != "" {
		if _, _, err := net.SplitHostPort(c.MetricsListen); err != nil {
			return fmt.Errorf("%s=%q: want host:port (port 0 picks one): %v", EnvMetricsListen, c.MetricsListen, err)
		}
	}
	if _, err := zap.ParseAtomicLevel(c.LogLevel); err != nil {
		return fmt.Errorf("%s=%q: want debug, info, warn or error", EnvLogLevel, c.LogLevel)
	}
	if c.LogFormat != logging.FormatJSON && c.LogFormat != logging.FormatConsole {
		return fmt.Errorf("%s=%q: want %s or %s", EnvLogFormat, c.LogFormat, logging.FormatJSON, logging.FormatConsole)
	}
	return nil
}

// ClientOptions loads the Temporal client options the way the Temporal CLI
// does (temporal.toml profile, then TEMPORAL_* environment variables) and
// routes the SDK's logs through logger.
func ClientOptions(logger *zap.Logger) (client.Options, error) {
	return ClientOptionsWith(logger, Connection{})
}

// Connection holds the Temporal connection settings given on a command line,
// named like the Temporal CLI's flags. Each one set overrides what
// temporal.toml (ConfigFile, Profile) and the TEMPORAL_* environment
// variables say, with the Temporal CLI's precedence: flag, then
// environment, then file.
type Connection struct {
	ConfigFile, Profile string
	Address, Namespace  string
	APIKey              string
	// TLS turns TLS on with the system roots (it is also on when any TLS
	// path or an API key is given).
	TLS                                bool
	TLSCertPath, TLSKeyPath, TLSCAPath string
	TLSServerName                      string
	TLSDisableHostVerification         bool
}

// ClientOptionsWith is ClientOptions with conn's settings on top of the
// file and the environment.
func ClientOptionsWith(logger *zap.Logger, conn Connection) (client.Options, error) {
	profile, err := envconfig.LoadClientConfigProfile(envconfig.LoadClientConfigProfileOptions{
		ConfigFilePath: conn.ConfigFile, ConfigFileProfile: conn.Profile,
	})
	if err != nil {
		return client.Options{}, fmt.Errorf("load Temporal client config (temporal.toml / TEMPORAL_* env): %w", err)
	}
	conn.apply(&profile)
	opts, err := profile.ToClientOptions(envconfig.ToClientOptionsRequest{})
	if err != nil {
		return client.Options{}, fmt.Errorf("temporal client config: %w", err)
	}
	opts.Logger = NewLogger(logger)
	return opts, nil
}

// apply sets on p every setting conn gives.
func (conn Connection) apply(p *envconfig.ClientConfigProfile) {
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&p.Address, conn.Address)
	set(&p.Namespace, conn.Namespace)
	set(&p.APIKey, conn.APIKey)
	if !conn.TLS && conn.TLSCertPath == "" && conn.TLSKeyPath == "" && conn.TLSCAPath == "" && conn.TLSServerName == "" && !conn.TLSDisableHostVerification {
		return
	}
	if p.TLS == nil {
		p.TLS = &envconfig.ClientConfigTLS{}
	}
	p.TLS.Disabled = false
	set(&p.TLS.ClientCertPath, conn.TLSCertPath)
	set(&p.TLS.ClientKeyPath, conn.TLSKeyPath)
	set(&p.TLS.ServerCACertPath, conn.TLSCAPath)
	set(&p.TLS.ServerName, conn.TLSServerName)
	p.TLS.DisableHostVerification = p.TLS.DisableHostVerification || conn.TLSDisableHostVerification
}

// HostPort is the address opts dial: the configured one or the SDK default.
func HostPort(opts client.Options) string {
	if opts.HostPort == "" {
		return client.DefaultHostPort
	}
	return opts.HostPort
}

// Namespace is the namespace opts use: the configured one or the SDK default.
func Namespace(opts client.Options) string {
	if opts.Namespace == "" {
		return client.DefaultNamespace
	}
	return opts.Namespace
}

// DevServerHint tells an operator how to get a Temporal server.
const DevServerHint = "start a dev server with `make devserver`, or point TEMPORAL_ADDRESS at a running one"

// Dial connects to Temporal within timeout and checks that the frontend
// answers, so an unreachable server is a clear error at start-up rather than
// a worker that silently retries its polls.
func Dial(ctx context.Context, opts client.Options, timeout time.Duration) (client.Client, error) {
	addr := HostPort(opts)
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := client.DialContext(dctx, opts)
	if err != nil {
		return nil, unreachable(addr, Namespace(opts), err)
	}
	if _, err := c.CheckHealth(dctx, &client.CheckHealthRequest{}); err != nil {
		c.Close()
		return nil, unreachable(addr, Namespace(opts), err)
	}
	return c, nil
}

func unreachable(addr, namespace string, err error) error {
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("connect to Temporal at %s (namespace %s): %w", addr, namespace, err)
	}
	return fmt.Errorf("cannot reach Temporal at %s (namespace %s): %w; %s", addr, namespace, err, DevServerHint)
}

// GatewayDestinations reads, through lookup, the destinations a gateway
// checks requests against: the workers' own settings (their default
// environment server and model endpoint with the workers' defaults, the
// named ones and the allowlists) and the named servers' own control
// tokens, which it sends on resumes. The data tokens and API keys stay
// the workers'.
func GatewayDestinations(lookup func(string) (string, bool)) (*destination.Config, error) {
	get := func(key, def string) string {
		if v, ok := lookup(key); ok && strings.TrimSpace(v) != "" {
			return strings.TrimSpace(v)
		}
		return def
	}
	d, err := destination.FromLookup(func(key string) (string, bool) {
		if strings.HasPrefix(key, destination.DataTokenPrefix) || strings.HasPrefix(key, destination.APIKeyPrefix) {
			return "", false
		}
		return lookup(key)
	}, destination.Defaults{
		EnvURL: get(EnvEnvURL, DefaultEnvURL), ModelURL: get(EnvModelBaseURL, DefaultModelBaseURL),
	})
	if err != nil {
		return nil, err
	}
	return &d, nil
}

// EnvDestinations reads, through lookup, the environment servers the
// workers send rollouts to (their default, TURNSTILE_ENV_SERVERS) with
// the data tokens they send: what a starter uses to ask a server which
// environments it declares before submitting rollouts of one.
func EnvDestinations(lookup func(string) (string, bool)) (*destination.Config, error) {
	get := func(key, def string) string {
		if v, ok := lookup(key); ok && strings.TrimSpace(v) != "" {
			return strings.TrimSpace(v)
		}
		return def
	}
	d, err := destination.FromLookup(lookup, destination.Defaults{
		EnvURL: get(EnvEnvURL, DefaultEnvURL), DataToken: get(EnvDataToken, ""),
	})
	if err != nil {
		return nil, err
	}
	return &d, nil
}
