package trainer_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/trainer"
)

func TestLogProgressPrintsEachTenth(t *testing.T) {
	var b strings.Builder
	p := trainer.NewLogProgress(&b, 25)
	for range 25 {
		p.Increment()
	}
	p.Finish(true)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	require.Len(t, lines, 10, "one line per tenth of the set")
	require.Equal(t, "closed 3/25 rollouts", lines[0])
	require.Equal(t, "closed 25/25 rollouts", lines[9])
}
