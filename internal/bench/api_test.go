package bench

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConfigValidate(t *testing.T) {
	base := Smoke()
	base.BinDir, base.Temporal, base.DevConfig, base.OutDir = "bin", "temporal", "temporal-dev.yaml", "out"
	tests := []struct {
		name    string
		change  func(*Config)
		wantErr string
	}{
		{"smoke", func(*Config) {}, ""},
		{"no bin dir", func(c *Config) { c.BinDir = "" }, "required"},
		{"one-turn latency", func(c *Config) { c.LatencyTurns = 1 }, "latency"},
		{"no concurrency", func(c *Config) { c.Concurrency = 0 }, "throughput"},
		{"history past the rollout", func(c *Config) { c.HistoryAt = []int{c.HistoryTurns + 1} }, "history at turn"},
		{"jitter above latency", func(c *Config) { c.SlowJitter = 2 * c.SlowPolicy }, "slow policy"},
		{"empty set", func(c *Config) { c.CheckpointSizes = []int{0} }, "checkpoint size"},
		{"unknown scenario", func(c *Config) { c.Only = []string{"speed"} }, `scenario "speed"`},
		{"admission named", func(c *Config) { c.Only = []string{ScenarioAdmission} }, ""},
		{"empty queued set", func(c *Config) { c.QueuedSizes = []int{0} }, "queued set size 0"},
		{"max_in_flight too large", func(c *Config) { c.MaxInFlight = 1 << 30 }, "max_in_flight 1073741824"},
		{"admission level 0", func(c *Config) { c.AdmissionLevels = []int{0} }, "admission level 0"},
		{"admission without levels", func(c *Config) { c.Only, c.AdmissionLevels = []string{ScenarioAdmission}, nil }, "admission: 0 levels"},
		{"full run without levels", func(c *Config) { c.AdmissionByDefault, c.AdmissionLevels = true, nil }, "admission: 0 levels"},
		{"unknown poller setting", func(c *Config) { c.AdmissionPollers = []string{"turbo"} }, `poller setting "turbo"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			tt.change(&c)
			err := c.Validate()
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantErr, "err = %v, want one naming %q", err, tt.wantErr)
		})
	}
}

// The table prints each ratio only where its floor has a figure, turnstile
// against the lean floor and against the floor, and the chart draws both
// panels, its bars against the lean floor.
func TestTableAndChart(t *testing.T) {
	r := &Report{
		Config:  ConfigEcho{Concurrency: 8},
		Latency: &Latency{TurnMS: Pair{Floor: 50, Lean: 20, Turnstile: 40}},
		Through: &Through{TurnsPerSec: Pair{Floor: 20, Lean: 40, Turnstile: 10}, CPUMSPerTurn: map[string]Pair{}},
		Cuts:    []Cut{{Rollouts: 100, ManifestMS: 2000, RestoreMS: 3000}, {Rollouts: 1000, ManifestMS: 9000, RestoreMS: 12000}},
	}
	rows := r.Rows()
	require.Equal(t, 0.8, rows[0].Ratio, "turn: turnstile ÷ floor")
	require.Equal(t, 2.0, rows[0].LeanRatio, "turn: turnstile ÷ lean floor")
	require.Equal(t, 0.25, rows[2].LeanRatio, "throughput: turnstile ÷ lean floor")
	var out bytes.Buffer
	PrintTable(&out, r)
	for _, want := range []string{"÷ lean", "0.80×", "2.00×", "0.50×", "0.25×", "throughput, 8 rollouts", "checkpoint 1000: restore after kill to all running"} {
		assert.Contains(t, out.String(), want, "table lacks %q:\n%s", want, out.String())
	}
	svg := Chart(r)
	for _, want := range []string{"<svg", "turnstile ÷ lean floor", "0.25×", "request → manifest", "1000"} {
		assert.Contains(t, svg, want, "chart lacks %q", want)
	}
}

// A task sample of a large set spreads over it, from the first run to
// finish to near the last, and keeps a small set whole.
func TestEvenlySample(t *testing.T) {
	runs := make([]runTimes, 256)
	for i := range runs {
		runs[i].id = fmt.Sprint(i)
	}
	got := evenly(runs, 64)
	require.Len(t, got, 64, "evenly(256, 64) = %d runs, first %s, second %s, last %s", len(got), got[0].id, got[1].id, got[len(got)-1].id)
	require.Equal(t, "0", got[0].id, "evenly(256, 64) = %d runs, first %s, second %s, last %s", len(got), got[0].id, got[1].id, got[len(got)-1].id)
	require.Equal(t, "4", got[1].id, "evenly(256, 64) = %d runs, first %s, second %s, last %s", len(got), got[0].id, got[1].id, got[len(got)-1].id)
	require.Equal(t, "252", got[63].id, "evenly(256, 64) = %d runs, first %s, second %s, last %s", len(got), got[0].id, got[1].id, got[len(got)-1].id)
	got = evenly(runs[:10], 64)
	require.Len(t, got, 10, "evenly(10, 64) = %d runs, want all 10", len(got))
}
