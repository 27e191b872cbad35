// Command soak runs turnstile under sustained load with faults for a fixed
// time (`make soak`): concurrent rollouts over mixed environments, a slow,
// flaky policy, periodic checkpoints, SIGKILLs of workers (and, once scoped
// recovery is merged, of environment servers); then it checks that every
// rollout completed exactly once and that memory and goroutines stayed
// flat. It prints a report and writes it, with an SVG chart of the samples,
// to its output directory. It exits 1 when the soak found a problem.
//
//	soak [-duration 10m] [-concurrency 1000] [-checkpoint-every 30s] [-worker-kill-every 1m] [-out DIR]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/turnstile-rl/turnstile/cmd/internal/cli"
	"github.com/turnstile-rl/turnstile/internal/soak"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if code := cli.Report(os.Stderr, "soak", run(ctx, os.Args[1:], os.Stdout, os.Stderr)); code != cli.ExitOK {
		stop()
		os.Exit(code)
	}
}

func parseFlags(args []string, stderr io.Writer) (soak.Config, error) {
	cfg := soak.Defaults()
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	exe, _ := os.Executable()
	fs.StringVar(&cfg.BinDir, "bin-dir", filepath.Dir(exe), "directory of the worker, envserver and policyserver binaries (make build)")
	fs.StringVar(&cfg.TemporalCLI, "temporal", os.Getenv("TURNSTILE_TEMPORAL_BIN"), "Temporal CLI binary; default $TURNSTILE_TEMPORAL_BIN")
	project := fs.String("project", ".", "project root (its temporal-dev.yaml configures the dev server)")
	fs.StringVar(&cfg.OutDir, "out", "", "output directory: logs, transcripts, checkpoints, report (default .turnstile/soak/<time>)")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long rollouts are fed and faults injected")
	fs.DurationVar(&cfg.DrainTimeout, "drain-timeout", cfg.DrainTimeout, "how long the set may take to finish after that")
	fs.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "rollouts kept in flight")
	fs.IntVar(&cfg.MaxRollouts, "max-rollouts", cfg.MaxRollouts, "rollouts started at most")
	envs := fs.String("envs", strings.Join(cfg.Envs, ","), "comma-separated environments, assigned round-robin")
	fs.Int64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the tasks, the policy's faults and the kill schedule")
	fs.DurationVar(&cfg.PolicyLatency, "policy-latency", cfg.PolicyLatency, "mean latency of a model call")
	fs.DurationVar(&cfg.PolicyJitter, "policy-jitter", cfg.PolicyJitter, "half-width of the uniform spread around it")
	fs.Float64Var(&cfg.ErrorRate, "error-rate", cfg.ErrorRate, "probability of an injected 503")
	fs.Float64Var(&cfg.RateLimitRate, "rate-limit-rate", cfg.RateLimitRate, "probability of an injected 429")
	fs.DurationVar(&cfg.CheckpointEvery, "checkpoint-every", cfg.CheckpointEvery, "interval between checkpoint starts")
	fs.DurationVar(&cfg.CheckpointTimeout, "checkpoint-timeout", cfg.CheckpointTimeout, "deadline of each checkpoint's cut")
	fs.DurationVar(&cfg.WorkerKillEvery, "worker-kill-every", cfg.WorkerKillEvery, "interval between worker SIGKILLs")
	fs.DurationVar(&cfg.WorkerDownFor, "worker-down-for", cfg.WorkerDownFor, "how long a killed worker stays down")
	fs.DurationVar(&cfg.EnvKillEvery, "env-kill-every", cfg.EnvKillEvery, "interval between environment server SIGKILLs, recovered by scoped recovery (0: off; needs client.RecoverServer)")
	fs.DurationVar(&cfg.RetiredGrace, "retired-grace", cfg.RetiredGrace, "environment servers' --retired-grace: how long a finished session keeps its stored responses (0: the servers' default)")
	fs.DurationVar(&cfg.SampleEvery, "sample-every", cfg.SampleEvery, "interval of memory and goroutine samples")
	cli.SetUsage(fs, "Runs turnstile under load with faults and checks the invariants and that memory stays flat.", []cli.Setting{
		{Env: "TURNSTILE_TEMPORAL_BIN", Meaning: "Temporal CLI binary"},
	})
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg.Envs = strings.Split(*envs, ",")
	cfg.DevConfig = filepath.Join(*project, "temporal-dev.yaml")
	if cfg.OutDir == "" {
		cfg.OutDir = filepath.Join(*project, ".turnstile", "soak", time.Now().UTC().Format("20060102-150405"))
	}
	return cfg, cfg.Validate()
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return cli.Usage(err)
	}
	if cfg.OutDir, err = filepath.Abs(cfg.OutDir); err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.OutDir, 0o755); err != nil {
		return err
	}
	cfg.Logf = func(format string, args ...any) { fmt.Fprintf(stderr, "soak: "+format+"\n", args...) }
	rep, err := soak.Run(ctx, cfg)
	if rep == nil {
		return err
	}
	rep.Print(stdout)
	if werr := write(cfg.OutDir, rep); werr != nil {
		return errors.Join(err, werr)
	}
	fmt.Fprintf(stdout, "report, samples and chart in %s\n", cfg.OutDir)
	return errors.Join(err, rep.Err())
}

// write saves the report as text and JSON and the chart as SVG.
func write(dir string, rep *soak.Report) error {
	var text strings.Builder
	rep.Print(&text)
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	for name, body := range map[string][]byte{
		"report.txt": []byte(text.String()), "report.json": data, "soak.svg": []byte(soak.Chart(rep)),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	return nil
}
