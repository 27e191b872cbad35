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
	s.saveMetrics(ctx)
	// The worker writes its CPU profile when it stops.
	s.stopAll()
	if werr := WriteFiles(cfg.OutDir, rep); werr != nil && err == nil {
		err = werr
	}
	return rep, err
}

func (s *stack) scenarios(ctx context.Context, rep *Report) error {
	stamp := time.Now().UTC().Format("150405")
	steps := []struct {
		name string
		run  func() error
	}{
		{ScenarioLatency, func() (err error) { rep.Latency, err = s.latency(ctx, stamp); return }},
		{ScenarioThroughput, func() (err error) { rep.Through, err = s.throughput(ctx, stamp); return }},
		{ScenarioHistory, func() (err error) { rep.History, err = s.history(ctx, stamp); return }},
		{ScenarioCheckpoint, func() (err error) { rep.Cuts, err = s.cuts(ctx, stamp); return }},
		{ScenarioFeed, func() (err error) { rep.Feed, err = s.feed(ctx, stamp); return }},
		{ScenarioAdmission, func() (err error) { rep.Admission, err = s.admission(ctx, stamp); return }},
	}
	for _, st := range steps {
		if (st.name == ScenarioAdmission && !s.cfg.runsAdmission()) || (st.name != ScenarioAdmission && !s.cfg.runs(st.name)) {
			continue
		}
		if err := s.profileBoundary(ctx, st.name); err != nil {
			return err
		}
		if err := st.run(); err != nil {
			return fmt.Errorf("%s: %w", st.name, err)
		}
	}
	return nil
}

// profileBoundary, when the worker is profiled, restarts it before a
// scenario (but the first), so each scenario's profile is a file of its
// own (the checkpoint scenario kills the worker, which writes none).
func (s *stack) profileBoundary(ctx context.Context, scenario string) error {
	if !s.cfg.CPUProfile {
		return nil
	}
	if s.profiled {
		if err := s.restartWorker(ctx, s.workerEnv); err != nil {
			return err
		}
	}
	s.profiled = true
	s.logf("worker CPU profile of %s: %s", scenario, WorkerProfileName(s.workerStarts))
	return nil
}
