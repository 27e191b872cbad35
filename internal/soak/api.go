// Package soak runs turnstile under sustained load with faults, the way a
// long training run meets it: a set kept at a fixed number of concurrent
// rollouts over mixed environment classes, a slow and flaky policy (1–3 s,
// injected 5xx and 429), a checkpoint every interval, SIGKILLs of one of two
// workers (work moves to the survivor) and, once scoped recovery exists, of
// an environment server. At the end it checks the invariants of
// ARCHITECTURE.md (one completed run and one receipt per rollout, results
// exported once, environment mutation counters consistent) and that the
// processes' memory and goroutines stayed flat, sampled through their
// Prometheus endpoints.
//
// `make soak` runs it through cmd/soak; integration.TestSoakShort runs a
// two-minute version in CI.
package soak

import (
	"errors"
	"fmt"
	"time"
)

// Config is one soak run.
type Config struct {
	// BinDir holds the envserver, policyserver and worker binaries;
	// TemporalCLI is the Temporal CLI, DevConfig the temporal-dev.yaml the
	// dev server takes its settings from. OutDir gets logs, transcripts and
	// checkpoints.
	BinDir, TemporalCLI, DevConfig, OutDir string

	// Duration is how long rollouts are fed and faults injected; then the
	// set drains (DrainTimeout at most) and is checked.
	Duration     time.Duration
	DrainTimeout time.Duration
	// Concurrency is the number of rollouts kept in flight; MaxRollouts
	// bounds how many are started in all.
	Concurrency, MaxRollouts int
	// Envs are the environments, assigned round-robin; Seed seeds their
	// tasks and the fault schedule.
	Envs []string
	Seed int64

	// The policy server's latency (mean and half-width of its uniform
	// spread), injected 503 and 429 rates and their seed.
	PolicyLatency, PolicyJitter time.Duration
	ErrorRate, RateLimitRate    float64

	// CheckpointEvery is the interval between checkpoint starts (one at a
	// time; one that overruns delays the next), each bounded by
	// CheckpointTimeout.
	CheckpointEvery, CheckpointTimeout time.Duration
	// WorkerKillEvery: SIGKILL one of the two workers at random, restart it
	// WorkerDownFor later.
	WorkerKillEvery, WorkerDownFor time.Duration
	// EnvKillEvery: SIGKILL one of the two environment servers at random
	// and recover its rollouts onto a replacement by scoped recovery; zero
	// turns it off.
	EnvKillEvery time.Duration
	// RetiredGrace is the environment servers' --retired-grace: how long a
	// finished session keeps its stored responses; zero (the default) leaves
	// the servers' own, 10 minutes, which a soak of ten minutes or more still
	// reaches. A 2-minute grace was tried: on the loaded machine a worker's
	// retry of a verify or a tool call came after a workflow task had waited
	// over two minutes, was refused session_retired, and failed 2 rollouts.
	RetiredGrace time.Duration
	// SampleEvery is the interval of memory and goroutine samples.
	SampleEvery time.Duration

	// Logf, when set, is told what the soak does as it goes.
	Logf func(format string, args ...any)
}

// Defaults are the soak of `make soak`: 1,000 concurrent rollouts for ten
// minutes, a checkpoint every 30 s, a worker SIGKILLed every minute,
// samples every minute.
func Defaults() Config {
	return Config{
		Duration:          10 * time.Minute,
		DrainTimeout:      10 * time.Minute,
		Concurrency:       1000,
		MaxRollouts:       100000,
		Envs:              []string{"counter", "blackjack", "workplace", "sandbox", "arithmetic"},
		Seed:              1,
		PolicyLatency:     2 * time.Second,
		PolicyJitter:      time.Second,
		ErrorRate:         0.03,
		RateLimitRate:     0.03,
		CheckpointEvery:   30 * time.Second,
		CheckpointTimeout: 2 * time.Minute,
		WorkerKillEvery:   time.Minute,
		WorkerDownFor:     10 * time.Second,
		EnvKillEvery:      envKillDefault,
		SampleEvery:       time.Minute,
	}
}

// Validate names the first setting that cannot work.
func (c Config) Validate() error {
	switch {
	case c.BinDir == "" || c.TemporalCLI == "" || c.DevConfig == "" || c.OutDir == "":
		return errors.New("soak: the bin dir, Temporal CLI, dev config and out dir are all required")
	case c.Duration <= 0 || c.DrainTimeout <= 0:
		return fmt.Errorf("soak: duration %s and drain timeout %s must be positive", c.Duration, c.DrainTimeout)
	case c.Concurrency < 1 || c.MaxRollouts < c.Concurrency:
		return fmt.Errorf("soak: concurrency %d must be at least 1 and at most max rollouts %d", c.Concurrency, c.MaxRollouts)
	case len(c.Envs) == 0:
		return errors.New("soak: no environments")
	case c.CheckpointEvery <= 0 || c.CheckpointTimeout <= 0 || c.WorkerKillEvery <= 0 || c.SampleEvery <= 0:
		return errors.New("soak: checkpoint, checkpoint timeout, worker kill and sample intervals must be positive")
	case c.WorkerDownFor < 0 || c.EnvKillEvery < 0 || c.RetiredGrace < 0:
		return errors.New("soak: worker down time, environment server kill interval and retired grace must not be negative")
	}
	return nil
}

// Report is what a soak did and found.
type Report struct {
	Set         string
	Config      Config        `json:"-"`
	Started     int           // rollouts started
	Completed   int           // rollouts with one completed run
	Exported    int           // completed lines of the export
	Checkpoints []Checkpoint  // in order
	WorkerKills int           //
	EnvKills    int           //
	Load, Drain time.Duration // how long feeding and draining took
	Envs        []EnvCounters
	Samples     []Sample
	// Problems are the invariant violations found; empty when the soak
	// passed.
	Problems []string
}

// Checkpoint is one checkpoint the soak took.
type Checkpoint struct {
	ID      string
	Members int
	Parked  int
	Took    time.Duration
	Err     string `json:",omitempty"`
	// Resumed counts the rollouts the soak resumed after a failed
	// checkpoint, as an operator would.
	Resumed int `json:",omitempty"`
}

// EnvCounters are one environment server's mutation counters at the end,
// against what the results say it applied.
type EnvCounters struct {
	Name             string
	Killed           bool // replaced during the soak: counters start over
	Applied, Want    int64
	Replayed, Parked int64
	Refused          int64
	// Sessions are the sessions the server still holds at the end (a
	// finished one is kept for replays): what its memory grows with.
	Sessions int
}

// Sample is one process's memory and goroutines at one moment.
type Sample struct {
	At         time.Duration // since the load began
	Phase      string        // idle (before the load), load, drained (after)
	Proc       string        // worker-0, worker-1, env-0, env-1, policy
	PID        int
	RSS        int64 // process_resident_memory_bytes
	Goroutines int64 // go_goroutines
}

// Err is nil when the soak found no problem.
func (r *Report) Err() error {
	if len(r.Problems) == 0 {
		return nil
	}
	return fmt.Errorf("soak: %d problems, the first: %s", len(r.Problems), r.Problems[0])
}
