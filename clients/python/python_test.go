package python

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPythonUnitTests installs the client into a fresh virtual environment
// and runs its unit tests there, from a folder where the source package is
// not importable: the tests see what `pip install` installs.
func TestPythonUnitTests(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed: the Python client's unit tests did not run")
	}
	src, err := filepath.Abs(".")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	v, err := Install(ctx, py, src, filepath.Join(t.TempDir(), "venv"))
	require.NoError(t, err, "installing the client into a fresh venv (offline) failed, so its tests cannot run")
	t.Logf("venv with the client installed in %s", time.Since(start).Round(10*time.Millisecond))

	work := t.TempDir() // the tests' working folder: no turnstile/ there
	cmd := exec.CommandContext(ctx, v.Python, "-c",
		"import sysconfig, turnstile; print(sysconfig.get_path('purelib')); print(turnstile.__file__)")
	cmd.Dir = work
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "importing the installed client: %v\n%s", err, out)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, 2, "want site-packages and turnstile.__file__, got:\n%s", out)
	site, file := lines[0], lines[1]
	require.True(t, within(v.Dir, site), "turnstile imports from %s, not from the venv's site-packages %s (venv %s)", file, site, v.Dir)
	require.True(t, within(filepath.Join(site, "turnstile"), file), "turnstile imports from %s, not from the venv's site-packages %s (venv %s)", file, site, v.Dir)
	t.Logf("turnstile imports from %s", file)

	cmd = exec.CommandContext(ctx, v.Python, "-m", "unittest", "discover", "-s", filepath.Join(src, "tests"), "-v")
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "python -m unittest (the venv's python): %v\n%s", err, out)
	t.Logf("%s", out)
}

// within reports whether path lies inside dir (both with symlinks resolved).
func within(dir, path string) bool {
	dir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return false
	}
	if path, err = filepath.EvalSymlinks(path); err != nil {
		return false
	}
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
