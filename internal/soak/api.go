// Package soak runs turnstile under sustained load with faults, the way a
// long training run meets it, with nothing playing the operator: a set kept
// at a fixed number of concurrent rollouts over mixed environment classes,
// a slow and flaky policy (1–3 s, injected 5xx and 429), checkpoints from a
// Temporal Schedule with retention, tags and a pin, a periodic garbage
// collection, automatic recovery (the set's watchdog) of environment
// servers SIGKILLed and brought back at the same address by their
// supervisor, SIGKILLs of one of two workers (work moves to the survivor),
// and network faults through Toxiproxy between the workers and every
// environment server and the policy (partitions, slow links with resets).
// At the end it checks the invariants of ARCHITECTURE.md (one completed run
// and one receipt per rollout, results exported once, environment mutation
// counters consistent) and that the processes' memory, goroutines and disk
// stayed flat after the warm-up.
//
// `make soak` runs it through cmd/soak; integration.TestSoakShort runs a
// two-minute version in CI.
package soak

import (
	"errors"
	"fmt"
	"time"

	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
)

// Config is one soak run.
type Config struct {
	// BinDir holds the envserver, policyserver and worker binaries;
	// TemporalCLI is the Temporal CLI, Toxiproxy the Toxiproxy server,
	// DevConfig the temporal-dev.yaml the dev server takes its settings
	// from. OutDir gets logs, transcripts, checkpoints and the dev
	// server's database.
	BinDir, TemporalCLI, Toxiproxy, DevConfig, OutDir string

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
	// ModelCallTimeout is the rollouts' model call timeout: what a call on
	// a worker SIGKILLed under it waits before it is tried again, and so
	// what a cut waits for a rollout parked in one (a cancelled call is
	// waited for). Above the longest partition plus the policy's latency.
	ModelCallTimeout time.Duration
	// EnvCallTimeout is the rollouts' environment call timeout. An
	// environment call is a local activity by default, whose retries end
	// with its start-to-close: a rollout calling a dead server fails this
	// long after its first refused call. Recovery moves only rollouts
	// still running, so this must cover the watchdog's detection, the
	// supervisor's restart and the recovery (with the default 15 s and a
	// 30 s bound, a 5-minute soak lost 120 of 1,203 rollouts that way).
	EnvCallTimeout time.Duration

	// CheckpointEvery is the interval of the set's checkpoint Schedule
	// (a fire while a checkpoint still runs is skipped), each cut bounded
	// by CheckpointTimeout; Keep is the schedule's retention. Every
	// TagEvery committed checkpoints the trainer moves the schedule's tag
	// on (step-1, step-2, …); the first tag is pinned. Every GCEvery
	// committed checkpoints a garbage collection runs (retention, then the
	// mark and sweep of the transcript store with GCGrace).
	CheckpointEvery, CheckpointTimeout time.Duration
	Keep, TagEvery, GCEvery            int
	GCGrace                            time.Duration

	// WorkerKillEvery: SIGKILL one of the two workers at random, restart it
	// WorkerDownFor later.
	WorkerKillEvery, WorkerDownFor time.Duration
	// EnvKillEvery: SIGKILL one of the two environment servers at random;
	// its supervisor brings it back at the same address EnvDownFor later
	// (and not before the watchdog declared it dead), and the watchdog
	// recovers its rollouts. Zero turns it off.
	EnvKillEvery, EnvDownFor time.Duration
	// The watchdog's detection settings (trainer.AutoRecover).
	WatchEvery, WatchTimeout, WatchBound time.Duration
	WatchMisses                          int
	// NetFaultEvery: one network fault on one of the proxies (the two
	// environment servers' and the policy's), in turn a partition of
	// PartitionFor and a slow link (SlowLatency ± SlowJitter, a share
	// ResetShare of the connections reset) of SlowFor. Zero turns them off.
	NetFaultEvery, PartitionFor, SlowFor time.Duration
	SlowLatency, SlowJitter              time.Duration
	ResetShare                           float32
	// RetiredGrace is the environment servers' --retired-grace: how long a
	// finished session keeps its stored responses; zero leaves the servers'
	// own, 10 minutes. The soak's is 5 minutes, above its environment call
	// timeout (4 minutes: a retry of a finished rollout's request comes
	// within it), so that with ForgetAfter a server holds the rollouts of
	// the last 6 minutes and the checkpoint root levels off within the
	// 10-minute warm-up. A 2-minute grace was tried: on the loaded machine
	// a worker's retry of a verify or a tool call came after a workflow
	// task had waited over two minutes, was refused session_retired, and
	// failed 2 rollouts.
	RetiredGrace time.Duration
	// ForgetAfter is the environment servers' --forget-after: how long a
	// finished rollout whose stored responses were dropped keeps its fence
	// before the server forgets it (and its checkpoints stop carrying it);
	// zero leaves the servers' own, an hour. It is what keeps the
	// checkpoint root flat: with the servers' default a checkpoint holds
	// every rollout of the last hour, so a shorter soak never sees it level.
	ForgetAfter time.Duration
	// SampleEvery is the interval of memory, goroutine and disk samples;
	// FlatAfter the warm-up after which they must stay flat (the sample
	// nearest it against the last one under load).
	SampleEvery, FlatAfter time.Duration

	// Logf, when set, is told what the soak does as it goes.
	Logf func(format string, args ...any)
}

// Defaults are the soak of `make soak`: 250 concurrent rollouts for an
// hour, a scheduled checkpoint every 2 minutes keeping 3, a worker
// SIGKILLed every 2 minutes, an environment server every 5 (the first
// at 2.5), a network fault every 2, samples every minute, flat after 10
// minutes. A 5-minute soak meets every fault at least once.
func Defaults() Config {
	return Config{
		Duration:          time.Hour,
		DrainTimeout:      10 * time.Minute,
		Concurrency:       250,
		MaxRollouts:       100000,
		Envs:              []string{"counter", "blackjack", "workplace", "sandbox", "arithmetic"},
		Seed:              1,
		PolicyLatency:     2 * time.Second,
		PolicyJitter:      time.Second,
		ErrorRate:         0.03,
		RateLimitRate:     0.03,
		ModelCallTimeout:  45 * time.Second,
		EnvCallTimeout:    4 * time.Minute,
		CheckpointEvery:   2 * time.Minute,
		CheckpointTimeout: 2 * time.Minute,
		Keep:              3,
		TagEvery:          2,
		GCEvery:           3,
		GCGrace:           transcriptstore.MinGrace,
		WorkerKillEvery:   2 * time.Minute,
		WorkerDownFor:     10 * time.Second,
		EnvKillEvery:      5 * time.Minute,
		EnvDownFor:        time.Minute,
		WatchEvery:        3 * time.Second,
		WatchTimeout:      3 * time.Second,
		WatchMisses:       3,
		WatchBound:        45 * time.Second,
		NetFaultEvery:     2 * time.Minute,
		PartitionFor:      20 * time.Second,
		SlowFor:           time.Minute,
		SlowLatency:       100 * time.Millisecond,
		SlowJitter:        50 * time.Millisecond,
		ResetShare:        0.05,
		SampleEvery:       time.Minute,
		FlatAfter:         10 * time.Minute,
		RetiredGrace:      5 * time.Minute,
		ForgetAfter:       time.Minute,
	}
}

// Validate names the first setting that cannot work.
func (c Config) Validate() error {
	switch {
	case c.BinDir == "" || c.TemporalCLI == "" || c.DevConfig == "" || c.OutDir == "":
		return errors.New("soak: the bin dir, Temporal CLI, dev config and out dir are all required")
	case c.NetFaultEvery > 0 && c.Toxiproxy == "":
		return errors.New("soak: network faults need the Toxiproxy server binary")
	case c.Duration <= 0 || c.DrainTimeout <= 0:
		return fmt.Errorf("soak: duration %s and drain timeout %s must be positive", c.Duration, c.DrainTimeout)
	case c.Concurrency < 1 || c.MaxRollouts < c.Concurrency:
		return fmt.Errorf("soak: concurrency %d must be at least 1 and at most max rollouts %d", c.Concurrency, c.MaxRollouts)
	case len(c.Envs) == 0:
		return errors.New("soak: no environments")
	case c.CheckpointEvery <= 0 || c.CheckpointTimeout <= 0 || c.WorkerKillEvery <= 0 || c.SampleEvery <= 0:
		return errors.New("soak: checkpoint, checkpoint timeout, worker kill and sample intervals must be positive")
	case c.GCGrace < transcriptstore.MinGrace:
		return fmt.Errorf("soak: gc grace %s is below %s: a sweep could take a blob a writer is about to reference", c.GCGrace, transcriptstore.MinGrace)
	case c.Keep < 1 || c.TagEvery < 1 || c.GCEvery < 1:
		return fmt.Errorf("soak: keep %d, tag every %d and gc every %d must be at least 1", c.Keep, c.TagEvery, c.GCEvery)
	case c.WorkerDownFor < 0 || c.EnvKillEvery < 0 || c.EnvDownFor < 0 || c.RetiredGrace < 0 || c.ForgetAfter < 0 || c.NetFaultEvery < 0 || c.FlatAfter < 0:
		return errors.New("soak: down times, fault intervals, flat-after, retired grace and forget-after must not be negative")
	case c.NetFaultEvery > 0 && (c.PartitionFor <= 0 || c.SlowFor <= 0 || c.PartitionFor+c.SlowFor > 2*c.NetFaultEvery):
		return fmt.Errorf("soak: partition %s and slow link %s must be positive and fit in two network fault intervals of %s", c.PartitionFor, c.SlowFor, c.NetFaultEvery)
	case c.NetFaultEvery > 0 && c.PartitionFor >= c.WatchBound:
		return fmt.Errorf("soak: partition %s must be shorter than the watchdog's bound %s (a longer one is declared dead, harmlessly, but is no partition)", c.PartitionFor, c.WatchBound)
	case c.ModelCallTimeout < 0 || (c.NetFaultEvery > 0 && c.ModelCallTimeout > 0 && c.ModelCallTimeout < c.PartitionFor+c.PolicyLatency+c.PolicyJitter):
		return fmt.Errorf("soak: model call timeout %s must be longer than a partition %s plus the policy's latency %s±%s", c.ModelCallTimeout, c.PartitionFor, c.PolicyLatency, c.PolicyJitter)
	case c.EnvKillEvery > 0 && c.EnvCallTimeout < c.EnvDownFor+c.WatchBound+c.WatchEvery+c.WatchTimeout:
		return fmt.Errorf("soak: env call timeout %s must cover the server's down time %s and the watchdog's detection (bound %s + every %s + timeout %s): rollouts calling a dead server fail after it, before a recovery can move them",
			c.EnvCallTimeout, c.EnvDownFor, c.WatchBound, c.WatchEvery, c.WatchTimeout)
	case c.ResetShare < 0 || c.ResetShare > 1:
		return fmt.Errorf("soak: reset share %v must be in [0, 1]", c.ResetShare)
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
	Checkpoints Checkpoints   //
	WorkerKills int           //
	EnvKills    []EnvKill     // in order
	NetFaults   []NetFault    // in order
	Detections  []Detection   // the watchdog's declarations, in order
	Load, Drain time.Duration // how long feeding and draining took
	Envs        []EnvCounters
	Samples     []Sample
	Disk        []DiskSample
	// Problems are the invariant violations found; empty when the soak
	// passed.
	Problems []string
}

// Checkpoints are what the set's schedule and the trainer's garbage
// collections did.
type Checkpoints struct {
	Fired, Skipped    int      // the schedule's fires and fires skipped (overlap)
	Committed, Failed []string // fires that committed and that failed, by checkpoint workflow ID
	Kept              []string // committed checkpoints of the set under the root at the end
	Pinned            []string // pinned by the trainer
	Tags              int      // tag changes the trainer made
	GCs               []GC     // in order
}

// GC is one garbage collection the trainer ran.
type GC struct {
	At                            time.Duration
	CheckpointsDeleted            int
	CheckpointBytesKept           int64
	CheckpointBytesFreed          int64
	BlobsKept, BlobsFreed         int
	BlobBytesKept, BlobBytesFreed int64
	// BlobsMarked are the blobs something still references (a running
	// rollout, a held result, a kept checkpoint); BlobsYoung the kept ones
	// written within the grace. The store is those two: the first follows
	// what is live, the second the grace.
	BlobsMarked, BlobsYoung int
	Err                     string `json:",omitempty"`
}

// EnvKill is one environment server SIGKILL.
type EnvKill struct {
	Server    string        // its address, as the set names it
	At        time.Duration // since the load began
	Restarted time.Duration // when its supervisor brought it back
	at        time.Time
}

// NetFault is one network fault episode.
type NetFault struct {
	Kind  string // partition or slow
	Proxy string // env-0, env-1 or policy
	At    time.Duration
	For   time.Duration
}

// Detection is one declaration of the set's watchdog, timed against the
// fault that caused it.
type Detection struct {
	Server    string
	Recovered int    // rollouts moved
	Err       string `json:",omitempty"`
	// Retried counts the recovery's runs that failed before the one that
	// succeeded (the watchdog runs a failed recovery again).
	Retried int `json:",omitempty"`
	// Detect is kill → declared, Recover kill → rollouts moved (the
	// supervisor's restart included); zero when no kill explains it (a
	// false positive, from a partition say).
	Detect, Recover time.Duration
}

// EnvCounters are one environment server's mutation counters at the end,
// against what the results say it applied.
type EnvCounters struct {
	Name             string
	Killed           bool // restarted during the soak: counters start over
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
	Proc       string        // worker-0, worker-1, env-0, env-1, policy, temporal, toxiproxy
	PID        int
	RSS        int64 // process_resident_memory_bytes, or VmRSS of /proc for a process without metrics
	Goroutines int64 // go_goroutines; -1 for a process without metrics
}

// DiskSample is the soak's disk use at one moment.
type DiskSample struct {
	At                                   time.Duration
	Phase                                string
	Checkpoints, Transcripts, TemporalDB int64 // bytes
	// Dirs are the checkpoint directories under the root (committed, kept
	// or pinned, and one being written); Largest is the largest one's
	// bytes.
	Dirs    int
	Largest int64
}

// Err is nil when the soak found no problem.
func (r *Report) Err() error {
	if len(r.Problems) == 0 {
		return nil
	}
	return fmt.Errorf("soak: %d problems, the first: %s", len(r.Problems), r.Problems[0])
}
