package cpuprofile

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStartWritesAProfileUntilStopped(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.pprof")
	stop, err := Start(path)
	require.NoError(t, err)
	stop()
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Positive(t, st.Size(), "a stopped profile is written")
}

func TestStartWithoutAPathProfilesNothing(t *testing.T) {
	stop, err := Start("")
	require.NoError(t, err)
	stop()
}

func TestStartNamesAnUnwritablePath(t *testing.T) {
	_, err := Start(filepath.Join(t.TempDir(), "missing", "cpu.pprof"))
	require.ErrorContains(t, err, "missing")
}
