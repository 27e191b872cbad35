// Command devserver starts the Temporal dev server with the settings of
// temporal-dev.yaml:
//
//	go run ./cmd/devserver [--config temporal-dev.yaml] [--env dev] [--port N]
//	    [--ui-port N] [--http-port N] [--metrics-port N] [--db-filename F]
//	    [--headless] [--print-flags]
//
// It makes sure a Temporal CLI is available (building it into ./bin the first
// time), runs `temporal server start-dev` with the flags derived from the
// file, forwards SIGINT/SIGTERM to it and exits with its exit code.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	"github.com/turnstile-rl/turnstile/cmd/internal/cli"
	"github.com/turnstile-rl/turnstile/internal/devenv"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// options are the command-line flags.
type options struct {
	config     string
	env        string
	overrides  devenv.Overrides
	printFlags bool
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	var headless bool
	fs := flag.NewFlagSet("devserver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.config, "config", devenv.DefaultConfigFile, "settings file")
	fs.StringVar(&o.env, "env", devenv.DefaultEnv, "environment name in the settings file")
	fs.IntVar(&o.overrides.Port, "port", 0, "frontend gRPC port (default: from the settings file)")
	fs.IntVar(&o.overrides.UIPort, "ui-port", 0, "Web UI port (default: from the settings file; empty there = port + 1000)")
	fs.IntVar(&o.overrides.MetricsPort, "metrics-port", 0, "Prometheus metrics port (default: from the settings file; empty there = a free port the CLI picks)")
	fs.IntVar(&o.overrides.HTTPPort, "http-port", 0, "HTTP API port (default: from the settings file; empty there = a free port the CLI picks)")
	fs.StringVar(&o.overrides.DBFilename, "db-filename", "", "SQLite file for persistent state (default: from the settings file; empty there = in-memory)")
	fs.BoolVar(&headless, "headless", false, "start without the Web UI")
	fs.StringVar(&o.overrides.LogLevel, "log-level", "", "server log level (default: from the settings file)")
	fs.BoolVar(&o.printFlags, "print-flags", false, "print the temporal command line and exit")
	cli.SetUsage(fs, "Starts the Temporal dev server from the settings file (namespace, ports, search attributes, dynamic config),\n"+
		"installing the pinned Temporal CLI into ./bin first when temporal is not on PATH. It reads no environment variables.", nil)
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	// Only an explicit --headless overrides the file; its absence keeps the
	// file's "ui" setting.
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "headless" {
			o.overrides.Headless = &headless
		}
	})
	return o, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "devserver:", err)
		return 2
	}
	cfg, err := devenv.Load(o.config)
	if err != nil {
		fmt.Fprintln(stderr, "devserver:", err)
		return 2
	}
	startArgs, err := cfg.StartDevArgs(o.env, o.overrides)
	if err != nil {
		fmt.Fprintln(stderr, "devserver:", err)
		return 2
	}
	if o.printFlags {
		fmt.Fprintln(stdout, shellJoin(append([]string{devenv.CLIBinary}, startArgs...)))
		return 0
	}

	// The settings file sits at the project root, so ./bin is beside it.
	absConfig, err := filepath.Abs(o.config)
	if err != nil {
		fmt.Fprintln(stderr, "devserver:", err)
		return 1
	}
	// Signals during the (long) first install stop the install.
	installCtx, stopInstall := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	cli, err := devenv.EnsureCLI(installCtx, filepath.Dir(absConfig))
	stopInstall()
	if err != nil {
		fmt.Fprintln(stderr, "devserver:", err)
		return 1
	}
	return serve(cli, startArgs, stdout, stderr)
}

// serve runs the dev server in the foreground until it exits.
func serve(cli string, args []string, stdout, stderr io.Writer) int {
	// Register before starting the child, so no signal falls between the two.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	cmd := exec.Command(cli, args...)
	cmd.Stdin = nil
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	fmt.Fprintln(stderr, "devserver:", shellJoin(append([]string{cli}, args...)))
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(stderr, "devserver: start temporal:", err)
		return 1
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case sig := <-sigs:
			// The server shuts down cleanly on SIGINT/SIGTERM; we wait for it.
			if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
				fmt.Fprintln(stderr, "devserver: forward signal:", err)
			}
		case err := <-done:
			return exitCode(err, stderr)
		}
	}
}

func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		if status, ok := exitErr.Sys().(syscall.WaitStatus); ok && status.Signaled() {
			fmt.Fprintln(stderr, "devserver: temporal killed by", status.Signal())
			return 128 + int(status.Signal())
		}
		return exitErr.ExitCode()
	}
	fmt.Fprintln(stderr, "devserver:", err)
	return 1
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

// shellJoin quotes args so the printed line can be pasted into a shell.
func shellJoin(args []string) string {
	quoted := make([]string, len(args))
	for i, a := range args {
		if shellSafe.MatchString(a) {
			quoted[i] = a
		} else {
			quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(quoted, " ")
}
