package bench

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"text/tabwriter"

	"github.com/turnstile-rl/turnstile/internal/atomicfile"
)

// Names of the files a run writes into its output directory.
const (
	JSONFile = "bench.json"
	CSVFile  = "bench.csv"
	SVGFile  = "bench.svg"
)

// Row is one line of the ratio table. LeanRatio is turnstile / lean floor,
// the headline every target is against; Ratio is turnstile / floor (each 0
// when there is no such figure). Target says which way is better and the
// target.
type Row struct {
	Figure    string  `json:"figure"`
	Unit      string  `json:"unit"`
	Floor     float64 `json:"floor"`
	Lean      float64 `json:"lean_floor"`
	Turnstile float64 `json:"turnstile"`
	Ratio     float64 `json:"ratio"`
	LeanRatio float64 `json:"lean_ratio"`
	Target    string  `json:"target"`
}

// Rows flattens the report into the ratio table.
func (r *Report) Rows() []Row {
	var rows []Row
	pair := func(fig, unit string, p Pair, target string) {
		row := Row{Figure: fig, Unit: unit, Floor: p.Floor, Lean: p.Lean, Turnstile: p.Turnstile, Target: target}
		if p.Floor != 0 {
			row.Ratio = p.Turnstile / p.Floor
		}
		if p.Lean != 0 {
			row.LeanRatio = p.Turnstile / p.Lean
		}
		rows = append(rows, row)
	}
	if l := r.Latency; l != nil {
		pair("turn, 1 rollout (steady)", "ms", l.TurnMS, "ratio ≤ 1.0 (stretch 0.6)")
		pair("turn, 1 rollout (end to end)", "ms", l.EndToEnd, "lower is better")
		if l.Streamed.Turnstile != 0 {
			pair("turn, 1 rollout, streamed with token capture", "ms", l.Streamed, "ratio ≤ the unstreamed row's")
		}
	}
	if t := r.Through; t != nil {
		pair(fmt.Sprintf("throughput, %d rollouts", r.Config.Concurrency), "turns/s", t.TurnsPerSec, "ratio ≥ 1.0 (stretch 1.5)")
		pair("p95 rollout duration", "s", t.P95RolloutS, "lower is better")
		for _, name := range []string{"temporal", "worker", "envserver", "policyserver"} {
			if p, ok := t.CPUMSPerTurn[name]; ok {
				pair("CPU per turn: "+name, "ms", p, "lower is better")
			}
		}
		if w := t.Tasks; w != nil {
			pair("workflow task schedule-to-start (median)", "ms", w.WorkflowScheduleToStart, "lower is better")
			pair("workflow task start-to-close (median)", "ms", w.WorkflowStartToClose, "lower is better")
			pair("activity schedule-to-start (median)", "ms", w.ActivityScheduleToStart, "lower is better")
			pair("activity start-to-close (median)", "ms", w.ActivityStartToClose, "lower is better")
		}
	}
	if h := r.History; h != nil {
		for i, at := range h.At {
			pair(fmt.Sprintf("history at turn %d", at), "bytes/turn", h.BytesPerTurn[i], "turnstile ≤ 2048, flat ±10%")
			pair(fmt.Sprintf("events at turn %d", at), "events/turn", h.EventsPerTurn[i], "lower is better")
			if i < len(h.StreamedBytesPerTurn) && h.StreamedBytesPerTurn[i].Turnstile != 0 {
				pair(fmt.Sprintf("history at turn %d, streamed with token capture", at), "bytes/turn", h.StreamedBytesPerTurn[i], "≤ the unstreamed row")
			}
		}
		if f := h.Fixed; f != nil {
			label := fmt.Sprintf("%d-turn rollout", FixedCostTurns)
			pair(label+": history events", "events", f.Events, "≤ 30")
			pair(label+": history bytes", "bytes", f.Bytes, fmt.Sprintf("≤ %d", 2048*FixedCostTurns))
			pair(label+": visibility writes", "writes", f.VisibilityWrites, "≤ 4")
		}
	}
	for _, c := range r.Cuts {
		rows = append(rows, c.rows()...)
	}
	if f := r.Feed; f != nil {
		// The feed's baseline is the plain update loop, in the lean
		// floor's column.
		pair(fmt.Sprintf("feed, %d held: delivered and acknowledged (gateway; lean: plain update loop)", f.Held), "results/s", f.ResultsPerSec, "≥ 300")
		rows = append(rows, Row{Figure: fmt.Sprintf("feed, %d held: through the gateway, acknowledging each page while reading the next", f.Held), Unit: "results/s", Turnstile: f.Pipelined, Target: "≥ 300"},
			Row{Figure: fmt.Sprintf("feed, %d held: client library in process", f.Held), Unit: "results/s", Turnstile: f.InProcess, Target: ""})
	}
	for _, a := range r.Admission {
		rows = append(rows, a.rows()...)
	}
	for _, m := range r.Server {
		rows = append(rows, m.rows()...)
	}
	return rows
}

// rows are a busy set's lines of the table.
func (c Cut) rows() []Row {
	var rows []Row
	label := fmt.Sprintf("checkpoint %d", c.Rollouts)
	if c.MaxInFlight > 0 {
		label = fmt.Sprintf("checkpoint %d queued, max_in_flight %d", c.Rollouts, c.MaxInFlight)
	}
	one := func(fig, unit string, v float64, target string) {
		rows = append(rows, Row{Figure: label + ": " + fig, Unit: unit, Turnstile: v, Target: target})
	}
	if c.MaxInFlight > 0 {
		one("submit every rollout", "ms", c.SubmitMS, "")
		one("every running rollout past its first turn", "ms", c.PastFirstTurnMS, "")
		one("in flight at the cut", "rollouts", float64(c.InFlight), "")
		one("queued at the cut", "rollouts", float64(c.Queued), "")
	} else {
		one("start every rollout", "ms", c.SubmitMS, "")
		one("every rollout past its first turn", "ms", c.PastFirstTurnMS, "≤ 60000 at 1,000")
	}
	one("turn latency p50", "ms", c.TurnP50MS, "")
	one("turn latency p95", "ms", c.TurnP95MS, "")
	one("cut beyond slowest turn", "ms", c.BeyondSlowestMS, "≤ 5000 at 1,000")
	one("cut (workflow)", "ms", c.CutMS, "")
	one("request to manifest", "ms", c.ManifestMS, "")
	one("request to resumed", "ms", c.CheckpointMS, "")
	one("request to released (visibility)", "ms", c.ReleasedMS, "")
	one("first task waited", "ms", c.QueuedMS, "≈ 0")
	one("bytes", "B", float64(c.Bytes), "")
	one("restore after kill to all running", "ms", c.RestoreMS, "≤ 10000 at 1,000")
	one("restore after kill to released (visibility)", "ms", c.RestoreReleasedMS, "")
	return rows
}

// rows are an admission row's lines of the table.
func (a AdmissionRow) rows() []Row {
	label := fmt.Sprintf("admission, %d short rollouts at max_in_flight %d, pollers %s", a.Submitted, a.MaxInFlight, pollerLabel(a.Pollers))
	return []Row{
		{Figure: label + ": throughput", Unit: "turns/s", Turnstile: a.TurnsPerSec, Target: "higher is better"},
		{Figure: label + ": first task wait p50", Unit: "ms", Turnstile: a.FirstTaskP50MS, Target: "lower is better"},
		{Figure: label + ": first task wait p95", Unit: "ms", Turnstile: a.FirstTaskP95MS, Target: "lower is better"},
		{Figure: label + ": workflow task wait p50", Unit: "ms", Turnstile: a.TaskWaitP50MS, Target: "lower is better"},
		{Figure: label + ": workflow task wait p95", Unit: "ms", Turnstile: a.TaskWaitP95MS, Target: "lower is better"},
	}
}

// rows are the server's figures of one row that the table shows (the
// log line and bench.json have them all); the schedule-to-start percentile
// is an upper bucket edge.
func (m ServerMetrics) rows() []Row {
	one := func(fig, unit string, v float64) Row {
		return Row{Figure: "server, " + m.Row + ": " + fig, Unit: unit, Turnstile: v}
	}
	return []Row{
		one("workflow task schedule-to-start p95 ≤", "ms", m.WorkflowScheduleToStartP95MS),
		one("persistence mean", "ms", m.PersistenceMeanMS),
		one("RespondWorkflowTaskCompleted mean", "ms", m.CompleteTaskMeanMS),
	}
}

// PrintTable writes the ratio table: turnstile against the lean floor
// (the headline), then against the floor.
func PrintTable(w io.Writer, r *Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "figure\tunit\tturnstile\tlean floor\t÷ lean\tfloor\t÷ floor\ttarget\t")
	for _, row := range r.Rows() {
		lean, leanRatio := orDash(row.Lean, row.LeanRatio)
		floor, ratio := orDash(row.Floor, row.Ratio)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", row.Figure, row.Unit, num(row.Turnstile), lean, leanRatio, floor, ratio, row.Target)
	}
	_ = tw.Flush()
	for _, w2 := range r.Warnings {
		fmt.Fprintln(w, "warning:", w2)
	}
}

// orDash prints a baseline figure and its ratio, or dashes without one.
func orDash(base, ratio float64) (string, string) {
	if base == 0 {
		return "—", "—"
	}
	return num(base), fmt.Sprintf("%.2f×", ratio)
}

func num(v float64) string {
	switch {
	case v >= 100 || v <= -100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	default:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
}

// WriteFiles writes bench.json, bench.csv and bench.svg into dir.
func WriteFiles(dir string, r *Report) error {
	data, err := json.MarshalIndent(struct {
		*Report
		Rows []Row `json:"rows"`
	}{r, r.Rows()}, "", "  ")
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, JSONFile), append(data, '\n'), 0o644); err != nil {
		return err
	}
	if err := writeCSV(filepath.Join(dir, CSVFile), r.Rows()); err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, SVGFile), []byte(Chart(r)), 0o644)
}

func writeCSV(path string, rows []Row) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"figure", "unit", "floor", "lean_floor", "turnstile", "ratio", "lean_ratio", "target"})
	for _, r := range rows {
		_ = w.Write([]string{r.Figure, r.Unit, fmtF(r.Floor), fmtF(r.Lean), fmtF(r.Turnstile), fmtF(r.Ratio), fmtF(r.LeanRatio), r.Target})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

func fmtF(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
