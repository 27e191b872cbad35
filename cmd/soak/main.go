// Command soak runs turnstile under sustained load with faults for a fixed
// time (`make soak`) with nothing playing the operator: concurrent rollouts
// over mixed environments, a slow, flaky policy, checkpoints from a
// Temporal Schedule with retention and periodic garbage collection,
// SIGKILLs of workers and of environment servers (recovered by the set's
// watchdog), partitions and slow links through Toxiproxy; then it checks
// that every rollout completed exactly once and that memory, goroutines and
// checkpoint disk stayed flat. It prints a report and writes it, with an
// SVG chart of the samples, to its output directory. It exits 1 when the
// soak found a problem.
//
//	soak [-duration 1h] [-concurrency 250] [-checkpoint-every 3m] [-env-kill-every 6m] [-out DIR]
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
	"github.com/turnstile-rl/turnstile/internal/stack"
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
	fs.DurationVar(&cfg.ModelCallTimeout, "model-call-timeout", cfg.ModelCallTimeout, "the rollouts' model call timeout (0: the default); a call on a killed worker is retried after it")
	fs.DurationVar(&cfg.EnvCallTimeout, "env-call-timeout", cfg.EnvCallTimeout, "the rollouts' environment call timeout: how long a rollout keeps retrying a dead server; must cover -env-down-for and the watchdog's detection")
	fs.DurationVar(&cfg.CheckpointEvery, "checkpoint-every", cfg.CheckpointEvery, "interval of the set's checkpoint schedule")
	fs.DurationVar(&cfg.CheckpointTimeout, "checkpoint-timeout", cfg.CheckpointTimeout, "deadline of each checkpoint's cut")
	fs.IntVar(&cfg.Keep, "keep", cfg.Keep, "the schedule's retention: committed checkpoints kept (pinned ones besides)")
	fs.IntVar(&cfg.TagEvery, "tag-every", cfg.TagEvery, "the trainer moves the schedule's tag to its next step every N commits")
	fs.IntVar(&cfg.GCEvery, "gc-every", cfg.GCEvery, "the trainer collects garbage (retention, mark, sweep) every N commits")
	fs.DurationVar(&cfg.GCGrace, "gc-grace", cfg.GCGrace, "the sweep's grace: unreferenced blobs older than this are deleted")
	fs.DurationVar(&cfg.WorkerKillEvery, "worker-kill-every", cfg.WorkerKillEvery, "interval between worker SIGKILLs")
	fs.DurationVar(&cfg.WorkerDownFor, "worker-down-for", cfg.WorkerDownFor, "how long a killed worker stays down")
	fs.DurationVar(&cfg.EnvKillEvery, "env-kill-every", cfg.EnvKillEvery, "interval between environment server SIGKILLs, recovered by the watchdog (0: off)")
	fs.DurationVar(&cfg.EnvDownFor, "env-down-for", cfg.EnvDownFor, "how long a killed environment server stays down before its supervisor restarts it at the same address (never before the watchdog declared it)")
	fs.DurationVar(&cfg.WatchEvery, "watch-every", cfg.WatchEvery, "the watchdog's probe interval")
	fs.DurationVar(&cfg.WatchTimeout, "watch-timeout", cfg.WatchTimeout, "the watchdog's probe timeout")
	fs.IntVar(&cfg.WatchMisses, "watch-misses", cfg.WatchMisses, "probes in a row a dead server misses")
	fs.DurationVar(&cfg.WatchBound, "watch-bound", cfg.WatchBound, "least time since a server's last answer before it is declared dead")
	fs.DurationVar(&cfg.NetFaultEvery, "net-fault-every", cfg.NetFaultEvery, "interval between network faults through Toxiproxy, partitions and slow links in turn (0: off)")
	fs.DurationVar(&cfg.PartitionFor, "partition-for", cfg.PartitionFor, "length of a partition (shorter than -watch-bound)")
	fs.DurationVar(&cfg.SlowFor, "slow-for", cfg.SlowFor, "length of a slow-link episode")
	fs.DurationVar(&cfg.SlowLatency, "slow-latency", cfg.SlowLatency, "latency a slow link adds each way")
	fs.DurationVar(&cfg.SlowJitter, "slow-jitter", cfg.SlowJitter, "jitter of that latency")
	resetShare := fs.Float64("reset-share", float64(cfg.ResetShare), "share of a slow link's connections reset")
	fs.DurationVar(&cfg.RetiredGrace, "retired-grace", cfg.RetiredGrace, "environment servers' --retired-grace: how long a finished session keeps its stored responses (0: the servers' default)")
	fs.DurationVar(&cfg.ForgetAfter, "forget-after", cfg.ForgetAfter, "environment servers' --forget-after: how long a finished rollout whose stored responses were dropped keeps its fence before the server forgets it and its checkpoints stop carrying it (0: the servers' default, an hour)")
	fs.DurationVar(&cfg.SampleEvery, "sample-every", cfg.SampleEvery, "interval of memory, goroutine and disk samples")
	fs.DurationVar(&cfg.FlatAfter, "flat-after", cfg.FlatAfter, "warm-up after which memory, goroutines and checkpoint disk must stay flat (half the load if that is shorter)")
	toxi := fs.String("toxiproxy", "", "Toxiproxy server binary (default $TURNSTILE_TOXIPROXY_BIN, else bin/toxiproxy-server under -project)")
	cli.SetUsage(fs, "Runs turnstile under load with faults and checks the invariants and that memory stays flat.", []cli.Setting{
		{Env: "TURNSTILE_TEMPORAL_BIN", Meaning: "Temporal CLI binary"},
		{Env: stack.ToxiproxyEnvVar, Meaning: "Toxiproxy server binary"},
	})
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg.Envs = strings.Split(*envs, ",")
	cfg.ResetShare = float32(*resetShare)
	cfg.Toxiproxy = *toxi
	if cfg.Toxiproxy == "" && cfg.NetFaultEvery > 0 {
		bin, err := stack.FindToxiproxy(*project)
		if err != nil {
			return cfg, err
		}
		cfg.Toxiproxy = bin
	}
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
