// Command bench measures turnstile against a lean Temporal loop (two plain
// activities per turn passing small payloads) and a padded one on one dev
// server it starts itself, and prints the ratios (`make bench`; `make bench BENCH_FLAGS=-quick` for a short run).
//
//	bench [-quick | -smoke] [-out DIR] [-concurrency N] [-sizes 100,1000] [-queued-sizes 1000] [-max-in-flight N] [-with-10k]
//	      [-only latency,throughput,admission] [-admission-levels 64,128,256] [-admission-submitted N] [-admission-pollers fixed,autoscaling] [-cpuprofile]
//	bench floor-worker --address HOST:PORT --task-queue Q   (started by the bench itself)
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/turnstile-rl/turnstile/cmd/internal/cli"
	"github.com/turnstile-rl/turnstile/internal/bench"
	"github.com/turnstile-rl/turnstile/internal/devenv"
	"github.com/turnstile-rl/turnstile/trainer"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if len(os.Args) > 1 && os.Args[1] == bench.FloorWorkerCommand {
		err = floorWorker(ctx, os.Args[2:], os.Stderr)
	} else {
		err = run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	}
	if code := cli.Report(os.Stderr, "bench", err); code != cli.ExitOK {
		stop()
		os.Exit(code)
	}
}

// options are the bench's command line beyond bench.Config.
type options struct {
	cfg        bench.Config
	with10k    bool
	temporal   string
	projectDir string
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "a shorter run: fewer turns, 64 concurrent rollouts, busy sets of 100 and 300, 300 queued at max_in_flight 64, a feed of 300 held results, no admission scenario")
	smoke := fs.Bool("smoke", false, "the smallest run that takes every step (what the test runs); figures mean nothing")
	def := bench.Default()
	o := options{}
	exe, _ := os.Executable()
	binDir := fs.String("bin-dir", filepath.Dir(exe), "directory of the worker, envserver, policyserver and bench binaries (make build)")
	fs.StringVar(&o.temporal, "temporal", os.Getenv("TURNSTILE_TEMPORAL_BIN"), "Temporal CLI; empty: $TURNSTILE_TEMPORAL_BIN, else `temporal` on PATH or ./bin/temporal (installed if missing)")
	fs.StringVar(&o.projectDir, "project", ".", "project root (temporal-dev.yaml, ./bin)")
	out := fs.String("out", "", "output directory (default .turnstile/bench/<time>)")
	conc := fs.Int("concurrency", 0, fmt.Sprintf("concurrent rollouts of the throughput scenario (default %d)", def.Concurrency))
	tturns := fs.Int("throughput-turns", 0, fmt.Sprintf("turns per rollout of the throughput scenario (default %d)", def.ThroughputTurns))
	lturns := fs.Int("latency-turns", 0, fmt.Sprintf("turns per rollout of the latency scenario (default %d)", def.LatencyTurns))
	sizes := fs.String("sizes", "", "comma-separated set sizes to checkpoint and restore (default 100,1000)")
	queued := fs.String("queued-sizes", "", "comma-separated sizes of busy sets submitted through their admission (default 1000; -quick 300)")
	maxInFlight := fs.Int("max-in-flight", 0, fmt.Sprintf("max_in_flight of the queued sets (default %d, the trainer's; -quick 64)", trainer.DefaultMaxInFlight))
	fs.BoolVar(&o.with10k, "with-10k", false, "queued sets of 1,000 and 10,000 submitted through their admission (tens of minutes on 2 cores)")
	only := fs.String("only", "", "comma-separated scenarios to run: "+strings.Join(bench.Scenarios, ", ")+" (default all, and "+bench.ScenarioAdmission+" but with -quick or -smoke)")
	levels := fs.String("admission-levels", "", "admission scenario: comma-separated max_in_flight values (default 64,128,256)")
	admSubmitted := fs.Int("admission-submitted", 0, "admission scenario: short rollouts submitted per level (default 512)")
	pollers := fs.String("admission-pollers", "", "admission scenario: comma-separated worker poller settings to compare, "+bench.PollersFixed+" and "+bench.PollersAutoscaling+" (default: the worker's own)")
	cpuProfile := fs.Bool("cpuprofile", false, "write a CPU profile of each start of the turnstile worker to OUT/worker-<start>.pprof")
	timeout := fs.Duration("checkpoint-timeout", 0, fmt.Sprintf("deadline of each checkpoint's cut (default %s)", def.CheckpointTimeout))
	cli.SetUsage(fs, "Measures turnstile against a lean two-activity Temporal loop (and a padded one) on a dev server it starts, and prints the ratios.", []cli.Setting{
		{Env: "TURNSTILE_TEMPORAL_BIN", Meaning: "Temporal CLI binary"},
	})
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch {
	case *quick && *smoke:
		return options{}, fmt.Errorf("-quick and -smoke: give one")
	case *quick:
		o.cfg = bench.Quick()
	case *smoke:
		o.cfg = bench.Smoke()
	default:
		o.cfg = def
	}
	o.cfg.BinDir, o.cfg.CPUProfile, o.cfg.OutDir = *binDir, *cpuProfile, *out
	setPositive(&o.cfg.Concurrency, *conc)
	setPositive(&o.cfg.ThroughputTurns, *tturns)
	setPositive(&o.cfg.LatencyTurns, *lturns)
	if *timeout > 0 {
		o.cfg.CheckpointTimeout = *timeout
	}
	if *sizes != "" {
		n, err := parseSizes("-sizes", *sizes)
		if err != nil {
			return options{}, err
		}
		o.cfg.CheckpointSizes = n
	}
	if err := admissionFlags(&o, *queued, *maxInFlight, *levels, *admSubmitted, *pollers); err != nil {
		return options{}, err
	}
	if *only != "" {
		o.cfg.Only = strings.Split(*only, ",")
	}
	return o, nil
}

// admissionFlags applies the flags of the queued sets and of the
// admission scenario.
func admissionFlags(o *options, queued string, maxInFlight int, levels string, submitted int, pollers string) error {
	if queued != "" {
		n, err := parseSizes("-queued-sizes", queued)
		if err != nil {
			return err
		}
		o.cfg.QueuedSizes = n
	}
	if o.with10k {
		o.cfg.QueuedSizes = []int{1000, 10000}
	}
	if maxInFlight < 0 {
		return fmt.Errorf("-max-in-flight %d: want a positive count", maxInFlight)
	}
	setPositive(&o.cfg.MaxInFlight, maxInFlight)
	if levels != "" {
		n, err := parseSizes("-admission-levels", levels)
		if err != nil {
			return err
		}
		o.cfg.AdmissionLevels = n
	}
	setPositive(&o.cfg.AdmissionSubmitted, submitted)
	if pollers != "" {
		o.cfg.AdmissionPollers = strings.Split(pollers, ",")
	}
	return nil
}

func setPositive(dst *int, v int) {
	if v > 0 {
		*dst = v
	}
}

func parseSizes(flag, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s: %q is not a positive count", flag, f)
		}
		out = append(out, n)
	}
	return out, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return cli.Usage(err)
	}
	cfg := o.cfg
	cfg.DevConfig = filepath.Join(o.projectDir, devenv.DefaultConfigFile)
	if cfg.OutDir == "" {
		cfg.OutDir = filepath.Join(o.projectDir, ".turnstile", "bench", time.Now().Format("20060102-150405"))
	}
	if cfg.OutDir, err = filepath.Abs(cfg.OutDir); err != nil {
		return err
	}
	cfg.Temporal = "temporal" // checked once the flags are known good
	if err := cfg.Validate(); err != nil {
		return cli.Usage(err)
	}
	if cfg.Temporal = o.temporal; cfg.Temporal == "" {
		if cfg.Temporal, err = devenv.EnsureCLI(ctx, o.projectDir); err != nil {
			return err
		}
	}
	cfg.Log = func(format string, a ...any) {
		fmt.Fprintf(stderr, "[bench %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
	}
	cfg.Log("output in %s", cfg.OutDir)
	rep, err := bench.Run(ctx, cfg)
	if rep != nil {
		fmt.Fprintln(stdout)
		bench.PrintTable(stdout, rep)
		fmt.Fprintf(stdout, "\nwrote %s, %s and %s in %s\n", bench.JSONFile, bench.CSVFile, bench.SVGFile, cfg.OutDir)
	}
	return err
}

// floorWorker runs the floor's worker until interrupted.
func floorWorker(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench "+bench.FloorWorkerCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("address", "127.0.0.1:7233", "Temporal frontend")
	queue := fs.String("task-queue", "bench-floor", "task queue")
	if err := fs.Parse(args); err != nil {
		return cli.Usage(err)
	}
	stop := make(chan any)
	go func() {
		<-ctx.Done()
		close(stop)
	}()
	return bench.RunFloorWorker(*addr, *queue, stop)
}
