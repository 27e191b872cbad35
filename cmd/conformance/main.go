// Command conformance drives a running participant (an environment server in
// any language) through every numbered rule of docs/protocol/RULES.md and
// prints one line per rule, PASS/FAIL/SKIP with the evidence; the exit
// status is 1 when any rule fails (2 for a bad command line).
//
//	conformance --url http://127.0.0.1:8091 --data-token "$TURNSTILE_DATA_TOKEN" --control-token "$TURNSTILE_CONTROL_TOKEN"
//
// The defaults of --env, --task, --tool, --args and --restart-env fit the Go
// envserver's catalog; a participant of another language names its own.
// The tokens default to TURNSTILE_DATA_TOKEN and TURNSTILE_CONTROL_TOKEN
// (the variables keep them out of the process list). After the rules it
// retires the live sessions of its own rollouts (line END); with
// --end-to-end it then runs a small set through the coordinator on the
// participant, with a checkpoint, a kill of everything it started and a
// restore (line E2E), starting its own Temporal dev server, policy server
// and worker from --bin.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/turnstile-rl/turnstile/cmd/internal/cli"
	"github.com/turnstile-rl/turnstile/internal/endtoend"
	"github.com/turnstile-rl/turnstile/internal/tlsfiles"
	"github.com/turnstile-rl/turnstile/participants/conformance"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if code := cli.Report(os.Stderr, "conformance", run(ctx, os.Args[1:], os.Stdout, os.Stderr)); code != cli.ExitOK {
		stop()
		os.Exit(code)
	}
}

// errFailed is the run's error when a rule failed: the lines said why.
var errFailed = errors.New("the participant fails at least one rule")

type options struct {
	cfg     conformance.Config
	tls     tlsfiles.ClientFiles
	timeout time.Duration
	list    bool
	e2e     endToEnd
}

// endToEnd are the settings of the end-to-end stage.
type endToEnd struct {
	on                       bool
	bin, temporal, devConfig string
	rollouts                 int
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("conformance", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var task, argsJSON, restartTask, replayTask, replayCalls string
	fs.StringVar(&o.cfg.URL, "url", "", "base URL of the participant (http:// or https://); required")
	fs.StringVar(&o.cfg.DataToken, "data-token", os.Getenv(protocol.DataTokenEnvVar), "the participant's data-plane token; default from $"+protocol.DataTokenEnvVar)
	fs.StringVar(&o.cfg.ControlToken, "control-token", os.Getenv(protocol.ControlTokenEnvVar), "the participant's control-plane token; default from $"+protocol.ControlTokenEnvVar)
	fs.StringVar(&o.cfg.Env, "env", conformance.DefaultEnv, "an export_restore environment of the participant")
	fs.StringVar(&task, "task", conformance.DefaultTask, "a task (JSON) of --env")
	fs.StringVar(&o.cfg.Tool, "tool", conformance.DefaultTool, "a tool of --env the task accepts at least three times in a row")
	fs.StringVar(&argsJSON, "args", conformance.DefaultArgs, "the arguments (JSON) of --tool")
	fs.StringVar(&o.cfg.RestartEnv, "restart-env", conformance.DefaultRestartEnv, "a restart_only or stateless environment, for R14; empty skips R14")
	fs.StringVar(&restartTask, "restart-task", conformance.DefaultRestartTask, "a task (JSON) of --restart-env")
	fs.StringVar(&o.cfg.ReplayEnv, "replay-env", conformance.DefaultReplayEnv, "a replay environment, for R27; empty (or one the participant does not host) skips R27")
	fs.StringVar(&replayTask, "replay-task", conformance.DefaultReplayTask, "a task (JSON) of --replay-env")
	fs.StringVar(&replayCalls, "replay-calls", conformance.DefaultReplayCalls, `four calls of --replay-env (JSON array of {"tool","arguments"}) it accepts in a row from the task's start, the last answer depending on the state the first three left`)
	fs.StringVar(&o.cfg.Dir, "dir", "", "absolute directory the participant can write checkpoints into; default a new temporary directory (removed at the end)")
	fs.StringVar(&o.cfg.Prefix, "prefix", "", "prefix of the rollout and checkpoint ids the kit uses; default a random one")
	fs.StringVar(&o.tls.CA, "tls-ca", os.Getenv(tlsfiles.EnvCA), "CA (PEM) to trust for an https:// participant; default from $"+tlsfiles.EnvCA)
	fs.StringVar(&o.tls.Cert, "tls-cert", os.Getenv(tlsfiles.EnvClientCert), "client certificate (PEM) for mutual TLS; default from $"+tlsfiles.EnvClientCert)
	fs.StringVar(&o.tls.Key, "tls-key", os.Getenv(tlsfiles.EnvClientKey), "key of --tls-cert; default from $"+tlsfiles.EnvClientKey)
	fs.IntVar(&o.cfg.RetiredSessions, "retired-sessions", 0, "how many verified sessions the participant keeps the receipts of (its own --retired-sessions): the kit verifies one more and checks R3 past it; 0 leaves that part undriven")
	fs.StringVar(&o.cfg.NoControlURL, "no-control-url", "", "base URL of a second instance of the participant started without a control token: R2 checks it answers control_disabled; empty leaves that part undriven")
	fs.BoolVar(&o.e2e.on, "end-to-end", false, "after the rules, run a set through the coordinator on the participant: checkpoint, kill, restore (starts its own Temporal dev server, policy server and worker)")
	fs.StringVar(&o.e2e.bin, "bin", "", "directory holding the worker and policyserver binaries, for --end-to-end; default the directory of this program")
	fs.StringVar(&o.e2e.temporal, "temporal", os.Getenv("TURNSTILE_TEMPORAL_BIN"), "the Temporal CLI, for --end-to-end; default $TURNSTILE_TEMPORAL_BIN, else temporal in --bin, else on PATH")
	fs.StringVar(&o.e2e.devConfig, "dev-config", "temporal-dev.yaml", "the dev server's settings, for --end-to-end")
	fs.IntVar(&o.e2e.rollouts, "e2e-rollouts", endtoend.DefaultRollouts, "rollouts of the --end-to-end set")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "bound of the whole run (with --end-to-end, add a few minutes)")
	fs.BoolVar(&o.list, "list", false, "print the rules and exit")
	cli.SetUsage(fs, "Checks a participant against every numbered rule of docs/protocol/RULES.md: one PASS/FAIL line per rule; exit 1 on any FAIL.", []cli.Setting{
		{Env: protocol.DataTokenEnvVar, Meaning: "the participant's data-plane token"},
		{Env: protocol.ControlTokenEnvVar, Meaning: "the participant's control-plane token"},
		{Env: tlsfiles.EnvCA, Meaning: "CA to trust for https://"},
		{Env: tlsfiles.EnvClientCert, Meaning: "client certificate for mutual TLS (with " + tlsfiles.EnvClientKey + ")"},
	})
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.list {
		return o, nil
	}
	if o.cfg.URL == "" {
		return o, errors.New("--url is required")
	}
	for _, j := range []struct {
		flag, value string
		dst         *json.RawMessage
	}{{"--task", task, &o.cfg.Task}, {"--args", argsJSON, &o.cfg.Args}, {"--restart-task", restartTask, &o.cfg.RestartTask}, {"--replay-task", replayTask, &o.cfg.ReplayTask}} {
		if !json.Valid([]byte(j.value)) {
			return o, fmt.Errorf("%s: %q is not JSON", j.flag, j.value)
		}
		*j.dst = json.RawMessage(j.value)
	}
	if o.cfg.ReplayEnv != "" {
		calls, err := conformance.ParseCalls(replayCalls)
		if err != nil {
			return o, fmt.Errorf("--replay-calls: %w", err)
		}
		o.cfg.ReplayCalls = calls
	}
	if o.cfg.Dir != "" && !filepath.IsAbs(o.cfg.Dir) {
		return o, fmt.Errorf("--dir %q is not an absolute path", o.cfg.Dir)
	}
	if o.cfg.RetiredSessions < 0 || o.e2e.rollouts < 1 {
		return o, errors.New("--retired-sessions must be ≥ 0 and --e2e-rollouts ≥ 1")
	}
	return o, nil
}

// stage is the end-to-end stage e's settings give, with the work
// directory for its processes' logs.
func (e endToEnd) stage() (conformance.EndToEnd, string, error) {
	bin := e.bin
	if bin == "" {
		self, err := os.Executable()
		if err != nil {
			return nil, "", fmt.Errorf("--bin: %w", err)
		}
		bin = filepath.Dir(self)
	}
	temporal := e.temporal
	if temporal == "" {
		temporal = filepath.Join(bin, "temporal")
		if _, err := os.Stat(temporal); err != nil {
			if temporal, err = exec.LookPath("temporal"); err != nil {
				return nil, "", errors.New("--end-to-end needs the Temporal CLI: --temporal, $TURNSTILE_TEMPORAL_BIN, temporal in --bin or on PATH")
			}
		}
	}
	cfg := endtoend.Config{BinDir: bin, TemporalCLI: temporal, DevConfig: e.devConfig, WorkDir: os.TempDir(), Rollouts: e.rollouts}
	if err := cfg.Check(); err != nil {
		return nil, "", fmt.Errorf("--end-to-end: %w", err)
	}
	work, err := os.MkdirTemp("", "turnstile-conformance-e2e-")
	if err != nil {
		return nil, "", err
	}
	cfg.WorkDir = work
	return cfg.Stage(), work, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return cli.Usage(err)
	}
	if o.list {
		for _, r := range conformance.Rules() {
			fmt.Fprintf(stdout, "%s %s\n", r.ID, r.Name)
		}
		return nil
	}
	tlsCfg, err := o.tls.Config()
	if err != nil {
		return cli.Usage(err)
	}
	o.cfg.HTTPClient = tlsfiles.HTTPClient(tlsCfg)
	if o.cfg.Dir == "" {
		dir, err := os.MkdirTemp("", "turnstile-conformance-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		o.cfg.Dir = dir
	}
	var work string
	if o.e2e.on {
		if o.cfg.EndToEnd, work, err = o.e2e.stage(); err != nil {
			return cli.Usage(err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	res, err := conformance.Run(ctx, o.cfg)
	if err != nil {
		return err
	}
	if work != "" {
		keepLogs(stderr, work, res)
	}
	if err := conformance.Print(stdout, res); err != nil {
		return err
	}
	if conformance.Failed(res) {
		return errFailed
	}
	return nil
}

// keepLogs removes the end-to-end stage's work directory when it passed,
// and points to the logs it holds when it did not.
func keepLogs(stderr io.Writer, work string, res []conformance.Result) {
	for _, r := range res {
		if r.ID == conformance.EndToEndID && r.Verdict != conformance.Pass {
			fmt.Fprintf(stderr, "conformance: the end-to-end stage's process logs are in %s\n", work)
			return
		}
	}
	_ = os.RemoveAll(work)
}
