package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/turnstile-rl/turnstile/internal/metrics"
)

// ServerMetrics is what the dev server's own Prometheus metrics say about
// one row: the difference between a scrape before it and one after.
// Latencies are means (ms) over the row's requests; the schedule-to-start
// percentiles are read from the histogram's buckets (an upper bound: the
// bucket's edge).
type ServerMetrics struct {
	// Row names the row the figures are of.
	Row string `json:"row"`
	// PersistenceOps and PersistenceMeanMS: every persistence call.
	PersistenceOps    float64 `json:"persistence_ops"`
	PersistenceMeanMS float64 `json:"persistence_mean_ms"`
	// StartMeanMS and CompleteTaskMeanMS: the frontend's
	// StartWorkflowExecution and RespondWorkflowTaskCompleted.
	StartMeanMS        float64 `json:"start_workflow_mean_ms"`
	CompleteTaskMeanMS float64 `json:"respond_workflow_task_completed_mean_ms"`
	// The server's task_schedule_to_start_latency of workflow tasks and of
	// activity tasks (none for an activity started eagerly, with the task
	// that scheduled it), and matching's polls: answered by a task (sync:
	// handed over without the backlog) or timed out empty.
	WorkflowScheduleToStartP50MS float64 `json:"workflow_schedule_to_start_p50_ms"`
	WorkflowScheduleToStartP95MS float64 `json:"workflow_schedule_to_start_p95_ms"`
	ActivityScheduleToStartP50MS float64 `json:"activity_schedule_to_start_p50_ms"`
	ActivityScheduleToStartP95MS float64 `json:"activity_schedule_to_start_p95_ms"`
	PollSuccess                  float64 `json:"poll_success"`
	PollSuccessSync              float64 `json:"poll_success_sync"`
	PollTimeouts                 float64 `json:"poll_timeouts"`
	// Frontend is where the frontend's time went: its operations by total
	// time, the largest first (long polls left out: they wait by design).
	Frontend []OperationTime `json:"frontend,omitempty"`
}

// OperationTime is one frontend operation's calls and time over a row.
type OperationTime struct {
	Operation string  `json:"operation"`
	Calls     float64 `json:"calls"`
	TotalMS   float64 `json:"total_ms"`
}

// MeanMS is the operation's mean latency.
func (o OperationTime) MeanMS() float64 {
	if o.Calls <= 0 {
		return 0
	}
	return o.TotalMS / o.Calls
}

// frontendTop is how many operations ServerMetrics.Frontend keeps.
const frontendTop = 8

// frontendTimes are the frontend's operations between two scrapes by
// total time, long polls left out, at most frontendTop.
func frontendTimes(before, after scrape) []OperationTime {
	by := map[string]*OperationTime{}
	add := func(sc scrape, sign float64) {
		for _, s := range sc {
			op := s.labels["operation"]
			if s.labels["service_name"] != "frontend" || op == "" || strings.HasPrefix(op, "Poll") {
				continue
			}
			o := by[op]
			if o == nil {
				o = &OperationTime{Operation: op}
				by[op] = o
			}
			switch s.name {
			case "service_latency_count":
				o.Calls += sign * s.value
			case "service_latency_sum":
				o.TotalMS += sign * s.value * 1000
			}
		}
	}
	add(after, 1)
	add(before, -1)
	var out []OperationTime
	for _, o := range by {
		if o.Calls > 0 {
			out = append(out, *o)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].TotalMS != out[j].TotalMS {
			return out[i].TotalMS > out[j].TotalMS
		}
		return out[i].Operation < out[j].Operation
	})
	return out[:min(len(out), frontendTop)]
}

// promSample is one line of the Prometheus text format.
type promSample struct {
	name   string
	labels map[string]string
	value  float64
}

// scrape is one read of /metrics, the families the bench reports only.
type scrape []promSample

// scrapedFamilies are the metric names a scrape keeps.
var scrapedFamilies = []string{
	"persistence_latency_sum", "persistence_latency_count",
	"service_latency_sum", "service_latency_count",
	"task_schedule_to_start_latency_bucket",
	"poll_success", "poll_success_sync", "poll_timeouts",
}

// scrapeMetrics reads url (a dev server's /metrics).
func scrapeMetrics(ctx context.Context, url string) (scrape, error) {
	b, err := metrics.Fetch(ctx, url, 10*time.Second)
	if err != nil {
		return nil, err
	}
	return parseProm(bytes.NewReader(b))
}

// parseProm reads the Prometheus text format, keeping scrapedFamilies.
func parseProm(r io.Reader) (scrape, error) {
	keep := map[string]bool{}
	for _, f := range scrapedFamilies {
		keep[f] = true
	}
	var out scrape
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		s, ok := parsePromLine(line)
		if ok && keep[s.name] {
			out = append(out, s)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	return out, nil
}

// parsePromLine parses `name{k="v",...} value`; ok is false for a line it
// cannot read (left out, like an unknown family).
func parsePromLine(line string) (promSample, bool) {
	s := promSample{labels: map[string]string{}}
	rest := line
	if i := strings.IndexAny(line, "{ "); i < 0 {
		return s, false
	} else {
		s.name, rest = line[:i], line[i:]
	}
	if strings.HasPrefix(rest, "{") {
		end := strings.LastIndex(rest, "}")
		if end < 0 {
			return s, false
		}
		for _, kv := range strings.Split(rest[1:end], ",") {
			k, v, found := strings.Cut(kv, "=")
			if found {
				s.labels[strings.TrimSpace(k)] = strings.Trim(v, `"`)
			}
		}
		rest = rest[end+1:]
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return s, false
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return s, false
	}
	s.value = v
	return s, true
}

// sum adds the samples of name whose labels include match.
func (sc scrape) sum(name string, match map[string]string) float64 {
	var t float64
	for _, s := range sc {
		if s.name == name && labelsMatch(s.labels, match) {
			t += s.value
		}
	}
	return t
}

func labelsMatch(labels, match map[string]string) bool {
	for k, v := range match {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// buckets are a histogram's cumulative counts by upper edge (seconds),
// summed over the samples of taskType (its task_type label, "Workflow" or
// "Activity", compared without case).
func (sc scrape) buckets(name, taskType string) map[float64]float64 {
	out := map[float64]float64{}
	for _, s := range sc {
		if s.name != name || !strings.Contains(strings.ToLower(s.labels["task_type"]), strings.ToLower(taskType)) {
			continue
		}
		le, err := strconv.ParseFloat(s.labels["le"], 64)
		if err != nil {
			continue
		}
		out[le] += s.value
	}
	return out
}

// histQuantile is the upper edge (ms) of the bucket holding quantile q of
// the observations between two scrapes' buckets (0 with none).
func histQuantile(before, after map[float64]float64, q float64) float64 {
	edges := make([]float64, 0, len(after))
	for le := range after {
		edges = append(edges, le)
	}
	sort.Float64s(edges)
	if len(edges) == 0 {
		return 0
	}
	total := after[edges[len(edges)-1]] - before[edges[len(edges)-1]]
	if total <= 0 {
		return 0
	}
	for _, le := range edges {
		if after[le]-before[le] >= q*total {
			if math.IsInf(le, 1) {
				return math.Inf(1)
			}
			return le * 1000
		}
	}
	return 0
}

// serverMetricsBetween is what happened between two scrapes.
func serverMetricsBetween(row string, before, after scrape) ServerMetrics {
	d := func(name string, match map[string]string) float64 {
		return after.sum(name, match) - before.sum(name, match)
	}
	meanMS := func(family string, match map[string]string) float64 {
		n := d(family+"_count", match)
		if n <= 0 {
			return 0
		}
		return d(family+"_sum", match) / n * 1000
	}
	q := func(taskType string, p float64) float64 {
		const h = "task_schedule_to_start_latency_bucket"
		return histQuantile(before.buckets(h, taskType), after.buckets(h, taskType), p)
	}
	start := map[string]string{"operation": "StartWorkflowExecution", "service_name": "frontend"}
	complete := map[string]string{"operation": "RespondWorkflowTaskCompleted", "service_name": "frontend"}
	return ServerMetrics{
		Row:                          row,
		PersistenceOps:               d("persistence_latency_count", nil),
		PersistenceMeanMS:            meanMS("persistence_latency", nil),
		StartMeanMS:                  meanMS("service_latency", start),
		CompleteTaskMeanMS:           meanMS("service_latency", complete),
		WorkflowScheduleToStartP50MS: q("Workflow", 0.5),
		WorkflowScheduleToStartP95MS: q("Workflow", 0.95),
		ActivityScheduleToStartP50MS: q("Activity", 0.5),
		ActivityScheduleToStartP95MS: q("Activity", 0.95),
		PollSuccess:                  d("poll_success", nil),
		PollSuccessSync:              d("poll_success_sync", nil),
		PollTimeouts:                 d("poll_timeouts", nil),
		Frontend:                     frontendTimes(before, after),
	}
}

// metricsMark is a scrape taken before a row; end reads the row's figures.
type metricsMark struct {
	s      *stack
	row    string
	before scrape
}

// markMetrics scrapes the dev server before a row. A failed scrape is
// logged and leaves the row without server figures.
func (s *stack) markMetrics(ctx context.Context, row string) *metricsMark {
	if s.metricsURL == "" {
		return nil
	}
	sc, err := scrapeMetrics(ctx, s.metricsURL)
	if err != nil {
		s.logf("warning: server metrics before %s: %v", row, err)
		return nil
	}
	return &metricsMark{s: s, row: row, before: sc}
}

// end scrapes again and records the row's server figures.
func (m *metricsMark) end(ctx context.Context) {
	if m == nil {
		return
	}
	after, err := scrapeMetrics(ctx, m.s.metricsURL)
	if err != nil {
		m.s.logf("warning: server metrics after %s: %v", m.row, err)
		return
	}
	sm := serverMetricsBetween(m.row, m.before, after)
	m.s.server = append(m.s.server, sm)
	m.s.logf("server %s: workflow task schedule-to-start p50 ≤ %.0f ms, p95 ≤ %.0f ms; activity p50 ≤ %.0f ms, p95 ≤ %.0f ms; polls %.0f answered (%.0f sync), %.0f timed out; persistence %.0f ops, mean %.2f ms; StartWorkflowExecution %.1f ms, RespondWorkflowTaskCompleted %.1f ms",
		m.row, sm.WorkflowScheduleToStartP50MS, sm.WorkflowScheduleToStartP95MS, sm.ActivityScheduleToStartP50MS, sm.ActivityScheduleToStartP95MS,
		sm.PollSuccess, sm.PollSuccessSync, sm.PollTimeouts, sm.PersistenceOps, sm.PersistenceMeanMS, sm.StartMeanMS, sm.CompleteTaskMeanMS)
	var ops []string
	for _, o := range sm.Frontend {
		ops = append(ops, fmt.Sprintf("%s %.0f× %.1f ms (%.1f s)", o.Operation, o.Calls, o.MeanMS(), o.TotalMS/1000))
	}
	if len(ops) > 0 {
		m.s.logf("server %s: frontend time by operation: %s", m.row, strings.Join(ops, "; "))
	}
}

// ServerMetricsFile is the dev server's whole /metrics at the end of a run.
const ServerMetricsFile = "server-metrics.txt"

// saveMetrics writes the dev server's whole /metrics into the output
// directory, for the families the table leaves out.
func (s *stack) saveMetrics(ctx context.Context) {
	if s.metricsURL == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.metricsURL, nil)
	if err != nil {
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.logf("warning: server metrics: %v", err)
		return
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err == nil {
		err = os.WriteFile(filepath.Join(s.cfg.OutDir, ServerMetricsFile), data, 0o644)
	}
	if err != nil {
		s.logf("warning: server metrics: %v", err)
	}
}
