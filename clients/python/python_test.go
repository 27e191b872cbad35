// Package python holds no Go code: its test runs the Python client's unit
// tests (standard library unittest, against an in-process fake gateway), so
// `go test ./...` and `make test` cover them.
package python

import (
	"os/exec"
	"testing"
)

func TestPythonUnitTests(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed: the Python client's unit tests did not run")
	}
	cmd := exec.Command(py, "-m", "unittest", "discover", "-s", "tests", "-t", ".", "-v")
	cmd.Env = append(cmd.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -m unittest: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
