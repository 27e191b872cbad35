package soak

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/turnstile-rl/turnstile/internal/svgchart"
)

// Flatness bounds: after the warm-up (Config.FlatAfter), a process's
// peak may be at most flatFactor times its peak during the warm-up plus
// the slack; so may one checkpoint's size. It catches growth with
// time and rollouts (a leak), not a warm cache or the rollouts in flight.
//
// A worker's goroutines follow the rollouts it holds, and one worker holds
// them all while the other is down: a warm-up peak of a worker restarted a
// moment before is low. So their slack grows with the rollouts in flight.
const (
	flatFactor          = 1.5
	rssSlack            = 32 << 20
	goroutinesSlack     = 200
	goroutinesPerFlight = 2
	diskSlack           = 16 << 20
)

// Tolerance states the flatness bounds, for the report.
const Tolerance = "after the warm-up, each peak at most 1.5x its warm-up peak plus 32 MiB (memory), 200 + 2 per rollout in flight (goroutines), 16 MiB (one checkpoint), and no more checkpoints than retention keeps plus the one being written; the Temporal server's warm-up is half the load"

// temporalProc is the dev server's name among the samples. Its warm-up is
// half the load at least: its caches fill as its database grows, and the
// database keeps every closed workflow for the namespace's retention (a
// day and more), far longer than a soak. An hour's soak saw it climb for
// 30 minutes and then level off.
const temporalProc = "temporal"

// warmOf is proc's warm-up.
func warmOf(c Config, proc string) time.Duration {
	if proc == temporalProc {
		return max(flatAfter(c), c.Duration/2)
	}
	return flatAfter(c)
}

// flatAfter is the warm-up of a soak of duration d: FlatAfter, or half
// the load for a shorter soak.
func flatAfter(c Config) time.Duration {
	if c.FlatAfter <= 0 || c.FlatAfter >= c.Duration {
		return c.Duration / 2
	}
	return c.FlatAfter
}

// peaks are the largest of v over the samples up to warm and after it;
// ok is false when either side has none.
func peaks[S any](samples []S, at func(S) time.Duration, v func(S) int64, warm time.Duration) (before, after int64, ok bool) {
	var nb, na int
	for _, s := range samples {
		if at(s) <= warm {
			before, nb = max(before, v(s)), nb+1
		} else {
			after, na = max(after, v(s)), na+1
		}
	}
	return before, after, nb > 0 && na > 0
}

// checkFlat compares each process's peak under load after the warm-up
// with its peak during it, and the checkpoint root.
func (r *run) checkFlat() {
	sampleAt := func(s Sample) time.Duration { return s.At }
	for _, proc := range procNames(r.report.Samples) {
		warm := warmOf(r.cfg, proc)
		load := samplesOf(r.report.Samples, proc, "load")
		if b, a, ok := peaks(load, sampleAt, func(s Sample) int64 { return s.RSS }, warm); ok && a > int64(flatFactor*float64(b))+rssSlack {
			r.problem("%s: RSS peaked at %s after %s, %s before", proc, mib(a), warm, mib(b))
		}
		if b, a, ok := peaks(load, sampleAt, func(s Sample) int64 { return s.Goroutines }, warm); ok && b >= 0 && a > int64(flatFactor*float64(b))+goroutinesSlack+int64(goroutinesPerFlight*r.cfg.Concurrency) {
			r.problem("%s: goroutines peaked at %d after %s, %d before", proc, a, warm, b)
		}
	}
	r.checkCheckpointDisk()
}

// checkCheckpointDisk judges the checkpoint root. Its sum is not what
// stays flat: it grows until retention first deletes (at the Keep+1st
// commit, after the warm-up on a loaded machine) and holds the pinned
// checkpoints and the one being written beside the Keep newest. What
// must stay flat is one checkpoint's size (the participants' records of
// the rollouts of a bounded window), and the number of checkpoints must
// stay within what retention keeps.
func (r *run) checkCheckpointDisk() {
	var disk []DiskSample
	for _, d := range r.report.Disk {
		if d.Phase == "load" {
			disk = append(disk, d)
		}
	}
	warm := flatAfter(r.cfg)
	if b, a, ok := peaks(disk, func(d DiskSample) time.Duration { return d.At }, func(d DiskSample) int64 { return d.Largest }, warm); ok && a > int64(flatFactor*float64(b))+diskSlack {
		r.problem("checkpoint size: the largest checkpoint was %s after %s, %s before", mib(a), warm, mib(b))
	}
	limit := r.cfg.Keep + len(r.report.Checkpoints.Pinned) + 1
	for _, d := range disk {
		if d.Dirs > limit {
			r.problem("checkpoint root: %d checkpoints at %s, retention keeps at most %d (the newest %d, %d pinned, one being written)",
				d.Dirs, d.At.Round(time.Second), limit, r.cfg.Keep, len(r.report.Checkpoints.Pinned))
			return
		}
	}
}

// procNames are the processes sampled, in first-seen order.
func procNames(samples []Sample) []string {
	var out []string
	for _, s := range samples {
		if !slices.Contains(out, s.Proc) {
			out = append(out, s.Proc)
		}
	}
	return out
}

// samplesOf are proc's samples in phase ("" for all), in time order.
func samplesOf(samples []Sample, proc, phase string) []Sample {
	var out []Sample
	for _, s := range samples {
		if s.Proc == proc && (phase == "" || s.Phase == phase) {
			out = append(out, s)
		}
	}
	return out
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// Print writes the report: what ran, the table of the run, the
// checkpoints, detections and counters, the samples and the problems.
func (r *Report) Print(w io.Writer) {
	c := r.Config
	fmt.Fprintf(w, "soak of set %s: %d concurrent rollouts over %s for %s, policy %s±%s (503 %.0f%%, 429 %.0f%%)\n",
		r.Set, c.Concurrency, strings.Join(c.Envs, ","), c.Duration, c.PolicyLatency, c.PolicyJitter, 100*c.ErrorRate, 100*c.RateLimitRate)
	fmt.Fprintf(w, "load %s, drain %s\n", r.Load.Round(time.Second), r.Drain.Round(time.Second))
	r.printTable(w)
	r.printFailures(w)
	for _, e := range r.Envs {
		fmt.Fprintf(w, "%s: applied %d (results account for %d), replayed %d, parked %d, refused %d, %d sessions held%s\n",
			e.Name, e.Applied, e.Want, e.Replayed, e.Parked, e.Refused, e.Sessions, map[bool]string{true: " (restarted: not compared)"}[e.Killed])
	}
	fmt.Fprintln(w, "samples:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "t\tphase\tprocess\tpid\tRSS MiB\tgoroutines\t")
	for _, s := range r.Samples {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.1f\t%s\t\n", s.At.Round(time.Second), s.Phase, s.Proc, s.PID, float64(s.RSS)/(1<<20), goroutines(s.Goroutines))
	}
	tw.Flush()
	if len(r.Problems) == 0 {
		fmt.Fprintln(w, "PASS: every rollout completed exactly once, one receipt each, exported once; counters consistent; every kill detected and recovered by the watchdog; memory, goroutines and checkpoint disk flat ("+Tolerance+")")
		return
	}
	fmt.Fprintf(w, "FAIL: %d problems\n", len(r.Problems))
	for _, p := range r.Problems {
		fmt.Fprintln(w, "  "+p)
	}
}

func goroutines(n int64) string {
	if n < 0 {
		return "n/a"
	}
	return fmt.Sprint(n)
}

// printTable writes the run's table: rollouts, checkpoints, kills,
// network faults, detections, then memory, goroutines and disk at the
// start, after the warm-up, at the end of the load and after the drain.
func (r *Report) printTable(w io.Writer) {
	cp := r.Checkpoints
	var freed, blobsFreed, blobBytesFreed int64
	gcFailed := 0
	for _, g := range cp.GCs {
		freed += g.CheckpointBytesFreed
		blobsFreed += int64(g.BlobsFreed)
		blobBytesFreed += g.BlobBytesFreed
		if g.Err != "" {
			gcFailed++
		}
	}
	partitions, slow := 0, 0
	for _, f := range r.NetFaults {
		if f.Kind == "partition" {
			partitions++
		} else {
			slow++
		}
	}
	rows := [][2]string{
		{"rollouts", fmt.Sprintf("%d started, %d completed, %d exported", r.Started, r.Completed, r.Exported)},
		{"checkpoints", fmt.Sprintf("%d scheduled fires (%d skipped: one still ran), %d committed, %d failed, %d kept at the end (%d pinned), %d tag changes",
			cp.Fired, cp.Skipped, len(cp.Committed), len(cp.Failed), len(cp.Kept), len(cp.Pinned), cp.Tags)},
		{"garbage collection", fmt.Sprintf("%d runs (%d stopped in the mark), checkpoint bytes freed %s, blobs freed %d (%s)%s",
			len(cp.GCs), gcFailed, mib(freed), blobsFreed, mib(blobBytesFreed), lastMark(cp.GCs))},
		{"kills", fmt.Sprintf("%d worker SIGKILLs, %d environment server SIGKILLs", r.WorkerKills, len(r.EnvKills))},
		{"network faults", fmt.Sprintf("%d partitions, %d slow-link episodes with resets", partitions, slow)},
		{"detections", r.detectionSummary()},
	}
	fmt.Fprintln(w, "| what | count |")
	fmt.Fprintln(w, "|---|---|")
	for _, row := range rows {
		fmt.Fprintf(w, "| %s | %s |\n", row[0], row[1])
	}
	fmt.Fprintln(w)
	r.printAtTimes(w)
}

// detectionSummary is the count of declarations and the time to detect
// and to recover, min/p50/max, of those a kill explains.
func (r *Report) detectionSummary() string {
	var detect, recover []time.Duration
	moved, failed, retried := 0, 0, 0
	for _, d := range r.Detections {
		moved += d.Recovered
		if d.Err != "" {
			failed++
		} else if d.Retried > 0 {
			retried++
		}
		if d.Detect > 0 {
			detect = append(detect, d.Detect)
		}
		if d.Recover > 0 {
			recover = append(recover, d.Recover)
		}
	}
	return fmt.Sprintf("%d declared dead (%d recoveries failed, %d succeeded after a retry), %d rollouts moved; time to detect %s; time to recover %s",
		len(r.Detections), failed, retried, moved, spread(detect), spread(recover))
}

// spread is "min/p50/max" of ds, "-" for none.
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	rd := func(d time.Duration) string { return d.Round(100 * time.Millisecond).String() }
	return fmt.Sprintf("%s / %s / %s (min/p50/max)", rd(ds[0]), rd(ds[len(ds)/2]), rd(ds[len(ds)-1]))
}

// printAtTimes writes memory, goroutines and disk at the start, after the
// warm-up, at the end of the load and after the drain.
func (r *Report) printAtTimes(w io.Writer) {
	warm := flatAfter(r.Config)
	fmt.Fprintf(w, "| | start | first sample ≥ %s | end of load | drained |\n|---|---|---|---|---|\n", warm.Round(time.Second))
	for _, proc := range procNames(r.Samples) {
		pick := pickers(samplesOf(r.Samples, proc, ""), warm)
		fmt.Fprintf(w, "| %s RSS MiB |", proc)
		for _, s := range pick {
			if s == nil {
				fmt.Fprint(w, " - |")
				continue
			}
			fmt.Fprintf(w, " %.1f |", float64(s.RSS)/(1<<20))
		}
		fmt.Fprintln(w)
		if p := firstNonNil(pick); p != nil && p.Goroutines >= 0 {
			fmt.Fprintf(w, "| %s goroutines |", proc)
			for _, s := range pick {
				if s == nil {
					fmt.Fprint(w, " - |")
					continue
				}
				fmt.Fprintf(w, " %d |", s.Goroutines)
			}
			fmt.Fprintln(w)
		}
	}
	disk := pickers(r.Disk, warm)
	for _, row := range []struct {
		name  string
		v     func(DiskSample) int64
		count bool // a count, not bytes
	}{{"checkpoint root MiB", func(d DiskSample) int64 { return d.Checkpoints }, false},
		{"checkpoints in the root", func(d DiskSample) int64 { return int64(d.Dirs) }, true},
		{"largest checkpoint MiB", func(d DiskSample) int64 { return d.Largest }, false},
		{"transcript store MiB", func(d DiskSample) int64 { return d.Transcripts }, false},
		{"dev server database MiB", func(d DiskSample) int64 { return d.TemporalDB }, false}} {
		fmt.Fprintf(w, "| %s |", row.name)
		for _, d := range disk {
			switch {
			case d == nil:
				fmt.Fprint(w, " - |")
			case row.count:
				fmt.Fprintf(w, " %d |", row.v(*d))
			default:
				fmt.Fprintf(w, " %.1f |", float64(row.v(*d))/(1<<20))
			}
		}
		fmt.Fprintln(w)
	}
}

// timed is a sample with a time and a phase.
type timed interface {
	when() (time.Duration, string)
}

func (s Sample) when() (time.Duration, string)     { return s.At, s.Phase }
func (d DiskSample) when() (time.Duration, string) { return d.At, d.Phase }

// pickers picks the samples of the table's four columns: the first, the
// first under load at or after warm, the last under load, the last
// drained.
func pickers[S timed](samples []S, warm time.Duration) [4]*S {
	var out [4]*S
	for i := range samples {
		s := &samples[i]
		at, phase := (*s).when()
		if out[0] == nil {
			out[0] = s
		}
		switch phase {
		case "load":
			if out[1] == nil && at >= warm {
				out[1] = s
			}
			out[2] = s
		case "drained":
			out[3] = s
		}
	}
	return out
}

func firstNonNil(p [4]*Sample) *Sample {
	for _, s := range p {
		if s != nil {
			return s
		}
	}
	return nil
}

// printFailures lists the failed checkpoints, failed recoveries and
// unexplained declarations.
func (r *Report) printFailures(w io.Writer) {
	for _, id := range r.Checkpoints.Failed {
		fmt.Fprintf(w, "checkpoint %s failed (its abort released the set; the next fire runs)\n", id)
	}
	for _, d := range r.Detections {
		if d.Err != "" {
			fmt.Fprintf(w, "recovery of %s failed once: %s\n", d.Server, d.Err)
		}
		if d.Detect == 0 {
			fmt.Fprintf(w, "%s declared dead with no kill before it (a false positive: its rollouts moved, %d)\n", d.Server, d.Recovered)
		}
	}
	for _, g := range r.Checkpoints.GCs {
		if g.Err != "" {
			fmt.Fprintf(w, "gc at %s stopped before deleting anything: %s\n", g.At, g.Err)
		}
	}
}

// lastMark says what the last collection that swept found in the store:
// the blobs still referenced and those kept for the grace.
func lastMark(gcs []GC) string {
	for i := len(gcs) - 1; i >= 0; i-- {
		if g := gcs[i]; g.Err == "" {
			return fmt.Sprintf("; at the last, %d blobs kept: %d referenced, %d within the grace", g.BlobsKept, g.BlobsMarked, g.BlobsYoung)
		}
	}
	return ""
}

// Chart plots each process's RSS (left) and goroutines (right) against
// the minutes since the load began.
func Chart(r *Report) string {
	var b strings.Builder
	const w, h = 960, 400
	svgchart.Begin(&b, w, h)
	rss := svgchart.Panel{X: 20, Y: 30, W: 440, H: 330, Title: "resident memory (MiB)", XLabel: "minutes since the load began", Empty: "no samples"}
	gor := svgchart.Panel{X: 520, Y: 30, W: 420, H: 330, Title: "goroutines", XLabel: "minutes since the load began", Empty: "no samples"}
	var rssSeries, gorSeries []svgchart.Series
	for i, proc := range procNames(r.Samples) {
		color := svgchart.Palette[i%len(svgchart.Palette)]
		a, g := svgchart.Series{Name: proc, Color: color}, svgchart.Series{Name: proc, Color: color}
		for _, s := range samplesOf(r.Samples, proc, "") {
			m := s.At.Minutes()
			a.X, a.Y = append(a.X, m), append(a.Y, float64(s.RSS)/(1<<20))
			g.X, g.Y = append(g.X, m), append(g.Y, float64(s.Goroutines))
		}
		rssSeries = append(rssSeries, a)
		if slices.Max(append(g.Y, -1)) >= 0 { // a process without metrics has no goroutine count
			gorSeries = append(gorSeries, g)
		}
	}
	for _, s := range samplesOf(r.Samples, firstOr(procNames(r.Samples)), "") {
		rss.XTicks = append(rss.XTicks, math.Round(s.At.Minutes()*10)/10)
	}
	gor.XTicks = rss.XTicks
	svgchart.Lines(&b, rss, rssSeries)
	svgchart.Lines(&b, gor, gorSeries)
	svgchart.End(&b)
	return b.String()
}

func firstOr(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return names[0]
}
