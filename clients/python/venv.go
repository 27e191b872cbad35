// Package python is the Go side of the Python client of the gateway
// (turnstile/, installed with pip from pyproject.toml): Install puts the
// client into a fresh virtual environment, offline, for the Go tests that
// run Python against it. Its own test runs the client's unit tests
// (standard library unittest, against an in-process fake gateway) on the
// installed client, so `go test ./...` and `make test` cover them.
package python

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Venv is a virtual environment with the client installed.
type Venv struct {
	Dir    string // the environment
	Python string // its interpreter
}

// InstallArgs are pip's arguments after `python -m pip` that install the
// client from its source folder src: --no-index keeps pip off every package
// index (the build needs none: see pyproject.toml), so a machine without
// network access installs it as any other does.
func InstallArgs(src string) []string {
	return []string{"install", "--no-index", "--no-input", "--disable-pip-version-check", src}
}

// Install creates a virtual environment in dir with python3 (the
// interpreter to create it with) and installs the client from src, the
// clients/python folder, into it. The error carries the failing command's
// output.
func Install(ctx context.Context, python3, src, dir string) (*Venv, error) {
	src, err := filepath.Abs(src)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(src, "pyproject.toml")); err != nil {
		return nil, fmt.Errorf("the client's source: %w", err)
	}
	v := &Venv{Dir: dir, Python: filepath.Join(dir, "bin", "python")}
	if runtime.GOOS == "windows" {
		v.Python = filepath.Join(dir, "Scripts", "python.exe")
	}
	if err := v.run(ctx, python3, "-m", "venv", dir); err != nil {
		return nil, err
	}
	if err := v.run(ctx, v.Python, append([]string{"-m", "pip"}, InstallArgs(src)...)...); err != nil {
		return nil, err
	}
	return v, nil
}

// run runs a command in the environment's folder, which holds no source of
// the client, with no bytecode written (the build imports its backend from
// the source folder).
func (v *Venv) run(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = filepath.Dir(v.Dir)
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}
