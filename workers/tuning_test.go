package workers_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/activities/model"
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

func TestPrefixSettingsFromEnvironment(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    workers.PrefixSettings
		wantErr string
	}{
		{name: "unset: the model package's defaults", env: map[string]string{}, want: workers.PrefixSettings{}},
		{name: "both", env: map[string]string{workers.EnvModelPrefixTokens: " 16 ", workers.EnvModelPrefixInterval: "500ms"},
			want: workers.PrefixSettings{Tokens: 16, Interval: 500 * time.Millisecond}},
		{name: "strict bound", env: map[string]string{workers.EnvModelPrefixBound: " strict "}, want: workers.PrefixSettings{Bound: model.PrefixBoundStrict}},
		{name: "bound off", env: map[string]string{workers.EnvModelPrefixBound: "off"}, want: workers.PrefixSettings{Bound: model.PrefixBoundOff}},
		{name: "unknown bound", env: map[string]string{workers.EnvModelPrefixBound: "loose"}, wantErr: workers.EnvModelPrefixBound},
		{name: "zero tokens", env: map[string]string{workers.EnvModelPrefixTokens: "0"}, wantErr: workers.EnvModelPrefixTokens},
		{name: "tokens not a number", env: map[string]string{workers.EnvModelPrefixTokens: "many"}, wantErr: workers.EnvModelPrefixTokens},
		{name: "interval without unit", env: map[string]string{workers.EnvModelPrefixInterval: "2"}, wantErr: workers.EnvModelPrefixInterval},
		{name: "negative interval", env: map[string]string{workers.EnvModelPrefixInterval: "-1s"}, wantErr: workers.EnvModelPrefixInterval},
		{name: "interval too long", env: map[string]string{workers.EnvModelPrefixInterval: "1h"}, wantErr: workers.EnvModelPrefixInterval},
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
			require.Equal(t, tt.want, cfg.Prefix)
		})
	}
}
