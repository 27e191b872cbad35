package cli_test

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/turnstile-rl/turnstile/cmd/internal/cli"
)

func TestExitCodes(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"success", nil, 0},
		{"help", flag.ErrHelp, 0},
		{"bad flag", cli.Usage(errors.New("flag provided but not defined: -x")), 2},
		{"wrapped usage", fmt.Errorf("parse: %w", cli.Usage(errors.New("bad"))), 2},
		{"runtime", errors.New("listen: address in use"), 1},
		{"cobra unknown command", cli.CobraUsage(errors.New(`unknown command "nope" for "starter"`)), 2},
		{"cobra required flag", cli.CobraUsage(errors.New(`required flag(s) "set" not set`)), 2},
		{"cobra runtime", cli.CobraUsage(errors.New("set s1: no worker polls")), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := cli.ExitCode(tt.err); got != tt.want {
				t.Fatalf("ExitCode(%v) = %d, want %d", tt.err, got, tt.want)
			}
		})
	}
	if cli.Usage(flag.ErrHelp) != flag.ErrHelp || cli.Usage(nil) != nil {
		t.Fatal("Usage must pass nil and flag.ErrHelp through")
	}
}

func TestUsageListsFlagsAndEnvironment(t *testing.T) {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	var b strings.Builder
	fs.SetOutput(&b)
	fs.String("listen", "127.0.0.1:1", "address to listen on")
	cli.SetUsage(fs, "Serves a demo.", []cli.Setting{{Env: "DEMO_TOKEN", Meaning: "bearer token"}})
	if err := fs.Parse([]string{"--help"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("parse --help: %v", err)
	}
	for _, want := range []string{"Usage: demo [flags]", "Serves a demo.", "-listen", "DEMO_TOKEN", "bearer token (default empty)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, b.String())
		}
	}
	if code := cli.Report(io.Discard, "demo", flag.ErrHelp); code != 0 {
		t.Fatalf("Report(help) = %d", code)
	}
}
