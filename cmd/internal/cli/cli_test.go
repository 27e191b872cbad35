package cli_test

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
			got := cli.ExitCode(tt.err)
			require.Equal(t, tt.want, got, "ExitCode(%v) = %d, want %d", tt.err, got, tt.want)
		})
	}
	require.True(t, cli.Usage(flag.ErrHelp) == flag.ErrHelp, "Usage must pass nil and flag.ErrHelp through")
	require.NoError(t, cli.Usage(nil), "Usage must pass nil and flag.ErrHelp through")
}

func TestUsageListsFlagsAndEnvironment(t *testing.T) {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	var b strings.Builder
	fs.SetOutput(&b)
	fs.String("listen", "127.0.0.1:1", "address to listen on")
	cli.SetUsage(fs, "Serves a demo.", []cli.Setting{{Env: "DEMO_TOKEN", Meaning: "bearer token"}})
	err := fs.Parse([]string{"--help"})
	require.ErrorIs(t, err, flag.ErrHelp, "parse --help: %v", err)
	for _, want := range []string{"Usage: demo [flags]", "Serves a demo.", "-listen", "DEMO_TOKEN", "bearer token (default empty)"} {
		assert.Contains(t, b.String(), want, "usage lacks %q:\n%s", want, b.String())
	}
	require.Equal(t, 0, cli.Report(io.Discard, "demo", flag.ErrHelp), "Report(help)")
}
