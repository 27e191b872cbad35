package soak

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseMetrics(t *testing.T) {
	tests := []struct {
		name, text string
		want       map[string]float64
		err        string
	}{
		{
			name: "both present, labelled and help lines ignored",
			text: "# HELP go_goroutines Number of goroutines.\n# TYPE go_goroutines gauge\ngo_goroutines 42\n" +
				"go_gc_duration_seconds{quantile=\"0\"} 1e-05\nprocess_resident_memory_bytes 1.2345e+07\n",
			want: map[string]float64{"go_goroutines": 42, "process_resident_memory_bytes": 1.2345e7},
		},
		{name: "one missing", text: "go_goroutines 42\n", err: "process_resident_memory_bytes missing"},
		{name: "not a number", text: "go_goroutines many\nprocess_resident_memory_bytes 1\n", err: "metric go_goroutines"},
		{name: "empty value skipped", text: "go_goroutines \ngo_goroutines 7\nprocess_resident_memory_bytes 1\n",
			want: map[string]float64{"go_goroutines": 7, "process_resident_memory_bytes": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseMetrics(strings.NewReader(tt.text), metricGoroutines, metricRSS)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestValidate(t *testing.T) {
	ok := Defaults()
	ok.BinDir, ok.TemporalCLI, ok.DevConfig, ok.OutDir = "bin", "temporal", "temporal-dev.yaml", "out"
	require.NoError(t, ok.Validate())
	tests := []struct {
		name   string
		change func(*Config)
		err    string
	}{
		{"no bin dir", func(c *Config) { c.BinDir = "" }, "bin dir"},
		{"zero duration", func(c *Config) { c.Duration = 0 }, "duration"},
		{"concurrency above max", func(c *Config) { c.MaxRollouts = c.Concurrency - 1 }, "concurrency"},
		{"no environments", func(c *Config) { c.Envs = nil }, "no environments"},
		{"zero checkpoint interval", func(c *Config) { c.CheckpointEvery = 0 }, "intervals"},
		{"negative down time", func(c *Config) { c.WorkerDownFor = -time.Second }, "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.change(&c)
			require.ErrorContains(t, c.Validate(), tt.err)
		})
	}
}

// samples builds load samples of one process from (RSS MiB, goroutines)
// pairs, a minute apart.
func samples(proc string, pts ...[2]int64) []Sample {
	var out []Sample
	for i, p := range pts {
		out = append(out, Sample{At: time.Duration(i+1) * time.Minute, Phase: "load", Proc: proc, RSS: p[0] << 20, Goroutines: p[1]})
	}
	return out
}

func TestCheckFlat(t *testing.T) {
	tests := []struct {
		name    string
		samples []Sample
		want    string // a problem that must be reported; "" for none
	}{
		{"flat", samples("worker-0", [2]int64{80, 200}, [2]int64{90, 250}, [2]int64{85, 210}), ""},
		{"warm cache within bounds", samples("env-0", [2]int64{30, 15}, [2]int64{100, 200}), ""},
		{"memory leak", samples("env-1", [2]int64{30, 15}, [2]int64{60, 20}, [2]int64{200, 20}), "env-1: RSS grew"},
		{"goroutine leak", samples("policy", [2]int64{20, 50}, [2]int64{20, 400}), "policy: goroutines grew"},
		{"one sample is not judged", samples("worker-1", [2]int64{20, 50}), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &run{}
			r.report.Samples = tt.samples
			r.checkFlat()
			if tt.want == "" {
				require.Empty(t, r.report.Problems)
				return
			}
			require.Len(t, r.report.Problems, 1)
			require.Contains(t, r.report.Problems[0], tt.want)
		})
	}
}

func TestPrintAndChart(t *testing.T) {
	rep := &Report{
		Set: "soak-1", Config: Defaults(), Started: 10, Completed: 10, Exported: 10, WorkerKills: 2,
		Checkpoints: []Checkpoint{{ID: "cp1", Members: 10, Parked: 9, Took: 3 * time.Second}, {ID: "cp2", Err: "deadline", Resumed: 7}},
		Envs:        []EnvCounters{{Name: "env-0", Applied: 40, Want: 40}},
		Samples:     append(samples("worker-0", [2]int64{80, 200}, [2]int64{90, 250}), samples("env-0", [2]int64{30, 15}, [2]int64{31, 16})...),
		Problems:    []string{"env-0 applied 41 mutations"},
	}
	var out strings.Builder
	rep.Print(&out)
	for _, want := range []string{"10 started, 10 completed, 10 exported", "2 worker SIGKILLs", "1 committed, 1 failed",
		"checkpoint cp2 failed after 0s (then resumed: 7 rollouts): deadline", "env-0: applied 40 (results account for 40)", "FAIL: 1 problems", "env-0 applied 41 mutations"} {
		require.Contains(t, out.String(), want)
	}
	require.ErrorContains(t, rep.Err(), "env-0 applied 41")
	svg := Chart(rep)
	require.Equal(t, 4, strings.Count(svg, "<polyline"), "RSS and goroutines of two processes")
	require.Contains(t, svg, "worker-0")
	require.Contains(t, Chart(&Report{}), "no samples")
}
