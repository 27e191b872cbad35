package integration_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	pyclient "github.com/turnstile-rl/turnstile/clients/python"
)

// clientVenv is the virtual environment with the Python client installed,
// made once per test binary (in bins.dir, removed with it).
var clientVenv struct {
	once   sync.Once
	python string
	err    error
}

// clientPython returns the python of a virtual environment with the client
// (clients/python) installed, as a trainer would have it; it skips the test
// without python3, and fails it when the environment cannot be made.
func clientPython(t testing.TB) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed: the Python client cannot run")
	}
	clientVenv.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		start := time.Now()
		v, err := pyclient.Install(ctx, py, filepath.Join(bins.root, "clients", "python"), filepath.Join(bins.dir, "python-client"))
		if err != nil {
			clientVenv.err = err
			return
		}
		clientVenv.python = v.Python
		t.Logf("the Python client installed into a venv in %s", time.Since(start).Round(10*time.Millisecond))
	})
	require.NoError(t, clientVenv.err, "installing the Python client into a venv")
	return clientVenv.python
}
