package soak

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Metric names sampled from every process's Prometheus endpoint (the Go
// and process collectors of metrics.NewRegistry).
const (
	metricRSS        = "process_resident_memory_bytes"
	metricGoroutines = "go_goroutines"
)

// sample records every process's memory and goroutines. A process that
// does not answer (a worker killed a moment ago) is skipped: the next
// sample has it again.
func (r *run) sample(ctx context.Context, phase string) {
	var at time.Duration
	if !r.start.IsZero() {
		at = time.Since(r.start)
	}
	for _, m := range r.st.members() {
		vals, err := scrape(ctx, "http://"+m.metrics+"/metrics", metricRSS, metricGoroutines)
		if err != nil {
			r.cfg.Logf("%s sample of %s skipped: %v", r.since(), m.role, err)
			continue
		}
		s := Sample{At: at, Phase: phase, Proc: m.role, PID: m.proc.PID(), RSS: int64(vals[metricRSS]), Goroutines: int64(vals[metricGoroutines])}
		r.mu.Lock()
		r.report.Samples = append(r.report.Samples, s)
		r.mu.Unlock()
	}
}

// scrape reads the unlabelled samples named names from a Prometheus text
// endpoint; each must be there.
func scrape(ctx context.Context, url string, names ...string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return parseMetrics(resp.Body, names...)
}

// parseMetrics picks the unlabelled samples named names out of the
// Prometheus text format.
func parseMetrics(r io.Reader, names ...string) (map[string]float64, error) {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || !want[name] {
			continue
		}
		fields := strings.Fields(value)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("metric %s: %w", name, err)
		}
		out[name] = v
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for _, n := range names {
		if _, ok := out[n]; !ok {
			return nil, fmt.Errorf("metric %s missing", n)
		}
	}
	return out, nil
}
