package bench

import (
	"fmt"
	"math"
	"strings"

	"github.com/turnstile-rl/turnstile/internal/svgchart"
)

// Chart draws the report as an SVG: on the left the ratio bars (turnstile ÷
// lean floor, the headline, with the 1.0 line), on the right the checkpoint and restore times
// against the set size.
func Chart(r *Report) string {
	var b strings.Builder
	const w, h = 960, 400
	svgchart.Begin(&b, w, h)
	ratioBars(&b, r, 20, 30, 440, 330)
	cutCurve(&b, r.Cuts, 520, 30, 420, 330)
	svgchart.End(&b)
	return b.String()
}

func ratioBars(b *strings.Builder, r *Report, x, y, w, h float64) {
	text(b, x, y-10, "turnstile ÷ lean floor (same server, same run)", "start", true)
	var rows []Row
	for _, row := range r.Rows() {
		if row.Lean != 0 && (strings.HasPrefix(row.Figure, "turn,") || strings.HasPrefix(row.Figure, "throughput") ||
			strings.HasPrefix(row.Figure, "history") || strings.HasPrefix(row.Figure, "CPU per turn: temporal")) {
			rows = append(rows, row)
		}
	}
	if len(rows) == 0 {
		text(b, x, y+20, "no floor figures in this run", "start", false)
		return
	}
	maxR := 1.5
	for _, row := range rows {
		maxR = math.Max(maxR, row.LeanRatio*1.1)
	}
	labelW, barH := 190.0, math.Min(28, h/float64(len(rows))-6)
	scale := (w - labelW - 50) / maxR
	for i, row := range rows {
		yy := y + float64(i)*(barH+6)
		color := "#4a7ebb"
		if better(row) {
			color = "#3a9a5b"
		} else if row.LeanRatio > 0 {
			color = "#c9533e"
		}
		text(b, x+labelW-6, yy+barH*0.65, row.Figure, "end", false)
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", x+labelW, yy, row.LeanRatio*scale, barH, color)
		text(b, x+labelW+row.LeanRatio*scale+4, yy+barH*0.65, fmt.Sprintf("%.2f×", row.LeanRatio), "start", false)
	}
	one := x + labelW + scale
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black" stroke-dasharray="4 3"/>`+"\n", one, y-4, one, y+float64(len(rows))*(barH+6))
	text(b, one, y+float64(len(rows))*(barH+6)+14, "1.0 = lean floor · green: at or better than the lean floor", "middle", false)
}

// better says whether a row's lean ratio is on the good side of 1.0.
func better(row Row) bool {
	if strings.HasPrefix(row.Figure, "throughput") {
		return row.LeanRatio >= 1
	}
	return row.LeanRatio > 0 && row.LeanRatio <= 1
}

func cutCurve(b *strings.Builder, cuts []Cut, x, y, w, h float64) {
	panel := svgchart.Panel{X: x, Y: y, W: w, H: h, Title: "checkpoint and restore of N in-flight rollouts (s)",
		XLabel: "rollouts in flight (N)", Empty: "no checkpoint figures in this run"}
	series := []svgchart.Series{
		{Name: "request → manifest", Color: "#4a7ebb"},
		{Name: "cut beyond slowest turn", Color: "#3a9a5b"},
		{Name: "restore → all running", Color: "#c9533e"},
	}
	for _, c := range cuts {
		if c.MaxInFlight > 0 {
			continue // a queued set: its in-flight count is not N
		}
		n := float64(c.Rollouts)
		panel.XTicks = append(panel.XTicks, n)
		for i, v := range []float64{c.ManifestMS / 1000, c.BeyondSlowestMS / 1000, c.RestoreMS / 1000} {
			series[i].X, series[i].Y = append(series[i].X, n), append(series[i].Y, v)
		}
	}
	svgchart.Lines(b, panel, series)
}

func text(b *strings.Builder, x, y float64, s, anchor string, bold bool) {
	svgchart.Text(b, x, y, s, anchor, bold)
}
