package soak

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/turnstile-rl/turnstile/internal/metrics"
	"github.com/turnstile-rl/turnstile/internal/stack"
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
	// The dev server and Toxiproxy serve no Go metrics: their RSS comes
	// from /proc, their goroutines are not known (-1).
	others := []struct {
		role string
		proc *stack.Proc
	}{{"temporal", r.st.temporal}}
	if r.st.toxi != nil {
		others = append(others, struct {
			role string
			proc *stack.Proc
		}{"toxiproxy", r.st.toxi.Proc})
	}
	for _, o := range others {
		rss, err := procRSS(o.proc.PID())
		if err != nil {
			r.cfg.Logf("%s sample of %s skipped: %v", r.since(), o.role, err)
			continue
		}
		r.mu.Lock()
		r.report.Samples = append(r.report.Samples, Sample{At: at, Phase: phase, Proc: o.role, PID: o.proc.PID(), RSS: rss, Goroutines: -1})
		r.mu.Unlock()
	}
	d := DiskSample{At: at, Phase: phase, Transcripts: dirSize(r.st.store),
		TemporalDB: dirSize(r.st.db) + dirSize(r.st.db+"-wal") + dirSize(r.st.db+"-shm")}
	d.Checkpoints, d.Dirs, d.Largest = checkpointDirs(r.root)
	r.mu.Lock()
	r.report.Disk = append(r.report.Disk, d)
	started := r.submitted
	r.mu.Unlock()
	r.cfg.Logf("%s sample (%s): %d rollouts started; disk: checkpoints %s, transcripts %s, dev server database %s",
		r.since(), phase, started, mib(d.Checkpoints), mib(d.Transcripts), mib(d.TemporalDB))
}

// procRSS reads a process's resident memory from /proc/<pid>/status.
func procRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) != 2 || f[1] != "kB" {
				return 0, fmt.Errorf("pid %d: VmRSS %q", pid, rest)
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("pid %d: VmRSS: %w", pid, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("pid %d: no VmRSS", pid)
}

// checkpointDirs measures a checkpoint root: its bytes, its directories
// (one per checkpoint) and the largest directory's bytes.
func checkpointDirs(root string) (total int64, dirs int, largest int64) {
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		n := dirSize(filepath.Join(root, e.Name()))
		total += n
		if e.IsDir() {
			dirs++
			largest = max(largest, n)
		}
	}
	return total, dirs, largest
}

// dirSize is the bytes of the regular files under path (a file's own
// size for a file; 0 for nothing there). Files removed while it walks
// are skipped.
func dirSize(path string) int64 {
	var n int64
	_ = filepath.WalkDir(path, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if info, err := d.Info(); err == nil {
			n += info.Size()
		}
		return nil
	})
	return n
}

// scrape reads the unlabelled samples named names from a Prometheus text
// endpoint; each must be there.
func scrape(ctx context.Context, url string, names ...string) (map[string]float64, error) {
	b, err := metrics.Fetch(ctx, url, 5*time.Second)
	if err != nil {
		return nil, err
	}
	return parseMetrics(bytes.NewReader(b), names...)
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
