package repocheck_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/repocheck"
)

// TestTrackedFiles is the check `make test` runs over the repository.
func TestTrackedFiles(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	entries, err := repocheck.Tracked(root)
	require.NoError(t, err)
	require.NotEmpty(t, entries, "git tracks no file in %s", root)
	problems := repocheck.Check(entries)
	require.Empty(t, problems, "tracked files that do not belong in the repository:\n%s", strings.Join(problems, "\n"))
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name  string
		entry repocheck.Entry
		want  string // "" = no problem
	}{
		{"small source", repocheck.Entry{Path: "cmd/worker/main.go", Size: 4000}, ""},
		{"exactly the limit", repocheck.Entry{Path: "data.json", Size: repocheck.MaxBytes}, ""},
		{"over the limit", repocheck.Entry{Path: "starter", Size: 62 << 20}, "starter: 65011712 bytes"},
		{"script", repocheck.Entry{Path: "scripts/demo.sh", Size: 10, Executable: true}, ""},
		{"ci entry point", repocheck.Entry{Path: ".ci/run", Size: 10, Executable: true}, ""},
		{"a hook", repocheck.Entry{Path: "tools/hooks/pre-commit", Size: 10, Executable: true}, ""},
		{"binary at the root", repocheck.Entry{Path: "worker", Size: 10, Executable: true}, "worker: executable outside"},
		{"executable test data", repocheck.Entry{Path: "integration/testdata/gen.sh", Size: 10, Executable: true}, "gen.sh: executable outside"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			problems := repocheck.Check([]repocheck.Entry{tt.entry})
			if tt.want == "" {
				require.Empty(t, problems)
				return
			}
			require.Len(t, problems, 1)
			require.Contains(t, problems[0], tt.want)
		})
	}
}
