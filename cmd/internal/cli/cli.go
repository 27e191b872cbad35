// Package cli is the one convention of the turnstile binaries' command
// lines, so an operator and a script can rely on it: --help prints the usage
// (settings and their environment variables) and exits 0; a bad flag or
// argument prints the error and the usage and exits 2; a failure at run
// time exits 1.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/turnstile-rl/turnstile/internal/artifact"
	"github.com/turnstile-rl/turnstile/internal/httpserver"
)

// Exit codes.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

// UsageError is a command line that cannot run: a bad flag, a bad value, an
// unexpected argument.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Usage marks err (a flag-parsing or validation error) as a usage error;
// nil and flag.ErrHelp pass through unchanged.
func Usage(err error) error {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	return UsageError{Err: err}
}

// CobraUsage marks the errors cobra finds in a command line before a
// command runs (unknown command or flag, missing required flag, bad
// arguments) as usage errors; cobra gives them no type of their own, only
// these messages.
func CobraUsage(err error) error {
	if err == nil {
		return nil
	}
	for _, prefix := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "required flag", "accepts ", "invalid argument"} {
		if strings.HasPrefix(err.Error(), prefix) {
			return Usage(err)
		}
	}
	return err
}

// ExitCode is the exit status for err.
func ExitCode(err error) int {
	var ue UsageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.As(err, &ue):
		return ExitUsage
	default:
		return ExitFailure
	}
}

// Report prints err the way the binaries do ("name: err"; the usage was
// already printed by the flag set for a bad flag) and returns its exit code.
func Report(w io.Writer, name string, err error) int {
	code := ExitCode(err)
	if code != ExitOK {
		fmt.Fprintf(w, "%s: %v\n", name, err)
	}
	return code
}

// Setting is one environment variable a binary reads, for its usage text.
type Setting struct {
	Env, Default, Meaning string
}

// SetUsage makes fs's usage text a summary line, the flags, and the
// environment variables the binary reads.
func SetUsage(fs *flag.FlagSet, summary string, env []Setting) {
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: %s [flags]\n\n%s\n", fs.Name(), summary)
		var n int
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n > 0 {
			fmt.Fprintf(w, "\nFlags:\n")
			fs.PrintDefaults()
		}
		if len(env) > 0 {
			fmt.Fprintf(w, "\nEnvironment:\n")
			for _, s := range env {
				def := s.Default
				if def == "" {
					def = "empty"
				}
				fmt.Fprintf(w, "  %s\n    \t%s (default %s)\n", s.Env, s.Meaning, def)
			}
		}
	}
}

// HTTPSettings are the environment variables of a server's HTTP timeouts
// (package httpserver), for a usage text.
func HTTPSettings() []Setting {
	var out []Setting
	for _, s := range httpserver.Settings() {
		out = append(out, Setting{Env: s.Env, Default: s.Default, Meaning: s.Meaning})
	}
	return out
}

// CheckpointSettings are the environment variables of a process that
// reads and writes checkpoints (package artifact), for a usage text.
func CheckpointSettings() []Setting {
	size := func(n int64) string { return fmt.Sprintf("%d MiB", n>>20) }
	return []Setting{
		{Env: artifact.EnvMaxManifestBytes, Default: size(artifact.DefaultMaxManifestBytes), Meaning: "bound on a checkpoint manifest read"},
		{Env: artifact.EnvMaxIndexBytes, Default: size(artifact.DefaultMaxIndexBytes), Meaning: "bound on a checkpoint section index read"},
		{Env: artifact.EnvMaxRecordBytes, Default: size(artifact.DefaultMaxRecordBytes), Meaning: "bound on one checkpoint record read"},
		{Env: artifact.EnvKeyFile, Meaning: "file with the key checkpoint manifests are signed and checked with (HMAC-SHA256; empty: unsigned)"},
	}
}
