package rollout_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

func TestValidateSet(t *testing.T) {
	for _, ok := range []string{"s1", "a.b_c-d", strings.Repeat("x", rollout.MaxSetLen)} {
		require.NoError(t, rollout.ValidateSet(ok), ok)
	}
	for _, bad := range []string{"", "-s", ".s", "a/b", "..", `a"b`, "a b", strings.Repeat("x", rollout.MaxSetLen+1)} {
		require.ErrorContains(t, rollout.ValidateSet(bad), "want 1-100 letters", bad)
	}
}
