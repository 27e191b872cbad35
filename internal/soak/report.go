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

// Flatness bounds: a process's last sample under load may be at most
// twice its first plus this slack. Loose on purpose: it catches unbounded
// growth (a leak grows with time and rollouts), not a warm cache.
const (
	rssSlack        = 64 << 20
	goroutinesSlack = 200
)

// checkFlat compares each process's first and last sample under load.
func (r *run) checkFlat() {
	for _, proc := range procNames(r.report.Samples) {
		load := samplesOf(r.report.Samples, proc, "load")
		if len(load) < 2 {
			continue
		}
		first, last := load[0], load[len(load)-1]
		if last.RSS > 2*first.RSS+rssSlack {
			r.problem("%s: RSS grew from %s to %s under load", proc, mib(first.RSS), mib(last.RSS))
		}
		if last.Goroutines > 2*first.Goroutines+goroutinesSlack {
			r.problem("%s: goroutines grew from %d to %d under load", proc, first.Goroutines, last.Goroutines)
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

// Print writes the report: what ran, the checkpoints, kills and counters,
// the samples table and the problems.
func (r *Report) Print(w io.Writer) {
	c := r.Config
	fmt.Fprintf(w, "soak of set %s: %d concurrent rollouts over %s for %s, policy %s±%s (503 %.0f%%, 429 %.0f%%)\n",
		r.Set, c.Concurrency, strings.Join(c.Envs, ","), c.Duration, c.PolicyLatency, c.PolicyJitter, 100*c.ErrorRate, 100*c.RateLimitRate)
	fmt.Fprintf(w, "rollouts: %d started, %d completed, %d exported; load %s, drain %s\n",
		r.Started, r.Completed, r.Exported, r.Load.Round(time.Second), r.Drain.Round(time.Second))
	fmt.Fprintf(w, "kills: %d worker SIGKILLs, %d environment server SIGKILLs\n", r.WorkerKills, r.EnvKills)
	r.printCheckpoints(w)
	for _, e := range r.Envs {
		fmt.Fprintf(w, "%s: applied %d (results account for %d), replayed %d, parked %d, refused %d, %d sessions held%s\n",
			e.Name, e.Applied, e.Want, e.Replayed, e.Parked, e.Refused, e.Sessions, map[bool]string{true: " (replaced: not compared)"}[e.Killed])
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "t\tphase\tprocess\tpid\tRSS MiB\tgoroutines\t")
	for _, s := range r.Samples {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.1f\t%d\t\n", s.At.Round(time.Second), s.Phase, s.Proc, s.PID, float64(s.RSS)/(1<<20), s.Goroutines)
	}
	tw.Flush()
	if len(r.Problems) == 0 {
		fmt.Fprintln(w, "PASS: every rollout completed exactly once, one receipt each, exported once; counters consistent; memory and goroutines flat")
		return
	}
	fmt.Fprintf(w, "FAIL: %d problems\n", len(r.Problems))
	for _, p := range r.Problems {
		fmt.Fprintln(w, "  "+p)
	}
}

func (r *Report) printCheckpoints(w io.Writer) {
	var ok, failed int
	var took []time.Duration
	members := 0
	for _, cp := range r.Checkpoints {
		if cp.Err != "" {
			failed++
			continue
		}
		ok++
		took = append(took, cp.Took)
		members = max(members, cp.Members)
	}
	fmt.Fprintf(w, "checkpoints: %d committed, %d failed", ok, failed)
	if len(took) > 0 {
		slices.Sort(took)
		fmt.Fprintf(w, "; took median %s, max %s; up to %d members", took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond), members)
	}
	fmt.Fprintln(w)
	for _, cp := range r.Checkpoints {
		if cp.Err != "" {
			fmt.Fprintf(w, "  checkpoint %s failed after %s (then resumed: %d rollouts): %s\n", cp.ID, cp.Took.Round(time.Second), cp.Resumed, cp.Err)
		}
	}
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
		rssSeries, gorSeries = append(rssSeries, a), append(gorSeries, g)
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
