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
	ok.BinDir, ok.TemporalCLI, ok.Toxiproxy, ok.DevConfig, ok.OutDir = "bin", "temporal", "toxiproxy-server", "temporal-dev.yaml", "out"
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
		{"negative forget-after", func(c *Config) { c.ForgetAfter = -time.Second }, "forget-after must not be negative"},
		{"network faults without toxiproxy", func(c *Config) { c.Toxiproxy = "" }, "Toxiproxy"},
		{"partition as long as the bound", func(c *Config) { c.PartitionFor = c.WatchBound }, "shorter than the watchdog's bound"},
		{"gc grace below the minimum", func(c *Config) { c.GCGrace = time.Minute }, "gc grace"},
		{"keep zero", func(c *Config) { c.Keep = 0 }, "keep 0"},
		{"reset share above one", func(c *Config) { c.ResetShare = 2 }, "reset share"},
		{"env calls give up before a recovery", func(c *Config) { c.EnvCallTimeout = 15 * time.Second }, "env call timeout 15s must cover"},
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

// disk builds load disk samples of the checkpoint root, a minute apart:
// each the checkpoints' sizes (MiB).
func disk(dirs ...[]int64) []DiskSample {
	var out []DiskSample
	for i, sizes := range dirs {
		d := DiskSample{At: time.Duration(i+1) * time.Minute, Phase: "load", Dirs: len(sizes)}
		for _, m := range sizes {
			d.Checkpoints += m << 20
			d.Largest = max(d.Largest, m<<20)
		}
		out = append(out, d)
	}
	return out
}

// sizes is the checkpoints' sizes (MiB) in one disk sample.
func sizes(mibs ...int64) []int64 { return mibs }

func TestCheckFlat(t *testing.T) {
	// Warm-up of 2 minutes: samples at 1 and 2 minutes are the warm-up,
	// from 3 minutes on they must stay flat.
	tests := []struct {
		name    string
		samples []Sample
		disk    []DiskSample
		want    string // a problem that must be reported; "" for none
	}{
		{"flat", samples("worker-0", [2]int64{80, 200}, [2]int64{90, 250}, [2]int64{85, 210}, [2]int64{100, 300}), nil, ""},
		{"restarted worker low in the warm-up", samples("worker-1", [2]int64{30, 100}, [2]int64{90, 300}, [2]int64{120, 500}), nil, ""},
		{"memory leak", samples("env-1", [2]int64{30, 15}, [2]int64{40, 20}, [2]int64{60, 20}, [2]int64{200, 20}), nil, "env-1: RSS peaked at 200.0 MiB"},
		{"goroutine leak", samples("policy", [2]int64{20, 50}, [2]int64{20, 60}, [2]int64{20, 400}), nil, "policy: goroutines peaked at 400"},
		{"worker restarted in the warm-up holds every rollout after it", samples("worker-1", [2]int64{60, 40}, [2]int64{60, 70}, [2]int64{80, 333}), nil, ""},
		{"no goroutines known", samples("temporal", [2]int64{200, -1}, [2]int64{210, -1}, [2]int64{220, -1}), nil, ""},
		{"the Temporal server warms up for half the load", samples("temporal", [2]int64{100, -1}, [2]int64{150, -1}, [2]int64{200, -1}, [2]int64{250, -1}, [2]int64{280, -1}, [2]int64{290, -1}), nil, ""},
		{"the Temporal server growing after half the load", samples("temporal", [2]int64{100, -1}, [2]int64{100, -1}, [2]int64{100, -1}, [2]int64{100, -1}, [2]int64{100, -1}, [2]int64{300, -1}), nil, "temporal: RSS peaked at 300.0 MiB after 5m0s"},
		{"other processes warm up for FlatAfter", samples("env-0", [2]int64{100, 5}, [2]int64{150, 5}, [2]int64{200, 5}, [2]int64{250, 5}, [2]int64{280, 5}, [2]int64{290, 5}), nil, "env-0: RSS peaked at 290.0 MiB after 2m0s"},
		{"nothing after the warm-up is not judged", samples("worker-1", [2]int64{20, 50}, [2]int64{200, 900}), nil, ""},
		{"checkpoints kept", nil, disk(sizes(10), sizes(10, 20), sizes(10, 20, 22), sizes(10, 20, 22, 25), sizes(20, 22, 25)), ""},
		{"retention steady only after the warm-up", nil, disk(sizes(10), sizes(20, 20), sizes(20, 20, 20, 20), sizes(20, 20, 20, 20, 20)), ""},
		{"checkpoints piling up", nil, disk(sizes(10), sizes(10, 20), sizes(10, 20, 20, 20, 20), sizes(10, 20, 20, 20, 20, 20)), "checkpoint root: 6 checkpoints at 4m0s, retention keeps at most 5"},
		{"a checkpoint growing", nil, disk(sizes(10), sizes(10, 20), sizes(20, 30), sizes(30, 60)), "checkpoint size: the largest checkpoint was 60.0 MiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &run{cfg: Config{Duration: 10 * time.Minute, FlatAfter: 2 * time.Minute, Concurrency: 50, Keep: 3}}
			r.report.Samples, r.report.Disk = tt.samples, tt.disk
			r.report.Checkpoints.Pinned = []string{"first"}
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

func TestFlatAfter(t *testing.T) {
	require.Equal(t, 10*time.Minute, flatAfter(Config{Duration: time.Hour, FlatAfter: 10 * time.Minute}))
	require.Equal(t, 150*time.Second, flatAfter(Config{Duration: 5 * time.Minute, FlatAfter: 10 * time.Minute}), "a short soak: half the load")
}

func TestSpread(t *testing.T) {
	require.Equal(t, "-", spread(nil))
	require.Equal(t, "5s / 7.5s / 40s (min/p50/max)", spread([]time.Duration{40 * time.Second, 5 * time.Second, 7500 * time.Millisecond}))
}

func TestPrintAndChart(t *testing.T) {
	cfg := Defaults()
	cfg.Duration, cfg.FlatAfter = 3*time.Minute, time.Minute
	rep := &Report{
		Set: "soak-1", Config: cfg, Started: 10, Completed: 10, Exported: 10, WorkerKills: 2,
		Checkpoints: Checkpoints{Fired: 4, Skipped: 1, Committed: []string{"a", "b"}, Failed: []string{"checkpoint/every-soak-1-x"},
			Kept: []string{"a", "b"}, Pinned: []string{"a"}, Tags: 1,
			GCs: []GC{{CheckpointBytesFreed: 3 << 20, BlobsFreed: 2, BlobBytesFreed: 1 << 20, BlobsKept: 9, BlobsMarked: 4, BlobsYoung: 5}, {Err: "status query: worker gone"}}},
		EnvKills:   []EnvKill{{Server: "http://e0", At: time.Minute}},
		NetFaults:  []NetFault{{Kind: "partition", Proxy: "env-1"}, {Kind: "slow", Proxy: "policy"}, {Kind: "partition", Proxy: "policy"}},
		Detections: []Detection{{Server: "http://e0", Recovered: 4, Detect: 33 * time.Second, Recover: 50 * time.Second, Retried: 1}, {Server: "http://e1", Recovered: 2}},
		Envs:       []EnvCounters{{Name: "env-0", Applied: 40, Want: 40}},
		Samples: append(append(samples("worker-0", [2]int64{80, 200}, [2]int64{90, 250}), samples("env-0", [2]int64{30, 15}, [2]int64{31, 16})...),
			samples("temporal", [2]int64{100, -1}, [2]int64{110, -1})...),
		Disk:     disk(sizes(1), sizes(2)),
		Problems: []string{"env-0 applied 41 mutations"},
	}
	var out strings.Builder
	rep.Print(&out)
	for _, want := range []string{
		"| rollouts | 10 started, 10 completed, 10 exported |",
		"| checkpoints | 4 scheduled fires (1 skipped: one still ran), 2 committed, 1 failed, 2 kept at the end (1 pinned), 1 tag changes |",
		"| garbage collection | 2 runs (1 stopped in the mark), checkpoint bytes freed 3.0 MiB, blobs freed 2 (1.0 MiB); at the last, 9 blobs kept: 4 referenced, 5 within the grace |",
		"| kills | 2 worker SIGKILLs, 1 environment server SIGKILLs |",
		"| network faults | 2 partitions, 1 slow-link episodes with resets |",
		"| detections | 2 declared dead (0 recoveries failed, 1 succeeded after a retry), 6 rollouts moved; time to detect 33s / 33s / 33s (min/p50/max); time to recover 50s / 50s / 50s (min/p50/max) |",
		"| | start | first sample ≥ 1m0s | end of load | drained |",
		"| worker-0 RSS MiB | 80.0 | 80.0 | 90.0 | - |",
		"| worker-0 goroutines | 200 | 200 | 250 | - |",
		"| temporal RSS MiB | 100.0 | 100.0 | 110.0 | - |",
		"| checkpoint root MiB | 1.0 | 1.0 | 2.0 | - |",
		"| checkpoints in the root | 1 | 1 | 1 | - |",
		"| largest checkpoint MiB | 1.0 | 1.0 | 2.0 | - |",
		"http://e1 declared dead with no kill before it",
		"gc at 0s stopped before deleting anything: status query: worker gone",
		"env-0: applied 40 (results account for 40)", "FAIL: 1 problems", "env-0 applied 41 mutations",
	} {
		require.Contains(t, out.String(), want)
	}
	require.NotContains(t, out.String(), "temporal goroutines", "a process without metrics has no goroutine row")
	require.ErrorContains(t, rep.Err(), "env-0 applied 41")
	svg := Chart(rep)
	require.Equal(t, 5, strings.Count(svg, "<polyline"), "RSS of three processes, goroutines of the two with metrics")
	require.Contains(t, svg, "worker-0")
	require.Contains(t, Chart(&Report{}), "no samples")
}

func TestKillBefore(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	r := &run{}
	r.report.EnvKills = []EnvKill{{Server: "a", at: t0}, {Server: "b", at: t0.Add(time.Minute)}, {Server: "a", at: t0.Add(10 * time.Minute)}}
	matched := map[int]bool{}
	require.Equal(t, t0, r.killBefore("a", t0.Add(30*time.Second), matched).at, "the first declaration of a: the first kill")
	require.Nil(t, r.killBefore("a", t0.Add(5*time.Minute), matched), "a second declaration (a partition) is no kill's")
	require.Equal(t, t0.Add(time.Minute), r.killBefore("b", t0.Add(2*time.Minute), matched).at)
	require.Equal(t, t0.Add(10*time.Minute), r.killBefore("a", t0.Add(11*time.Minute), matched).at)
	require.Nil(t, r.killBefore("c", t0.Add(time.Hour), matched))
}
