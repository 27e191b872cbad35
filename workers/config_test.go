package workers_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/activities/model"
	"github.com/turnstile-rl/turnstile/internal/artifact"
	"github.com/turnstile-rl/turnstile/internal/httpserver"
	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/internal/tlsfiles"
	"github.com/turnstile-rl/turnstile/workers"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

func lookup(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}
}

// defaultCheckpoints are the checkpoint read settings of a worker whose
// environment sets none.
var defaultCheckpoints = artifact.Settings{MaxManifestBytes: artifact.DefaultMaxManifestBytes,
	MaxIndexBytes: artifact.DefaultMaxIndexBytes, MaxRecordBytes: artifact.DefaultMaxRecordBytes}

func TestConfigFromLookup(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want workers.Config
	}{
		{
			name: "defaults",
			env:  nil,
			want: workers.Config{
				TranscriptDir: ".turnstile/transcripts",
				EnvURL:        "http://127.0.0.1:8091",
				ModelBaseURL:  "http://127.0.0.1:8092/v1",
				TaskQueue:     rollout.TaskQueue,
				LogLevel:      "info",
				LogFormat:     "json",
			},
		},
		{
			name: "overrides",
			env: map[string]string{
				workers.EnvTranscriptDir: "/data/t",
				workers.EnvEnvURL:        "https://env.example",
				workers.EnvModelBaseURL:  "https://api.example/v1",
				workers.EnvModelAPIKey:   "k1",
				workers.EnvOpenAIAPIKey:  "k2",
				workers.EnvTaskQueue:     "q",
				workers.EnvLogLevel:      "DEBUG",
				workers.EnvDataToken:     "data-token-of-16",
				workers.EnvControlToken:  "control-token-of-16",
				workers.EnvTLSCA:         "/pki/ca.pem",
				workers.EnvTLSClientCert: "/pki/w.pem",
				workers.EnvTLSClientKey:  "/pki/w-key.pem",
				model.EnvMaxToolCalls:    "8",
				model.EnvMaxAnswerBytes:  "4MiB",
				model.EnvMaxRetryAfter:   "90s",
			},
			want: workers.Config{
				TranscriptDir: "/data/t",
				EnvURL:        "https://env.example",
				ModelBaseURL:  "https://api.example/v1",
				ModelAPIKey:   "k1",
				TaskQueue:     "q",
				LogLevel:      "debug",
				LogFormat:     "json",
				DataToken:     "data-token-of-16",
				ControlToken:  "control-token-of-16",
				TLS:           tlsfiles.ClientFiles{CA: "/pki/ca.pem", Cert: "/pki/w.pem", Key: "/pki/w-key.pem"},
				ModelLimits:   workers.ModelLimits{MaxToolCalls: 8, MaxAnswerBytes: 4 << 20, MaxRetryAfter: 90 * time.Second},
			},
		},
		{
			name: "OPENAI_API_KEY fallback, blank values take defaults",
			env: map[string]string{
				workers.EnvModelAPIKey:  "  ",
				workers.EnvOpenAIAPIKey: "sk-x",
				workers.EnvTaskQueue:    "",
			},
			want: workers.Config{
				TranscriptDir: ".turnstile/transcripts",
				EnvURL:        "http://127.0.0.1:8091",
				ModelBaseURL:  "http://127.0.0.1:8092/v1",
				ModelAPIKey:   "sk-x",
				TaskQueue:     rollout.TaskQueue,
				LogLevel:      "info",
				LogFormat:     "json",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := workers.ConfigFromLookup(lookup(tt.env))
			require.NoError(t, err)
			require.NotNil(t, got.Destinations, "no destinations read")
			d, err := got.Destinations.Env("", "")
			require.NoError(t, err)
			require.Equal(t, tt.want.EnvURL, d.URL, "default environment server")
			got.Destinations = nil
			require.Equal(t, workers.DefaultWorkerLiveness, got.Liveness, "no liveness setting: the defaults")
			got.Liveness = workers.Liveness{} // TestLivenessFromEnvironment checks the settings
			tt.want.Checkpoints = defaultCheckpoints
			tt.want.HTTP = httpserver.Defaults()
			tt.want.FileMode = storage.DefaultFileMode
			if tt.want.ModelLimits == (workers.ModelLimits{}) {
				tt.want.ModelLimits = workers.ModelLimits{MaxToolCalls: model.DefaultMaxToolCalls,
					MaxAnswerBytes: model.DefaultMaxAnswerBytes, MaxRetryAfter: model.DefaultMaxRetryAfter}
			}
			require.Equal(t, tt.want, got, "got %+v\nwant %+v", got, tt.want)
		})
	}
}

func TestConfigFromLookupRejects(t *testing.T) {
	tests := []struct {
		name, key, value string
		more             map[string]string
	}{
		{"equal data and control tokens", workers.EnvDataToken, "same-token-for-both", map[string]string{workers.EnvControlToken: "same-token-for-both"}},
		{"short data token", workers.EnvDataToken, "d1", nil},
		{"short control token", workers.EnvControlToken, "c1", nil},
		{"bad HTTP timeout", httpserver.EnvIdleTimeout, "soon", nil},
		{"bad checkpoint bound", artifact.EnvMaxIndexBytes, "0", nil},
		{"world-writable files", storage.EnvFileMode, "0666", nil},
		{"no tool calls", model.EnvMaxToolCalls, "0", nil},
		{"answer size", model.EnvMaxAnswerBytes, "big", nil},
		{"retry-after bound", model.EnvMaxRetryAfter, "-1m", nil},
		{"client certificate without key", workers.EnvTLSClientCert, "/pki/w.pem", nil},
		{"env url without scheme", workers.EnvEnvURL, "127.0.0.1:8091", nil},
		{"model url without scheme", workers.EnvModelBaseURL, "localhost/v1", nil},
		{"log level", workers.EnvLogLevel, "loud", nil},
		{"log format", workers.EnvLogFormat, "xml", nil},
		{"named server without URL", workers.EnvEnvServers, "a", nil},
		{"named endpoint with user info", workers.EnvModelEndpoints, "v=http://u@h/v1", nil},
		{"env allowlist entry without scheme", workers.EnvAllowedEnvURLs, "127.0.0.1:*", nil},
		{"participant allowlist entry with a query", workers.EnvAllowedParticipants, "http://h?x=1", nil},
		{"store endpoint without scheme", workers.EnvAllowedStoreEndpoints, "minio:9000", nil},
		{"a server's equal tokens", "TURNSTILE_DATA_TOKEN_A", "same-token-for-both", map[string]string{workers.EnvEnvServers: "a=http://h", "TURNSTILE_CONTROL_TOKEN_A": "same-token-for-both"}},
		{"a server's short data token", "TURNSTILE_DATA_TOKEN_A", "d1", map[string]string{workers.EnvEnvServers: "a=http://h"}},
		{"a server's short control token", "TURNSTILE_CONTROL_TOKEN_A", "c1", map[string]string{workers.EnvEnvServers: "a=http://h"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{tt.key: tt.value}
			for k, v := range tt.more {
				env[k] = v
			}
			_, err := workers.ConfigFromLookup(lookup(env))
			require.Error(t, err, "%s=%q accepted", tt.key, tt.value)
			assert.ErrorContains(t, err, tt.key, "error %q does not name %s", err, tt.key)
		})
	}
}

func TestHostPortAndUnreachableMessage(t *testing.T) {
	// Nothing listens on port 1 of loopback: the dial must fail fast with an
	// error that names the address and how to start a server.
	t.Setenv("TEMPORAL_ADDRESS", "127.0.0.1:1")
	t.Setenv("TEMPORAL_CONFIG_FILE", t.TempDir()+"/none.toml")
	opts, err := workers.ClientOptions(zaptestLogger(t))
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:1", workers.HostPort(opts), "HostPort")
	_, err = workers.Dial(t.Context(), opts, 3e9)
	require.Error(t, err, "dial to a closed port succeeded")
	for _, want := range []string{"127.0.0.1:1", "make devserver"} {
		assert.ErrorContains(t, err, want, "error %q does not mention %q", err, want)
	}
}

// A connection flag overrides TEMPORAL_*, which overrides temporal.toml:
// the Temporal CLI's precedence.
func TestClientOptionsWithPrecedence(t *testing.T) {
	file := filepath.Join(t.TempDir(), "temporal.toml")
	toml := "[profile.default]\naddress = \"file:1\"\nnamespace = \"file-ns\"\n\n[profile.other]\naddress = \"other:2\"\n"
	require.NoError(t, os.WriteFile(file, []byte(toml), 0o600))
	t.Setenv("TEMPORAL_CONFIG_FILE", file)
	t.Setenv("TEMPORAL_ADDRESS", "") // restored after the test…
	os.Unsetenv("TEMPORAL_ADDRESS")  // …and unset during it: the file's address applies
	t.Setenv("TEMPORAL_NAMESPACE", "env-ns")
	tests := []struct {
		name     string
		conn     workers.Connection
		addr, ns string
		tls      bool
	}{
		{"file and env", workers.Connection{}, "file:1", "env-ns", false},
		{"flags win", workers.Connection{Address: "flag:3", Namespace: "flag-ns"}, "flag:3", "flag-ns", false},
		{"profile", workers.Connection{Profile: "other"}, "other:2", "env-ns", false},
		{"tls flag", workers.Connection{TLS: true, TLSServerName: "tmprl.example"}, "file:1", "env-ns", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts, err := workers.ClientOptionsWith(zaptestLogger(t), tt.conn)
			require.NoError(t, err)
			require.Equal(t, tt.addr, opts.HostPort, "address %q namespace %q, want %q %q", opts.HostPort, opts.Namespace, tt.addr, tt.ns)
			require.Equal(t, tt.ns, opts.Namespace, "address %q namespace %q, want %q %q", opts.HostPort, opts.Namespace, tt.addr, tt.ns)
			got := opts.ConnectionOptions.TLS != nil
			require.Equal(t, tt.tls, got, "TLS on = %v, want %v", got, tt.tls)
		})
	}
	_, err := workers.ClientOptionsWith(zaptestLogger(t), workers.Connection{Profile: "missing"})
	require.Error(t, err, "an unknown profile was accepted")
}
