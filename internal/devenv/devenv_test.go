package devenv_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/turnstile-rl/turnstile/internal/devenv"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// validFile is a minimal complete settings file; invalid cases are built by
// replacing one line of it, so each case differs from a good file in exactly
// one way.
const validFile = `env:
  dev:
    address: "127.0.0.1:7233"
    namespace: "default"
server:
  dev:
    ip: "127.0.0.1"
    port: "7233"
    ui: "true"
    ui-port: "8233"
    metrics-port: ""
    http-port: ""
    db-filename: ""
    namespace: "default"
    log-level: "warn"
search-attributes:
  dev:
    RolloutTurn: "Int"
    RolloutId: "Keyword"
dynamic-config:
  dev:
    system.enableActivityEagerExecution: "true"
    limit.maxIDLength: "1000"
`

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "temporal-dev.yaml")
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	return path
}

func mustLoad(t *testing.T, content string) *devenv.Config {
	t.Helper()
	cfg, err := devenv.Load(writeFile(t, content))
	require.NoError(t, err, "Load")
	return cfg
}

func ptr[T any](v T) *T { return &v }

func TestStartDevArgs(t *testing.T) {
	tests := []struct {
		name      string
		file      string
		overrides devenv.Overrides
		want      []string
	}{
		{
			name: "file as is",
			file: validFile,
			want: []string{"server", "start-dev",
				"--ip", "127.0.0.1", "--port", "7233", "--ui-port", "8233",
				"--namespace", "default", "--log-level", "warn",
				"--search-attribute", "RolloutId=Keyword",
				"--search-attribute", "RolloutTurn=Int",
				"--dynamic-config-value", "limit.maxIDLength=1000",
				"--dynamic-config-value", "system.enableActivityEagerExecution=true",
			},
		},
		{
			name: "test harness on free ports, headless, with a db file",
			file: validFile,
			overrides: devenv.Overrides{
				Port: 40001, UIPort: 40002, MetricsPort: 40003, HTTPPort: 40004,
				DBFilename: "/tmp/x/state.db", Headless: ptr(true), LogLevel: "error",
			},
			want: []string{"server", "start-dev",
				"--ip", "127.0.0.1", "--port", "40001", "--headless",
				"--metrics-port", "40003", "--http-port", "40004",
				"--db-filename", "/tmp/x/state.db",
				"--namespace", "default", "--log-level", "error",
				"--search-attribute", "RolloutId=Keyword",
				"--search-attribute", "RolloutTurn=Int",
				"--dynamic-config-value", "limit.maxIDLength=1000",
				"--dynamic-config-value", "system.enableActivityEagerExecution=true",
			},
		},
		{
			name: "UI turned on by override, default UI port, no extras",
			file: strings.NewReplacer(
				`ui: "true"`, `ui: "false"`,
				`ui-port: "8233"`, `ui-port: ""`,
				`log-level: "warn"`, `log-level: ""`,
			).Replace(validFile[:strings.Index(validFile, "search-attributes:")]),
			overrides: devenv.Overrides{Headless: ptr(false)},
			want: []string{"server", "start-dev",
				"--ip", "127.0.0.1", "--port", "7233", "--namespace", "default",
			},
		},
		{
			name: "headless in the file drops the UI port",
			file: strings.Replace(validFile, `ui: "true"`, `ui: "false"`, 1),
			want: []string{"server", "start-dev",
				"--ip", "127.0.0.1", "--port", "7233", "--headless",
				"--namespace", "default", "--log-level", "warn",
				"--search-attribute", "RolloutId=Keyword",
				"--search-attribute", "RolloutTurn=Int",
				"--dynamic-config-value", "limit.maxIDLength=1000",
				"--dynamic-config-value", "system.enableActivityEagerExecution=true",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := mustLoad(t, tt.file)
			got, err := cfg.StartDevArgs(devenv.DefaultEnv, tt.overrides)
			require.NoError(t, err, "StartDevArgs")
			assert.Equal(t, tt.want, got, "StartDevArgs\n got: %q\nwant: %q", got, tt.want)
			// Same input, same command line: map order must not leak out.
			for i := 0; i < 5; i++ {
				again, _ := cfg.StartDevArgs(devenv.DefaultEnv, tt.overrides)
				require.Equal(t, got, again, "StartDevArgs not deterministic:\n%q\n%q", again, got)
			}
		})
	}
}

func TestStartDevArgsErrors(t *testing.T) {
	cfg := mustLoad(t, validFile)
	tests := []struct {
		name      string
		env       string
		overrides devenv.Overrides
		wantErr   string
	}{
		{"unknown env", "prod", devenv.Overrides{}, `environment "prod" not in`},
		{"port too big", "dev", devenv.Overrides{Port: 70000}, "port 70000 is not a port"},
		{"negative UI port", "dev", devenv.Overrides{UIPort: -1}, "ui-port -1 is not a port"},
		{"UI port clashes with frontend", "dev", devenv.Overrides{UIPort: 7233}, "ui-port 7233 is the same port as port"},
		{"metrics clashes with UI", "dev", devenv.Overrides{MetricsPort: 8233}, "metrics-port 8233 is the same port as ui-port"},
		{"bad log level", "dev", devenv.Overrides{LogLevel: "loud"}, `log-level "loud" is not one of`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := cfg.StartDevArgs(tt.env, tt.overrides)
			require.ErrorContains(t, err, tt.wantErr, "err = %v, want it to contain %q", err, tt.wantErr)
		})
	}
}

func TestLoadInvalid(t *testing.T) {
	replace := func(old, new string) string {
		if !strings.Contains(validFile, old) {
			panic("test case does not apply: " + old)
		}
		return strings.Replace(validFile, old, new, 1)
	}
	tests := []struct {
		name    string
		file    string
		wantErr string
	}{
		{"empty file", "", "file is empty"},
		{"not YAML", "env: [", "not valid YAML"},
		{"top level is a list", "- env\n", "top level (line 1): must be a mapping, not a list"},
		{"section is a scalar", replace("search-attributes:\n  dev:", "search-attributes: \"x\"\nunused:\n  dev:"), "section search-attributes (line 16): must be a mapping"},
		{"four levels deep", replace(`ip: "127.0.0.1"`, "ip:\n      v4: \"127.0.0.1\""), "server.dev.ip (line 8): value must be a quoted string, not a mapping"},
		{"unquoted port", replace(`port: "7233"`, `port: 7233`), `server.dev.port (line 8): value 7233 must be a quoted string ("7233")`},
		{"unquoted bool", replace(`ui: "true"`, `ui: true`), "server.dev.ui (line 9): value true must be a quoted string"},
		{"null value", replace(`db-filename: ""`, `db-filename:`), "server.dev.db-filename (line 13): value  must be a quoted string"},
		{"list value", replace(`ip: "127.0.0.1"`, `ip: ["127.0.0.1"]`), "server.dev.ip (line 7): value must be a quoted string, not a list"},
		{"duplicate key", replace(`    ip: "127.0.0.1"`, "    ip: \"127.0.0.1\"\n    ip: \"127.0.0.2\""), "duplicate key \"ip\""},
		{"unknown section", validFile + "extra:\n  dev:\n    a: \"b\"\n", `unknown section "extra"`},
		{"no server section", validFile[:strings.Index(validFile, "server:")], `section "server" is missing`},
		{"unknown server key", replace(`ip: "127.0.0.1"`, `ip: "127.0.0.1"`+"\n    grpc-port: \"1\""), "server.dev.grpc-port: unknown key"},
		{"missing required key", replace("    ui: \"true\"\n", ""), "server.dev.ui: missing"},
		{"bad IP", replace(`ip: "127.0.0.1"`, `ip: "127.0.0"`), `server.dev.ip: "127.0.0" is not an IP address`},
		{"port not a number", replace(`port: "7233"`, `port: "72x33"`), `server.dev.port: "72x33" is not a port`},
		{"port zero", replace(`port: "7233"`, `port: "0"`), `server.dev.port: "0" is not a port`},
		{"port out of range", replace(`ui-port: "8233"`, `ui-port: "65536"`), `server.dev.ui-port: "65536" is not a port`},
		{"port with sign", replace(`port: "7233"`, `port: "+7233"`), `server.dev.port: "+7233" is not a port`},
		{"ports collide", replace(`metrics-port: ""`, `metrics-port: "7233"`), "server.dev: metrics-port 7233 is the same port as port"},
		{"ui not a bool", replace(`ui: "true"`, `ui: "yes"`), `server.dev.ui: "yes" must be "true" or "false"`},
		{"bad log level", replace(`log-level: "warn"`, `log-level: "WARN"`), `log-level "WARN" is not one of`},
		{"bad namespace", replace(`namespace: "default"`+"\n    log-level", `namespace: "my ns"`+"\n    log-level"), `server.dev.namespace: "my ns" is not a namespace name`},
		{"unknown search attribute type", replace(`RolloutTurn: "Int"`, `RolloutTurn: "Integer"`), `search-attributes.dev.RolloutTurn: unknown type "Integer"`},
		{"search attribute type lower case", replace(`RolloutId: "Keyword"`, `RolloutId: "keyword"`), `search-attributes.dev.RolloutId: unknown type "keyword"`},
		{"search attribute bad name", replace(`RolloutId: "Keyword"`, `Rollout-Id: "Keyword"`), "search-attributes.dev.Rollout-Id: name must be an identifier"},
		{"dynamic config not JSON", replace(`limit.maxIDLength: "1000"`, `limit.maxIDLength: "10 00"`), `dynamic-config.dev.limit.maxIDLength: "10 00" is not one JSON value`},
		{"dynamic config bare word", replace(`limit.maxIDLength: "1000"`, `some.key: "abc"`), `dynamic-config.dev.some.key: "abc" is not one JSON value`},
		{"dynamic config bad key", replace(`limit.maxIDLength: "1000"`, `limit..x: "1"`), "dynamic-config.dev.limit..x: key must be dot-separated identifiers"},
		{"env section missing", validFile[strings.Index(validFile, "server:"):], "env.dev: missing"},
		{"env address drifts from server", replace(`address: "127.0.0.1:7233"`, `address: "127.0.0.1:7234"`), `env.dev.address: "127.0.0.1:7234" does not match`},
		{"env namespace drifts from server", replace(`    namespace: "default"`+"\nserver:", `    namespace: "other"`+"\nserver:"), `env.dev.namespace: "other" does not match`},
		{"env unknown key", replace(`address: "127.0.0.1:7233"`, `address: "127.0.0.1:7233"`+"\n    tls: \"true\""), "env.dev.tls: unknown key"},
		{"search attributes for unknown env", replace("search-attributes:\n  dev:", "search-attributes:\n  prod:\n    A: \"Int\"\n  dev:"), `search-attributes.prod: environment "prod" has no server.prod section`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, tt.file)
			_, err := devenv.Load(path)
			require.Error(t, err, "Load accepted an invalid file:\n%s", tt.file)
			require.ErrorContains(t, err, tt.wantErr, "err = %v\nwant it to contain %q", err, tt.wantErr)
			assert.True(t, strings.HasPrefix(err.Error(), path+": "), "err = %v, want it to name the file %s", err, path)
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := devenv.Load(filepath.Join(t.TempDir(), "nope.yaml"))
	require.ErrorContains(t, err, "nope.yaml", "err = %v, want a read error naming the file", err)
}

// TestRepoFile keeps the committed temporal-dev.yaml valid and holding what
// the workflows rely on.
func TestRepoFile(t *testing.T) {
	cfg, err := devenv.Load(filepath.Join("..", "..", devenv.DefaultConfigFile))
	require.NoError(t, err)
	env, err := cfg.Env(devenv.DefaultEnv)
	require.NoError(t, err)
	// The dev server registers exactly what turnstile sets (the list
	// `starter setup` registers on a cluster).
	wantSA := map[string]string{}
	for name, typ := range rollout.SearchAttributes() {
		wantSA[name] = map[enumspb.IndexedValueType]string{
			enumspb.INDEXED_VALUE_TYPE_KEYWORD: "Keyword", enumspb.INDEXED_VALUE_TYPE_INT: "Int", enumspb.INDEXED_VALUE_TYPE_DATETIME: "Datetime",
		}[typ]
	}
	assert.Equal(t, wantSA, env.SearchAttributes, "search attributes = %v, want %v", env.SearchAttributes, wantSA)
	for _, key := range []string{"system.enableActivityEagerExecution", "system.enableEagerWorkflowStart"} {
		got := env.DynamicConfig[key]
		assert.Equal(t, "true", got, "%s = %q, want \"true\"", key, got)
	}
	assert.Equal(t, "", env.Server.DBFilename, "db-filename = %q, want in-memory (\"\")", env.Server.DBFilename)
	require.Equal(t, "127.0.0.1:7233", env.Client.Address, "unexpected dev endpoints: client %+v server %+v", env.Client, env.Server)
	require.Equal(t, 8233, env.Server.UIPort, "unexpected dev endpoints: client %+v server %+v", env.Client, env.Server)
	require.True(t, env.Server.UI, "unexpected dev endpoints: client %+v server %+v", env.Client, env.Server)
}

func writeExecutable(t *testing.T, path, script string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(script), 0o755))
}

func TestEnsureCLI(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("uses shell scripts as fake binaries")
	}
	const fakeCLI = "#!/bin/sh\necho fake temporal\n"
	// A fake `go` that records its arguments and GOBIN, then "installs" a
	// temporal binary there, so the install branch runs without minutes of
	// building.
	chmod, err := exec.LookPath("chmod") // PATH is replaced below
	if err != nil {
		t.Skip("no chmod")
	}
	fakeGo := "#!/bin/sh\necho \"$@\" > \"$GOBIN/go-args\"\nprintf '#!/bin/sh\\n' > \"$GOBIN/temporal\"\n" +
		chmod + " +x \"$GOBIN/temporal\"\n"
	const failingGo = "#!/bin/sh\necho 'no network' >&2\nexit 1\n"

	tests := []struct {
		name     string
		setup    func(t *testing.T, pathDir, root string)
		want     func(pathDir, root string) string
		wantErr  string
		wantArgs string
	}{
		{
			name: "on PATH",
			setup: func(t *testing.T, pathDir, root string) {
				writeExecutable(t, filepath.Join(pathDir, "temporal"), fakeCLI)
				writeExecutable(t, filepath.Join(root, "bin", "temporal"), fakeCLI)
			},
			want: func(pathDir, root string) string { return filepath.Join(pathDir, "temporal") },
		},
		{
			name: "project bin",
			setup: func(t *testing.T, pathDir, root string) {
				writeExecutable(t, filepath.Join(pathDir, "go"), failingGo)
				writeExecutable(t, filepath.Join(root, "bin", "temporal"), fakeCLI)
			},
			want: func(pathDir, root string) string { return filepath.Join(root, "bin", "temporal") },
		},
		{
			name: "installs with go install",
			setup: func(t *testing.T, pathDir, root string) {
				writeExecutable(t, filepath.Join(pathDir, "go"), fakeGo)
			},
			want:     func(pathDir, root string) string { return filepath.Join(root, "bin", "temporal") },
			wantArgs: "install github.com/temporalio/cli/cmd/temporal@v1.5.1\n",
		},
		{
			name: "non-executable file in bin is rebuilt",
			setup: func(t *testing.T, pathDir, root string) {
				writeExecutable(t, filepath.Join(pathDir, "go"), fakeGo)
				writeExecutable(t, filepath.Join(root, "bin", "temporal"), fakeCLI)
				require.NoError(t, os.Chmod(filepath.Join(root, "bin", "temporal"), 0o644))
			},
			want:     func(pathDir, root string) string { return filepath.Join(root, "bin", "temporal") },
			wantArgs: "install github.com/temporalio/cli/cmd/temporal@v1.5.1\n",
		},
		{
			name: "install fails",
			setup: func(t *testing.T, pathDir, root string) {
				writeExecutable(t, filepath.Join(pathDir, "go"), failingGo)
			},
			wantErr: "go install github.com/temporalio/cli/cmd/temporal@v1.5.1",
		},
		{
			name:    "no go command",
			setup:   func(t *testing.T, pathDir, root string) {},
			wantErr: "no go command to build it",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pathDir, root := t.TempDir(), t.TempDir()
			tt.setup(t, pathDir, root)
			t.Setenv("PATH", pathDir)
			got, err := devenv.EnsureCLI(context.Background(), root)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr, "err = %v, want it to contain %q", err, tt.wantErr)
				return
			}
			require.NoError(t, err, "EnsureCLI")
			want := tt.want(pathDir, root)
			assert.Equal(t, want, got, "EnsureCLI = %q, want %q", got, want)
			if tt.wantArgs != "" {
				args, err := os.ReadFile(filepath.Join(root, "bin", "go-args"))
				require.NoError(t, err, "fake go did not run with GOBIN=<root>/bin")
				assert.Equal(t, tt.wantArgs, string(args), "go args = %q, want %q", args, tt.wantArgs)
			}
		})
	}
}
