// Package bench measures turnstile against a naive Temporal loop on one dev
// server, in one run: ms per turn of one rollout, turns/s of many at once,
// history bytes per turn, and the wall time of a checkpoint and a restore of
// sets of in-flight rollouts. It starts every process it measures (the
// Temporal dev server, an environment server, policy servers, the turnstile
// worker and the floor's worker), writes the figures as JSON and CSV, draws
// an SVG chart and prints the ratios. Timings are judged here, never in
// tests.
package bench

import (
	"errors"
	"fmt"
	"time"

	"github.com/turnstile-rl/turnstile/trainer"
	setwf "github.com/turnstile-rl/turnstile/workflows/set"
)

// Config is one bench run.
type Config struct {
	// BinDir holds the worker, envserver, policyserver and bench binaries.
	BinDir string
	// Temporal is the Temporal CLI binary.
	Temporal string
	// DevConfig is temporal-dev.yaml (the dev server's settings).
	DevConfig string
	// OutDir receives bench.json, bench.csv, bench.svg and the process
	// logs (and worker.pprof with CPUProfile).
	OutDir string

	// Latency: LatencyRollouts rollouts of LatencyTurns turns, one at a
	// time (concurrency 1).
	LatencyRollouts int
	LatencyTurns    int
	// Throughput: Concurrency rollouts of ThroughputTurns turns at once.
	Concurrency     int
	ThroughputTurns int
	// History: one rollout of HistoryTurns turns with ObservationBytes
	// observations; bytes per turn are reported at turns HistoryAt.
	HistoryTurns     int
	HistoryAt        []int
	ObservationBytes int
	// Checkpoint: one checkpoint and one restore for each set size in
	// CheckpointSizes, with the policy answering after SlowPolicy ± SlowJitter
	// so rollouts are mid-episode when the cut is taken.
	CheckpointSizes []int
	// QueuedSizes are busy sets submitted through the set's admission
	// (trainer.Submit) at MaxInFlight (0: trainer.DefaultMaxInFlight): the
	// admission runs MaxInFlight at once and queues the rest, and the
	// checkpoint cuts the running ones and records the queue.
	QueuedSizes       []int
	MaxInFlight       int
	SlowPolicy        time.Duration
	SlowJitter        time.Duration
	CheckpointTimeout time.Duration
	// Feed: FeedHeld held results consumed FeedPage at a time through a
	// gateway, in process, and by a plain update loop.
	FeedHeld int
	FeedPage int
	// Admission: for each of AdmissionLevels, AdmissionSubmitted short
	// rollouts submitted through the admission at that max_in_flight, once
	// per worker poller setting of AdmissionPollers (names of PollerModes;
	// empty: the worker's own settings only). Not in Scenarios: it runs
	// when named in Only, or with an empty Only when AdmissionByDefault.
	AdmissionByDefault bool
	AdmissionLevels    []int
	AdmissionSubmitted int
	AdmissionPollers   []string
	// Only runs these scenarios (names from Scenarios); empty runs all.
	Only []string
	// CPUProfile writes a CPU profile of each start of the turnstile worker
	// to OutDir/worker-<start>.pprof (WorkerProfileName).
	CPUProfile bool
	// Log receives progress lines; nil is silent.
	Log func(format string, args ...any)
}

// Scenario names, for Config.Only.
const (
	ScenarioLatency    = "latency"
	ScenarioThroughput = "throughput"
	ScenarioHistory    = "history"
	ScenarioCheckpoint = "checkpoint"
	ScenarioFeed       = "feed"
	// ScenarioAdmission is not in Scenarios: it runs when named, or in a
	// full run (Config.AdmissionByDefault).
	ScenarioAdmission = "admission"
)

// Scenarios lists every scenario in the order a run takes them.
var Scenarios = []string{ScenarioLatency, ScenarioThroughput, ScenarioHistory, ScenarioCheckpoint, ScenarioFeed}

// Default is the full run of `make bench`.
func Default() Config {
	return Config{
		LatencyRollouts: 3, LatencyTurns: 30,
		Concurrency: 256, ThroughputTurns: 20,
		HistoryTurns: 100, HistoryAt: []int{10, 100}, ObservationBytes: 10 << 10,
		CheckpointSizes:    []int{100, 1000},
		QueuedSizes:        []int{1000},
		AdmissionByDefault: true, AdmissionLevels: []int{64, 128, 256}, AdmissionSubmitted: 512,
		SlowPolicy: 2 * time.Second, SlowJitter: time.Second,
		CheckpointTimeout: 2 * time.Minute,
		FeedHeld:          1000, FeedPage: 100,
	}
}

// Quick is a run of a few minutes (`make bench BENCH_FLAGS=-quick`).
func Quick() Config {
	c := Default()
	c.LatencyRollouts, c.LatencyTurns = 2, 15
	c.Concurrency, c.ThroughputTurns = 64, 10
	c.CheckpointSizes = []int{100, 300}
	c.QueuedSizes, c.MaxInFlight = []int{300}, 64
	c.AdmissionByDefault, c.AdmissionLevels, c.AdmissionSubmitted = false, []int{32, 64}, 128
	c.FeedHeld = 300
	return c
}

// Smoke is the smallest run that still takes every step: what the package's
// test runs.
func Smoke() Config {
	c := Default()
	c.LatencyRollouts, c.LatencyTurns = 1, 3
	c.Concurrency, c.ThroughputTurns = 4, 3
	c.HistoryTurns, c.HistoryAt, c.ObservationBytes = 12, []int{2, 10}, 1<<10
	c.CheckpointSizes = []int{4}
	c.QueuedSizes, c.MaxInFlight = []int{6}, 3
	c.AdmissionByDefault = false
	c.AdmissionLevels, c.AdmissionSubmitted, c.AdmissionPollers = []int{2}, 4, []string{PollersFixed, PollersAutoscaling}
	c.SlowPolicy, c.SlowJitter = 300*time.Millisecond, 100*time.Millisecond
	c.CheckpointTimeout = 30 * time.Second
	c.FeedHeld, c.FeedPage = 6, 4
	return c
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	switch {
	case c.BinDir == "" || c.Temporal == "" || c.DevConfig == "" || c.OutDir == "":
		return errors.New("bin dir, Temporal CLI, dev config and output dir are required")
	case c.LatencyRollouts < 1 || c.LatencyTurns < 2:
		return fmt.Errorf("latency: %d rollouts of %d turns: want at least 1 rollout of 2 turns", c.LatencyRollouts, c.LatencyTurns)
	case c.Concurrency < 1 || c.ThroughputTurns < 1:
		return fmt.Errorf("throughput: concurrency %d, %d turns: want at least 1 each", c.Concurrency, c.ThroughputTurns)
	case c.ObservationBytes < 0:
		return fmt.Errorf("observation bytes %d: want 0 or more", c.ObservationBytes)
	case c.SlowPolicy <= 0 || c.SlowJitter < 0 || c.SlowJitter > c.SlowPolicy:
		return fmt.Errorf("slow policy %s ± %s: want a positive latency and a jitter no larger", c.SlowPolicy, c.SlowJitter)
	case c.CheckpointTimeout <= 0:
		return fmt.Errorf("checkpoint timeout %s: want a positive duration", c.CheckpointTimeout)
	case c.FeedHeld < 1 || c.FeedPage < 1 || c.FeedPage > trainer.MaxFeedPage:
		return fmt.Errorf("feed: %d held results in pages of %d: want at least 1 result, pages of 1..%d", c.FeedHeld, c.FeedPage, trainer.MaxFeedPage)
	}
	for _, at := range c.HistoryAt {
		if at < 2 || at > c.HistoryTurns {
			return fmt.Errorf("history at turn %d: want 2..%d (the history rollout's turns)", at, c.HistoryTurns)
		}
	}
	for _, n := range c.CheckpointSizes {
		if n < 1 {
			return fmt.Errorf("checkpoint size %d: want at least 1", n)
		}
	}
	if err := c.validateAdmission(); err != nil {
		return err
	}
	for _, s := range c.Only {
		if !contains(Scenarios, s) && s != ScenarioAdmission {
			return fmt.Errorf("scenario %q: want one of %v or %s", s, Scenarios, ScenarioAdmission)
		}
	}
	return nil
}

// validateAdmission checks the settings of the queued sets and of the
// admission scenario.
func (c Config) validateAdmission() error {
	for _, n := range c.QueuedSizes {
		if n < 1 {
			return fmt.Errorf("queued set size %d: want at least 1", n)
		}
	}
	if c.MaxInFlight < 0 || c.MaxInFlight > setwf.MaxMaxInFlight {
		return fmt.Errorf("max_in_flight %d: want 1..%d (0: the default, %d)", c.MaxInFlight, setwf.MaxMaxInFlight, trainer.DefaultMaxInFlight)
	}
	for _, n := range c.AdmissionLevels {
		if n < 1 || n > setwf.MaxMaxInFlight {
			return fmt.Errorf("admission level %d: want 1..%d", n, setwf.MaxMaxInFlight)
		}
	}
	if c.runsAdmission() && (len(c.AdmissionLevels) == 0 || c.AdmissionSubmitted < 1) {
		return fmt.Errorf("admission: %d levels, %d submitted: want at least one level and one rollout", len(c.AdmissionLevels), c.AdmissionSubmitted)
	}
	for _, p := range c.AdmissionPollers {
		if _, ok := PollerModes[p]; !ok {
			return fmt.Errorf("poller setting %q: want %s or %s", p, PollersFixed, PollersAutoscaling)
		}
	}
	return nil
}

// maxInFlight is the max_in_flight of the queued sets.
func (c Config) maxInFlight() int {
	if c.MaxInFlight > 0 {
		return c.MaxInFlight
	}
	return trainer.DefaultMaxInFlight
}

// runsAdmission: the admission scenario runs when named, or in a full run.
func (c Config) runsAdmission() bool {
	return contains(c.Only, ScenarioAdmission) || (len(c.Only) == 0 && c.AdmissionByDefault)
}

func (c Config) runs(scenario string) bool { return len(c.Only) == 0 || contains(c.Only, scenario) }

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Report is what a run measured. Durations are milliseconds.
type Report struct {
	Started time.Time  `json:"started"`
	Config  ConfigEcho `json:"config"`
	Latency *Latency   `json:"latency,omitempty"`
	Through *Through   `json:"throughput,omitempty"`
	History *History   `json:"history,omitempty"`
	Cuts    []Cut      `json:"checkpoints,omitempty"`
	Feed    *Feed      `json:"feed,omitempty"`
	// Admission is the admission scenario's rows.
	Admission []AdmissionRow `json:"admission,omitempty"`
	// Server is the dev server's own metrics around each row.
	Server   []ServerMetrics `json:"server_metrics,omitempty"`
	Warnings []string        `json:"warnings,omitempty"`
}

// ConfigEcho is the part of Config a reader of the report needs.
type ConfigEcho struct {
	LatencyTurns     int     `json:"latency_turns"`
	Concurrency      int     `json:"concurrency"`
	ThroughputTurns  int     `json:"throughput_turns"`
	ObservationBytes int     `json:"observation_bytes"`
	SlowPolicyMS     float64 `json:"slow_policy_ms"`
	SlowJitterMS     float64 `json:"slow_jitter_ms"`
}

// Pair is one figure of the floor, of the lean floor and of turnstile.
type Pair struct {
	Floor     float64 `json:"floor"`
	Lean      float64 `json:"lean_floor"`
	Turnstile float64 `json:"turnstile"`
}

// Latency is ms per turn of one rollout at a time: the steady-state turn
// (from the first to the last model call in the history) and end to end
// (start to result, divided by turns).
type Latency struct {
	TurnMS   Pair `json:"turn_ms"`
	EndToEnd Pair `json:"end_to_end_ms_per_turn"`
	// Streamed is TurnMS of turnstile with token capture (each model call
	// streamed), beside the same floors.
	Streamed  Pair `json:"streamed_turn_ms"`
	Rollouts  int  `json:"rollouts"`
	TurnsEach int  `json:"turns_each"`
}

// Through is many rollouts at once.
type Through struct {
	TurnsPerSec Pair `json:"turns_per_s"`
	P95RolloutS Pair `json:"p95_rollout_s"`
	// CPUMSPerTurn is CPU milliseconds per turn of each process during the
	// scenario: "temporal" (the dev server), "worker" (turnstile's or the
	// floor's), "envserver", "policyserver".
	CPUMSPerTurn map[string]Pair `json:"cpu_ms_per_turn"`
	Turns        Pair            `json:"turns"`
	// Tasks is where the rollouts' time went, from their histories.
	Tasks *TaskWaits `json:"tasks,omitempty"`
}

// History is history bytes (and events) per turn at given turns.
type History struct {
	At            []int  `json:"at"`
	BytesPerTurn  []Pair `json:"bytes_per_turn"`
	EventsPerTurn []Pair `json:"events_per_turn"`
	// StreamedBytesPerTurn is BytesPerTurn of turnstile with token capture
	// (each model call streamed), beside the same floors.
	StreamedBytesPerTurn []Pair `json:"streamed_bytes_per_turn"`
	// Fixed is the whole history of one short rollout of each kind: a
	// counter rollout of FixedCostTurns turns (tool turns and the final
	// answer), no padding.
	Fixed *FixedCost `json:"fixed_cost,omitempty"`
}

// FixedCostTurns is the length of the fixed-cost rollout.
const FixedCostTurns = 4

// FixedCost is what one short rollout's history records: its events, its
// bytes, and its visibility writes (start, search-attribute upserts, close).
type FixedCost struct {
	Events           Pair `json:"events"`
	Bytes            Pair `json:"bytes"`
	VisibilityWrites Pair `json:"visibility_writes"`
}

// Cut is one busy set: its rollouts started at once on the slow policy,
// a checkpoint while they are mid-episode, then every run killed and the
// set restored from the checkpoint.
type Cut struct {
	Rollouts int `json:"rollouts"`
	// MaxInFlight is the set's max_in_flight when it went through its
	// admission (0: every rollout started at once); Queued how many the
	// checkpoint recorded as not started.
	MaxInFlight int `json:"max_in_flight,omitempty"`
	Queued      int `json:"queued,omitempty"`
	// SubmitMS is the wall time to start every rollout; PastFirstTurnMS
	// from the first start until visibility lists every rollout past its
	// first model call (-1: not within the bench's wait).
	SubmitMS        float64 `json:"submit_ms"`
	PastFirstTurnMS float64 `json:"every_past_first_turn_ms"`
	// TurnP50MS and TurnP95MS are the turn latency (one model call's
	// scheduling to the next's) over a sample of the set's histories, turns
	// that a park, a signal or an update interrupted left out.
	TurnP50MS float64 `json:"turn_p50_ms"`
	TurnP95MS float64 `json:"turn_p95_ms"`
	// InFlight counts the rollouts mid-episode when the checkpoint was
	// requested; Parked how many the checkpoint parked.
	InFlight int `json:"in_flight"`
	Parked   int `json:"parked"`
	// CutMS is the Checkpoint workflow's own cut (start to last park);
	// BeyondSlowestMS is CutMS less the slowest in-flight turn (the slow
	// policy's latency plus jitter).
	CutMS           float64 `json:"cut_ms"`
	BeyondSlowestMS float64 `json:"beyond_slowest_turn_ms"`
	// ManifestMS is the wall time from the request to the manifest on
	// disk; CheckpointMS to the workflow's result (rollouts resumed).
	ManifestMS   float64 `json:"request_to_manifest_ms"`
	CheckpointMS float64 `json:"checkpoint_total_ms"`
	// QueuedMS is how long the Checkpoint workflow's first task waited.
	QueuedMS float64 `json:"checkpoint_first_task_wait_ms"`
	Bytes    int64   `json:"bytes"`
	// RestoreMS is the wall time from the restore request to every
	// restored rollout released (all running); -1 when that took longer
	// than the bench waits (10 minutes). Before the restore, every run of
	// the set is terminated and the turnstile worker restarted (the
	// Temporal server and the environment server keep running).
	RestoreMS float64 `json:"restore_ms"`
	Restored  int     `json:"restored"`
	// ReleasedMS is the wall time from the checkpoint request until
	// visibility lists no rollout of the set parked; RestoreReleasedMS from
	// the restore request until it lists every restored run running past
	// its hold. Release goes by signal, so the workflows can return before
	// their rollouts have moved on: these say when they had (-1: not within
	// the bench's wait).
	ReleasedMS        float64 `json:"request_to_released_ms"`
	RestoreReleasedMS float64 `json:"restore_to_released_ms"`
}
