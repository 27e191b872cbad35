package workers

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/workflow"

	"github.com/turnstile-rl/turnstile/internal/metrics"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// EnvMetricsListen is the address the worker serves /metrics on; empty (the
// default) serves none.
const EnvMetricsListen = "TURNSTILE_METRICS_LISTEN"

// Metrics are a worker's own metrics (turnstile_*), beside the SDK's
// (temporal_*). A nil *Metrics records nothing.
type Metrics struct {
	turn       *prometheus.HistogramVec
	activity   *prometheus.HistogramVec
	coordSteps *prometheus.HistogramVec
	checkpoint *prometheus.HistogramVec
	ckBytes    prometheus.Histogram
	restore    prometheus.Histogram
	outcomes   *prometheus.CounterVec
	tokens     *prometheus.CounterVec
	regen      prometheus.Counter

	mu      sync.Mutex
	lastEnd map[string]time.Time // by workflow ID: when its last activity here ended
}

// maxTracked bounds the rollouts whose last activity end is remembered.
const maxTracked = 100_000

// orchestrationCap: a gap longer than this between two activities of one
// rollout is a park, a crash or a restore, not orchestration.
const orchestrationCap = time.Minute

// NewMetrics registers the worker's metrics on reg: per-turn time split
// into model, environment and orchestration, activity and coordinator step
// durations, checkpoint and restore durations and bytes, the transcript
// store's reads and writes, and rollouts by phase (from visibility; c may
// be nil to leave that out).
func NewMetrics(reg prometheus.Registerer, store *transcriptstore.Store, c client.Client) *Metrics {
	f := factory{reg}
	m := &Metrics{
		turn: f.histogramVec("turn_seconds", "Time of a rollout's turns by part: model (the model activity), environment (environment activities), orchestration (from one activity's end to the next one's start: workflow task, matching, scheduling).",
			prometheus.ExponentialBuckets(0.001, 2, 16), "part"),
		activity: f.histogramVec("activity_seconds", "Duration of rollout activities by type and outcome.",
			prometheus.ExponentialBuckets(0.001, 2, 16), "activity", "outcome"),
		coordSteps: f.histogramVec("coordinator_step_seconds", "Duration of checkpoint and restore coordinator activities by step and outcome.",
			prometheus.ExponentialBuckets(0.01, 2, 16), "step", "outcome"),
		checkpoint: f.histogramVec("checkpoint_seconds", "Checkpoints that committed: the cut (start to last park) and the total (start to resumed), workflow time.",
			prometheus.ExponentialBuckets(0.1, 2, 14), "stage"),
		ckBytes: f.histogram("checkpoint_bytes", "Bytes of each committed checkpoint.", prometheus.ExponentialBuckets(1024, 4, 12)),
		restore: f.histogram("restore_seconds", "Restores that finished: start to every rollout released, workflow time.",
			prometheus.ExponentialBuckets(0.1, 2, 14)),
		outcomes: f.counterVec("coordinator_runs_total", "Checkpoint and Restore runs that ended, by workflow and outcome (ok, failed).", "workflow", "outcome"),
		tokens:   f.counterVec("model_tokens_total", "Generated tokens of finished model calls with token capture, by how they were got: generated (sampled by the call that finished), recovered (kept from a durable prefix of a cut call and continued), regenerated (a cut call's durable prefix thrown away because it could not be continued).", "kind"),
		regen:    f.counter("model_calls_regenerated_total", "Model calls that had a durable prefix and started over (continue never, no token-in route, no tool parser): lineage regenerated."),
		lastEnd:  map[string]time.Time{},
	}
	if store != nil {
		f.storeCounters(store)
	}
	if c != nil {
		reg.MustRegister(newPhaseCollector(c))
	}
	return m
}

// factory registers metrics under the turnstile namespace.
type factory struct{ reg prometheus.Registerer }

func (f factory) histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: metrics.Namespace, Name: name, Help: help, Buckets: buckets}, labels)
	f.reg.MustRegister(h)
	return h
}

func (f factory) histogram(name, help string, buckets []float64) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: metrics.Namespace, Name: name, Help: help, Buckets: buckets})
	f.reg.MustRegister(h)
	return h
}

func (f factory) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: name, Help: help}, labels)
	f.reg.MustRegister(c)
	return c
}

func (f factory) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: name, Help: help})
	f.reg.MustRegister(c)
	return c
}

func (f factory) storeCounters(store *transcriptstore.Store) {
	for _, c := range []struct {
		name, help string
		v          func(transcriptstore.Stats) int64
	}{
		{"transcript_reads_total", "Blobs read from the transcript store.", func(s transcriptstore.Stats) int64 { return s.Reads }},
		{"transcript_read_bytes_total", "Bytes read from the transcript store.", func(s transcriptstore.Stats) int64 { return s.ReadBytes }},
		{"transcript_writes_total", "Blobs written to the transcript store (content already stored is not written again).", func(s transcriptstore.Stats) int64 { return s.Writes }},
		{"transcript_write_bytes_total", "Bytes written to the transcript store.", func(s transcriptstore.Stats) int64 { return s.WriteBytes }},
	} {
		f.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: metrics.Namespace, Name: c.name, Help: c.help},
			func() float64 { return float64(c.v(store.Stats())) }))
	}
}

// registerTokensReceived registers the count of generated tokens the
// model activity read off its streams, cut calls' included, and returns
// the counter it keeps them in (model.Activities.Received). The endpoint's
// own count of tokens it sent, less this, is what was in flight when calls
// were cut; model_tokens_total counts finished calls only.
func registerTokensReceived(reg prometheus.Registerer) *atomic.Int64 {
	n := &atomic.Int64{}
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: metrics.Namespace, Name: "model_tokens_received_total",
		Help: "Generated tokens the model activity read off streamed answers as they arrived, those of calls cut before they finished included. The endpoint's count of the tokens it sent, less this, is what was in flight (sent, never read) when calls were cut.",
	}, func() float64 { return float64(n.Load()) }))
	return n
}

// part is the turn part a rollout activity is, or "" for others.
func part(activityType string) string {
	switch activityType {
	case rollout.CallModelName:
		return "model"
	case rollout.StartEnvironmentName, rollout.OperateEnvironmentName, rollout.VerifyName:
		return "environment"
	}
	return ""
}

// activityStarted records the orchestration gap before an activity of
// workflowID and returns the function that records its end.
func (m *Metrics) activityStarted(workflowID, activityType string) func(err error) {
	if m == nil {
		return func(error) {}
	}
	start := time.Now()
	p := part(activityType)
	if p == "" {
		return func(err error) {
			m.coordSteps.WithLabelValues(activityType, outcome(err)).Observe(time.Since(start).Seconds())
		}
	}
	m.mu.Lock()
	if last, ok := m.lastEnd[workflowID]; ok && start.Sub(last) < orchestrationCap {
		m.turn.WithLabelValues("orchestration").Observe(start.Sub(last).Seconds())
	}
	m.mu.Unlock()
	return func(err error) {
		end := time.Now()
		m.turn.WithLabelValues(p).Observe(end.Sub(start).Seconds())
		m.activity.WithLabelValues(activityType, outcome(err)).Observe(end.Sub(start).Seconds())
		m.mu.Lock()
		defer m.mu.Unlock()
		if activityType == rollout.VerifyName || len(m.lastEnd) >= maxTracked {
			delete(m.lastEnd, workflowID)
			if len(m.lastEnd) >= maxTracked {
				clear(m.lastEnd) // forget everyone rather than grow without bound
			}
			return
		}
		m.lastEnd[workflowID] = end
	}
}

func outcome(err error) string {
	if err != nil {
		return "failed"
	}
	return "ok"
}

// workflowEnded records a Checkpoint or Restore that ended, from its
// result and workflow time.
func (m *Metrics) workflowEnded(workflowType string, out any, err error, took time.Duration) {
	if m == nil {
		return
	}
	switch workflowType {
	case checkpoint.CheckpointWorkflowName:
		m.outcomes.WithLabelValues(workflowType, outcome(err)).Inc()
		if res, ok := out.(checkpoint.CheckpointResult); ok && err == nil {
			m.checkpoint.WithLabelValues("cut").Observe(float64(res.CutMillis) / 1000)
			m.checkpoint.WithLabelValues("total").Observe(float64(res.TotalMillis) / 1000)
			m.ckBytes.Observe(float64(res.Bytes))
		}
	case checkpoint.RestoreWorkflowName:
		m.outcomes.WithLabelValues(workflowType, outcome(err)).Inc()
		if err == nil {
			m.restore.Observe(took.Seconds())
		}
	}
}

// observer is the worker interceptor that feeds Metrics.
type observer struct {
	interceptor.WorkerInterceptorBase
	m *Metrics
}

func (o *observer) InterceptActivity(_ context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	a := &activityObserver{m: o.m}
	a.Next = next
	return a
}

func (o *observer) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	w := &workflowObserver{m: o.m}
	w.Next = next
	return w
}

type activityObserver struct {
	interceptor.ActivityInboundInterceptorBase
	m *Metrics
}

func (a *activityObserver) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	info := activity.GetInfo(ctx)
	done := a.m.activityStarted(info.WorkflowExecution.ID, info.ActivityType.Name)
	out, err := a.Next.ExecuteActivity(ctx, in)
	done(err)
	if res, ok := out.(rollout.CallModelResult); ok && err == nil {
		a.m.modelTokens(res.Generation)
	}
	return out, err
}

// modelTokens counts a finished model call's tokens by how they were got.
func (m *Metrics) modelTokens(g *rollout.GenerationRef) {
	if m == nil || g == nil {
		return
	}
	m.tokens.WithLabelValues("generated").Add(float64(max(g.GenerationTokens-g.TokensRecovered, 0)))
	m.tokens.WithLabelValues("recovered").Add(float64(g.TokensRecovered))
	m.tokens.WithLabelValues("regenerated").Add(float64(g.TokensRegenerated))
	if g.Regenerated {
		m.regen.Inc()
	}
}

type workflowObserver struct {
	interceptor.WorkflowInboundInterceptorBase
	m *Metrics
}

// ExecuteWorkflow records a coordinator's end once, when it really ends:
// never while its history is replayed (a query of a closed run, a cache
// eviction).
func (w *workflowObserver) ExecuteWorkflow(ctx workflow.Context, in *interceptor.ExecuteWorkflowInput) (any, error) {
	start := workflow.Now(ctx)
	out, err := w.Next.ExecuteWorkflow(ctx, in)
	if !workflow.IsReplaying(ctx) {
		w.m.workflowEnded(workflow.GetInfo(ctx).WorkflowType.Name, out, err, workflow.Now(ctx).Sub(start))
	}
	return out, err
}

// phaseCollector reports running rollouts by phase, counted by visibility
// at most every phaseRefresh (a scrape does not load the server more).
type phaseCollector struct {
	c    client.Client
	desc *prometheus.Desc

	mu     sync.Mutex
	at     time.Time
	counts map[rollout.Phase]int64
}

const phaseRefresh = 15 * time.Second

// runningPhases are the phases of a run that has not closed.
var runningPhases = []rollout.Phase{
	rollout.PhaseSeeding, rollout.PhaseModel, rollout.PhaseEnvironment, rollout.PhaseVerifying,
	rollout.PhaseParked, rollout.PhaseAwaitingAck,
}

func newPhaseCollector(c client.Client) *phaseCollector {
	return &phaseCollector{c: c, desc: prometheus.NewDesc(prometheus.BuildFQName(metrics.Namespace, "", "rollouts"),
		"Running rollouts by phase (parked: held for a checkpoint), as visibility counts them; refreshed at most every 15 s.",
		[]string{"phase"}, nil)}
}

func (p *phaseCollector) Describe(ch chan<- *prometheus.Desc) { ch <- p.desc }

func (p *phaseCollector) Collect(ch chan<- prometheus.Metric) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.at) > phaseRefresh {
		p.refresh()
	}
	for phase, n := range p.counts {
		ch <- prometheus.MustNewConstMetric(p.desc, prometheus.GaugeValue, float64(n), string(phase))
	}
}

func (p *phaseCollector) refresh() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	counts := map[rollout.Phase]int64{}
	for _, phase := range runningPhases {
		q := rollout.SARolloutPhase + ` = "` + string(phase) + `" AND ExecutionStatus = "Running"`
		resp, err := p.c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: q})
		if err != nil {
			return // keep the last counts; the next scrape tries again
		}
		counts[phase] = resp.GetCount()
	}
	p.counts, p.at = counts, time.Now()
}
