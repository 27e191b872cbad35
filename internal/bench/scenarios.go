package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	tclient "go.temporal.io/sdk/client"
	"google.golang.org/protobuf/proto"

	"github.com/turnstile-rl/turnstile/internal/fanout"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// startConcurrency bounds the workflow starts in flight at once.
const startConcurrency = 32

// workerQueue is the task queue of the turnstile worker under test.
const workerQueue = rollout.TaskQueue

// kind is what a scenario runs: the floor or turnstile.
type kind int

const (
	floorKind kind = iota
	// leanKind is the lean floor: the floor's loop passing payloads of
	// LeanPayloadBytes (never padded).
	leanKind
	turnstileKind
	// streamedKind is turnstile with token capture: each model call
	// streamed and its tokens kept (durable prefixes every
	// TURNSTILE_MODEL_PREFIX_TOKENS). Not in kinds: the latency and
	// history scenarios run it beside turnstile, to show what streaming
	// costs.
	streamedKind
)

// kinds is every kind, in the order a scenario runs them.
var kinds = []kind{floorKind, leanKind, turnstileKind}

func (k kind) String() string { return [...]string{"floor", "lean", "turnstile", "streamed"}[k] }

// plain says whether k runs on the floor's worker.
func (k kind) plain() bool { return k == floorKind || k == leanKind }

// spec is one rollout to run.
type spec struct {
	set       string
	i         int
	turns     int
	padding   int
	policyURL string // turnstile only; empty: the worker's default
	streamed  bool   // capture tokens: the model call streams
}

// counterInput is a counter rollout of s.turns tool turns (plus the final
// answer of the model, which calls no tool).
func counterInput(s spec) rollout.Input {
	in := rollout.Input{
		RolloutID: fmt.Sprintf("%s-%05d", s.set, s.i),
		Set:       s.set,
		Task:      json.RawMessage(fmt.Sprintf(`{"target":%d,"padding":%d}`, s.turns, s.padding)),
		Env:       rollout.EnvRef{Name: "counter"},
		Policy:    rollout.PolicyRef{Model: "scripted-counter", BaseURL: s.policyURL},
		Seed:      int64(s.i + 1),
		Limits:    rollout.Limits{MaxTurns: min(s.turns+1, rollout.MaxMaxTurns)},
	}
	if s.streamed {
		in.Sampling = &rollout.Sampling{CaptureTokens: true}
		in.Policy.ToolParser = rollout.ToolParserTurnstile
	}
	return in
}

// startRun starts one rollout of kind k.
func (s *stack) startRun(ctx context.Context, k kind, sp spec) (tclient.WorkflowRun, error) {
	switch k {
	case floorKind:
		return s.client.ExecuteWorkflow(ctx, tclient.StartWorkflowOptions{
			ID: fmt.Sprintf("floor/%s-%05d", sp.set, sp.i), TaskQueue: floorQueue,
		}, FloorWorkflowName, FloorInput{Turns: sp.turns, ObservationBytes: sp.padding})
	case leanKind:
		return s.client.ExecuteWorkflow(ctx, tclient.StartWorkflowOptions{
			ID: fmt.Sprintf("lean/%s-%05d", sp.set, sp.i), TaskQueue: floorQueue,
		}, FloorWorkflowName, FloorInput{Turns: sp.turns, ObservationBytes: LeanPayloadBytes})
	}
	sp.streamed = k == streamedKind
	in := counterInput(sp)
	return s.client.ExecuteWorkflow(ctx, rollout.StartOptions(in, workerQueue), rollout.WorkflowName, in)
}

// finish waits for run's result.
func finish(ctx context.Context, k kind, run tclient.WorkflowRun) error {
	var err error
	if k.plain() {
		var res FloorResult
		err = run.Get(ctx, &res)
	} else {
		var res rollout.Result
		err = run.Get(ctx, &res)
	}
	if err != nil {
		return fmt.Errorf("%s run %s: %w", k, run.GetID(), err)
	}
	return nil
}

// modelActivity is the activity type that starts a turn.
func modelActivity(k kind) string {
	if k.plain() {
		return floorModelName
	}
	return rollout.CallModelName
}

// turnMarks are the scheduled times of a run's model calls and, for each,
// the index of its event and the history bytes before it.
type turnMarks struct {
	times  []time.Time
	events []int
	bytes  []int
	// all is the run's whole history.
	all []*historypb.HistoryEvent
}

func (s *stack) marks(ctx context.Context, k kind, run tclient.WorkflowRun) (turnMarks, error) {
	iter := s.client.GetWorkflowHistory(ctx, run.GetID(), run.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var m turnMarks
	var n, size int
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			return turnMarks{}, fmt.Errorf("history of %s: %w", run.GetID(), err)
		}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == modelActivity(k) {
			m.times = append(m.times, ev.GetEventTime().AsTime())
			m.events = append(m.events, n)
			m.bytes = append(m.bytes, size)
		}
		n++
		size += eventSize(ev)
		m.all = append(m.all, ev)
	}
	return m, nil
}

func eventSize(ev *historypb.HistoryEvent) int { return proto.Size(ev) }

// latency runs cfg.LatencyRollouts rollouts of each kind one at a time and
// reports the median steady-state turn and end-to-end time per turn; then
// the same with token capture (streamed), against the same floors.
func (s *stack) latency(ctx context.Context, stamp string) (*Latency, error) {
	out := &Latency{Rollouts: s.cfg.LatencyRollouts, TurnsEach: s.cfg.LatencyTurns}
	for _, k := range append(kinds, streamedKind) {
		turn, e2e, err := s.latencyOf(ctx, k, stamp)
		if err != nil {
			return nil, err
		}
		if k == streamedKind {
			out.Streamed = Pair{Floor: out.TurnMS.Floor, Lean: out.TurnMS.Lean, Turnstile: turn}
		} else {
			set(&out.TurnMS, k, turn)
			set(&out.EndToEnd, k, e2e)
		}
		s.logf("latency %-9s %.1f ms/turn (steady), %.1f ms/turn end to end", k, turn, e2e)
	}
	return out, nil
}

// latencyOf is the median steady-state turn and end-to-end time per turn of
// cfg.LatencyRollouts rollouts of kind k, one at a time.
func (s *stack) latencyOf(ctx context.Context, k kind, stamp string) (turnMS, e2eMS float64, err error) {
	// One short run first: connections, caches and the sticky queue warm
	// up outside the measurement.
	if _, _, err := s.oneRollout(ctx, k, spec{set: "warm-" + stamp, i: int(k), turns: 2}); err != nil {
		return 0, 0, err
	}
	var turn, e2e []float64
	for i := 0; i < s.cfg.LatencyRollouts; i++ {
		sp := spec{set: "lat-" + stamp, i: i + 100*int(k), turns: s.cfg.LatencyTurns}
		m, wall, err := s.oneRollout(ctx, k, sp)
		if err != nil {
			return 0, 0, err
		}
		if len(m.times) < 2 {
			return 0, 0, fmt.Errorf("%s latency run: %d model calls in its history, want at least 2", k, len(m.times))
		}
		steady := m.times[len(m.times)-1].Sub(m.times[0])
		turn = append(turn, ms(steady)/float64(len(m.times)-1))
		e2e = append(e2e, ms(wall)/float64(s.cfg.LatencyTurns))
	}
	return median(turn), median(e2e), nil
}

func (s *stack) oneRollout(ctx context.Context, k kind, sp spec) (turnMarks, time.Duration, error) {
	t0 := time.Now()
	run, err := s.startRun(ctx, k, sp)
	if err != nil {
		return turnMarks{}, 0, err
	}
	if err := finish(ctx, k, run); err != nil {
		return turnMarks{}, 0, err
	}
	wall := time.Since(t0)
	m, err := s.marks(ctx, k, run)
	return m, wall, err
}

// throughput runs cfg.Concurrency rollouts of each kind at once.
func (s *stack) throughput(ctx context.Context, stamp string) (*Through, error) {
	out := &Through{CPUMSPerTurn: map[string]Pair{}}
	runs := map[kind][]runTimes{}
	for _, k := range kinds {
		worker := s.worker
		if k.plain() {
			worker = s.floor
		}
		before := s.sampleCPU(worker)
		mark := s.markMetrics(ctx, fmt.Sprintf("throughput %s, %d rollouts", k, s.cfg.Concurrency))
		durations, wall, ids, err := s.many(ctx, k, s.cfg.Concurrency, func(i int) spec {
			return spec{set: "tput-" + stamp, i: i + 100000*int(k), turns: s.cfg.ThroughputTurns}
		})
		if err != nil {
			return nil, err
		}
		mark.end(ctx)
		runs[k] = ids
		turns := s.cfg.Concurrency * s.cfg.ThroughputTurns
		for name, v := range perTurn(before, s.sampleCPU(worker), turns) {
			p := out.CPUMSPerTurn[name]
			set(&p, k, v)
			out.CPUMSPerTurn[name] = p
		}
		set(&out.TurnsPerSec, k, float64(turns)/wall.Seconds())
		set(&out.P95RolloutS, k, percentile(durations, 0.95))
		set(&out.Turns, k, float64(turns))
		s.logf("throughput %-9s %.1f turns/s (%d rollouts × %d turns in %s)", k, float64(turns)/wall.Seconds(), s.cfg.Concurrency, s.cfg.ThroughputTurns, wall.Round(time.Millisecond))
	}
	var err error
	out.Tasks, err = s.taskWaits(ctx, runs)
	return out, err
}

// many starts n rollouts at once and waits for all; it returns each one's
// duration in seconds, the wall time from the first start to the last
// result, and each run's ids and client-side times.
func (s *stack) many(ctx context.Context, k kind, n int, specOf func(int) spec) ([]float64, time.Duration, []runTimes, error) {
	t0 := time.Now()
	var mu sync.Mutex
	durations := make([]float64, 0, n)
	ids := make([]runTimes, 0, n)
	err := fanout.Each(ctx, n, n, func(ctx context.Context, i int) error {
		start := time.Now()
		run, err := s.startLimited(ctx, k, specOf(i))
		if err != nil {
			return err
		}
		started := time.Now()
		if err := finish(ctx, k, run); err != nil {
			return err
		}
		mu.Lock()
		durations = append(durations, time.Since(start).Seconds())
		ids = append(ids, runTimes{id: run.GetID(), runID: run.GetRunID(), called: start, started: started, done: time.Now()})
		mu.Unlock()
		return nil
	})
	return durations, time.Since(t0), ids, err
}

// startSlots bounds concurrent starts across many's goroutines.
var startSlots = make(chan struct{}, startConcurrency)

func (s *stack) startLimited(ctx context.Context, k kind, sp spec) (tclient.WorkflowRun, error) {
	select {
	case startSlots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-startSlots }()
	return s.startRun(ctx, k, sp)
}

// history runs one rollout of each kind with large observations and
// reports the history bytes and events of single turns.
func (s *stack) history(ctx context.Context, stamp string) (*History, error) {
	out := &History{At: s.cfg.HistoryAt}
	out.BytesPerTurn = make([]Pair, len(s.cfg.HistoryAt))
	out.EventsPerTurn = make([]Pair, len(s.cfg.HistoryAt))
	out.StreamedBytesPerTurn = make([]Pair, len(s.cfg.HistoryAt))
	for _, k := range append(kinds, streamedKind) {
		// The floors get one turn more, so their turn HistoryTurns has a
		// next turn to end it, like turnstile's final answer.
		turns := s.cfg.HistoryTurns
		if k.plain() {
			turns++
		}
		m, _, err := s.oneRollout(ctx, k, spec{set: "hist-" + stamp, i: 200 + int(k), turns: turns, padding: s.cfg.ObservationBytes})
		if err != nil {
			return nil, err
		}
		for j, at := range s.cfg.HistoryAt {
			if at >= len(m.bytes) {
				return nil, fmt.Errorf("%s history: turn %d not reached (%d model calls in one run; continued as new?)", k, at, len(m.bytes))
			}
			if k == streamedKind {
				b := out.BytesPerTurn[j]
				out.StreamedBytesPerTurn[j] = Pair{Floor: b.Floor, Lean: b.Lean, Turnstile: float64(m.bytes[at] - m.bytes[at-1])}
			} else {
				set(&out.BytesPerTurn[j], k, float64(m.bytes[at]-m.bytes[at-1]))
				set(&out.EventsPerTurn[j], k, float64(m.events[at]-m.events[at-1]))
			}
			s.logf("history %-9s turn %d: %d bytes, %d events", k, at, m.bytes[at]-m.bytes[at-1], m.events[at]-m.events[at-1])
		}
		if err := writeTurn(s.cfg.OutDir, k, m, s.cfg.HistoryAt[0]); err != nil {
			return nil, err
		}
	}
	fixed, err := s.fixedCost(ctx, stamp)
	if err != nil {
		return nil, err
	}
	out.Fixed = fixed
	return out, nil
}

// fixedCost runs one short rollout of each kind (FixedCostTurns model
// calls: the floors' turns, turnstile's tool turns and final answer) and
// counts its whole history. Visibility writes are counted from the history:
// the start, each UpsertWorkflowSearchAttributes and
// WorkflowPropertiesModified (memo) event, and the close.
func (s *stack) fixedCost(ctx context.Context, stamp string) (*FixedCost, error) {
	out := &FixedCost{}
	for _, k := range kinds {
		turns := FixedCostTurns
		if k == turnstileKind {
			turns-- // the final answer is a turn of its own
		}
		m, _, err := s.oneRollout(ctx, k, spec{set: "fixed-" + stamp, i: 300 + int(k), turns: turns})
		if err != nil {
			return nil, err
		}
		if len(m.events) != FixedCostTurns {
			return nil, fmt.Errorf("%s fixed cost: %d model calls, want %d", k, len(m.events), FixedCostTurns)
		}
		bytes, writes := 0, 2 // the start and the close
		for _, ev := range m.all {
			bytes += eventSize(ev)
			switch ev.GetEventType() {
			case enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES, enumspb.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED:
				writes++
			}
		}
		set(&out.Events, k, float64(len(m.all)))
		set(&out.Bytes, k, float64(bytes))
		set(&out.VisibilityWrites, k, float64(writes))
		s.logf("fixed cost %-9s %d turns: %d events, %d bytes, %d visibility writes", k, FixedCostTurns, len(m.all), bytes, writes)
	}
	return out, nil
}

func set(p *Pair, k kind, v float64) {
	switch k {
	case floorKind:
		p.Floor = v
	case leanKind:
		p.Lean = v
	default:
		p.Turnstile = v
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func median(xs []float64) float64 { return percentile(xs, 0.5) }

// percentile is the nearest-rank percentile q of xs (0 for none).
func percentile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}
