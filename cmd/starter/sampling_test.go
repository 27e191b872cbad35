package main

import (
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// parseSampling parses args as submit's sampling flags.
func parseSampling(t *testing.T, args ...string) (*rollout.Sampling, error) {
	t.Helper()
	var s samplingFlags
	cmd := &cobra.Command{}
	s.register(cmd.Flags())
	require.NoError(t, cmd.Flags().Parse(args))
	return s.sampling(cmd)
}

// Only the sampling flags given reach the rollouts; none given leaves the
// endpoint's defaults (no sampling object at all).
func TestSamplingFlags(t *testing.T) {
	got, err := parseSampling(t)
	require.NoError(t, err)
	require.Nil(t, got)

	got, err = parseSampling(t, "--temperature", "0", "--max-tokens", "64", "--capture-tokens", "--extra-body", `{"top_k":20}`)
	require.NoError(t, err)
	require.NotNil(t, got.Temperature, "an explicit 0 is sent, not dropped")
	require.Zero(t, *got.Temperature)
	require.Equal(t, int64(64), *got.MaxTokens)
	require.Nil(t, got.TopP)
	require.True(t, got.CaptureTokens)
	require.JSONEq(t, `20`, string(got.ExtraBody["top_k"]))

	for _, bad := range [][]string{{"--top-p", "3"}, {"--extra-body", "[1]"}, {"--max-tokens", "-1"}} {
		_, err := parseSampling(t, bad...)
		require.Error(t, err, "%v", bad)
	}
}
