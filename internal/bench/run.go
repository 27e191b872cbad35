package bench

import (
	"context"
	"fmt"
	"os"
	"time"
)

// Run starts the stack, runs the scenarios cfg selects, stops everything it
// started, and writes the report files into cfg.OutDir. A scenario that
// fails ends the run with its error; the figures measured before it are
// still written.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.OutDir, 0o755); err != nil {
		return nil, fmt.Errorf("output dir: %w", err)
	}
	logf := cfg.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	s := &stack{cfg: cfg, logf: logf}
	defer s.stopAll()
	if err := s.startAll(ctx); err != nil {
		return nil, fmt.Errorf("start the stack (logs in %s): %w", cfg.OutDir, err)
	}
	rep := &Report{Started: time.Now().UTC(), Config: ConfigEcho{
		LatencyTurns: cfg.LatencyTurns, Concurrency: cfg.Concurrency, ThroughputTurns: cfg.ThroughputTurns,
		ObservationBytes: cfg.ObservationBytes, SlowPolicyMS: ms(cfg.SlowPolicy), SlowJitterMS: ms(cfg.SlowJitter),
	}}
	err := s.scenarios(ctx, rep)
	rep.Server = s.server
	// The worker writes its CPU profile when it stops.
	s.stopAll()
	if werr := WriteFiles(cfg.OutDir, rep); werr != nil && err == nil {
		err = werr
	}
	return rep, err
}

func (s *stack) scenarios(ctx context.Context, rep *Report) error {
	stamp := time.Now().UTC().Format("150405")
	var err error
	if s.cfg.runs(ScenarioLatency) {
		if rep.Latency, err = s.latency(ctx, stamp); err != nil {
			return fmt.Errorf("latency: %w", err)
		}
	}
	if s.cfg.runs(ScenarioThroughput) {
		if rep.Through, err = s.throughput(ctx, stamp); err != nil {
			return fmt.Errorf("throughput: %w", err)
		}
	}
	if s.cfg.runs(ScenarioHistory) {
		if rep.History, err = s.history(ctx, stamp); err != nil {
			return fmt.Errorf("history: %w", err)
		}
	}
	if s.cfg.runs(ScenarioCheckpoint) {
		if rep.Cuts, err = s.cuts(ctx, stamp); err != nil {
			return err
		}
	}
	if s.cfg.runs(ScenarioFeed) {
		if rep.Feed, err = s.feed(ctx, stamp); err != nil {
			return fmt.Errorf("feed: %w", err)
		}
	}
	if s.cfg.runsAdmission() {
		if rep.Admission, err = s.admission(ctx, stamp); err != nil {
			return fmt.Errorf("admission: %w", err)
		}
	}
	return nil
}
