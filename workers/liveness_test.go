package workers_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/activities/coordinator"
	"github.com/turnstile-rl/turnstile/workers"
)

// TestLivenessFromEnvironment: the bounds on a hung participant are read
// from the environment, default to the coordinator's, and a bad value is
// an error naming its variable; the coordinator gets what was read.
func TestLivenessFromEnvironment(t *testing.T) {
	def := workers.Liveness{Probe: coordinator.DefaultLiveness, AbortResumeWindow: coordinator.DefaultAbortResumeWindow}
	tests := []struct {
		name    string
		env     map[string]string
		want    workers.Liveness
		wantErr string
	}{
		{name: "unset: the coordinator's defaults", env: map[string]string{}, want: def},
		{name: "every field", env: map[string]string{
			workers.EnvProbeEvery: "2s", workers.EnvProbeTimeout: " 1s ", workers.EnvProbeMisses: "4", workers.EnvAbortResumeWindow: "1m",
		}, want: workers.Liveness{Probe: coordinator.Liveness{Every: 2 * time.Second, Timeout: time.Second, Misses: 4}, AbortResumeWindow: time.Minute}},
		{name: "blank is unset", env: map[string]string{workers.EnvProbeEvery: "  "}, want: def},
		{name: "not a duration", env: map[string]string{workers.EnvProbeEvery: "10"}, wantErr: workers.EnvProbeEvery},
		{name: "zero", env: map[string]string{workers.EnvAbortResumeWindow: "0s"}, wantErr: workers.EnvAbortResumeWindow},
		{name: "typo-sized", env: map[string]string{workers.EnvProbeTimeout: "300h"}, wantErr: workers.EnvProbeTimeout},
		{name: "misses not a number", env: map[string]string{workers.EnvProbeMisses: "three"}, wantErr: workers.EnvProbeMisses},
		{name: "misses zero", env: map[string]string{workers.EnvProbeMisses: "0"}, wantErr: workers.EnvProbeMisses},
		{name: "a probe longer than its period", env: map[string]string{workers.EnvProbeEvery: "1s", workers.EnvProbeTimeout: "2s"}, wantErr: workers.EnvProbeTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{workers.EnvTranscriptDir: t.TempDir()}
			for k, v := range tt.env {
				env[k] = v
			}
			cfg, err := workers.ConfigFromLookup(lookup(env))
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, cfg.Liveness)
			coord := workers.NewCoordinator(nil, cfg, &workers.Activities{})
			require.Equal(t, tt.want.Probe, coord.Liveness)
			require.Equal(t, tt.want.AbortResumeWindow, coord.AbortResumeWindow)
		})
	}
}
