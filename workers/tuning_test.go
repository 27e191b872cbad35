package workers_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/workers"
)

func TestTuningFromEnvironment(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    workers.Tuning
		wantErr string
	}{
		{name: "unset: the SDK's defaults", env: map[string]string{}, want: workers.Tuning{}},
		{name: "every field", env: map[string]string{
			workers.EnvWorkflowTaskPollers: "8", workers.EnvActivityTaskPollers: " 4 ",
			workers.EnvWorkflowTaskSlots: "500", workers.EnvActivitySlots: "600",
			workers.EnvLocalActivitySlots: "700", workers.EnvStickyCacheSize: "20000",
			workers.EnvPollerAutoscaling: "true",
		}, want: workers.Tuning{
			WorkflowTaskPollers: 8, ActivityTaskPollers: 4, WorkflowTaskSlots: 500, ActivitySlots: 600,
			LocalActivitySlots: 700, StickyCacheSize: 20000, PollerAutoscaling: true,
		}},
		{name: "blank is unset", env: map[string]string{workers.EnvWorkflowTaskPollers: "  "}, want: workers.Tuning{}},
		{name: "zero", env: map[string]string{workers.EnvWorkflowTaskPollers: "0"}, wantErr: workers.EnvWorkflowTaskPollers},
		{name: "negative", env: map[string]string{workers.EnvActivitySlots: "-1"}, wantErr: workers.EnvActivitySlots},
		{name: "not a number", env: map[string]string{workers.EnvStickyCacheSize: "lots"}, wantErr: workers.EnvStickyCacheSize},
		{name: "typo-sized", env: map[string]string{workers.EnvLocalActivitySlots: "10000000"}, wantErr: workers.EnvLocalActivitySlots},
		{name: "autoscaling not a bool", env: map[string]string{workers.EnvPollerAutoscaling: "sometimes"}, wantErr: workers.EnvPollerAutoscaling},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{workers.EnvTranscriptDir: t.TempDir()}
			for k, v := range tt.env {
				env[k] = v
			}
			cfg, err := workers.ConfigFromLookup(lookup(env))
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr, "err = %v, want one naming %s", err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, cfg.Tuning, "Tuning = %+v, want %+v", cfg.Tuning, tt.want)
		})
	}
}
