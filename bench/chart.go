package bench

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// Chart draws the report as an SVG: on the left the ratio bars (turnstile ÷
// floor, with the 1.0 line), on the right the checkpoint and restore times
// against the set size.
func Chart(r *Report) string {
	var b strings.Builder
	const w, h = 960, 400
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	ratioBars(&b, r, 20, 30, 440, 330)
	cutCurve(&b, r.Cuts, 520, 30, 420, 330)
	b.WriteString("</svg>\n")
	return b.String()
}

func ratioBars(b *strings.Builder, r *Report, x, y, w, h float64) {
	text(b, x, y-10, "turnstile ÷ floor (same server, same run)", "start", true)
	var rows []Row
	for _, row := range r.Rows() {
		if row.Floor != 0 && (strings.HasPrefix(row.Figure, "turn,") || strings.HasPrefix(row.Figure, "throughput") ||
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
		maxR = math.Max(maxR, row.Ratio*1.1)
	}
	labelW, barH := 190.0, math.Min(28, h/float64(len(rows))-6)
	scale := (w - labelW - 50) / maxR
	for i, row := range rows {
		yy := y + float64(i)*(barH+6)
		color := "#4a7ebb"
		if better(row) {
			color = "#3a9a5b"
		} else if row.Ratio > 0 {
			color = "#c9533e"
		}
		text(b, x+labelW-6, yy+barH*0.65, row.Figure, "end", false)
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", x+labelW, yy, row.Ratio*scale, barH, color)
		text(b, x+labelW+row.Ratio*scale+4, yy+barH*0.65, fmt.Sprintf("%.2f×", row.Ratio), "start", false)
	}
	one := x + labelW + scale
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black" stroke-dasharray="4 3"/>`+"\n", one, y-4, one, y+float64(len(rows))*(barH+6))
	text(b, one, y+float64(len(rows))*(barH+6)+14, "1.0 = floor · green: at or better than the floor", "middle", false)
}

// better says whether a row's ratio is on the good side of 1.0.
func better(row Row) bool {
	if strings.HasPrefix(row.Figure, "throughput") {
		return row.Ratio >= 1
	}
	return row.Ratio > 0 && row.Ratio <= 1
}

func cutCurve(b *strings.Builder, cuts []Cut, x, y, w, h float64) {
	text(b, x, y-10, "checkpoint and restore of N in-flight rollouts (s)", "start", true)
	if len(cuts) == 0 {
		text(b, x, y+20, "no checkpoint figures in this run", "start", false)
		return
	}
	series := []struct {
		name, color string
		v           func(Cut) float64
	}{
		{"request → manifest", "#4a7ebb", func(c Cut) float64 { return c.ManifestMS / 1000 }},
		{"cut beyond slowest turn", "#3a9a5b", func(c Cut) float64 { return c.BeyondSlowestMS / 1000 }},
		{"restore → all running", "#c9533e", func(c Cut) float64 { return c.RestoreMS / 1000 }},
	}
	maxN, maxV := 0.0, 1.0
	for _, c := range cuts {
		maxN = math.Max(maxN, float64(c.Rollouts))
		for _, s := range series {
			maxV = math.Max(maxV, s.v(c)*1.1)
		}
	}
	px := func(n float64) float64 { return x + 40 + n/maxN*(w-60) }
	py := func(v float64) float64 { return y + h - 40 - math.Max(v, 0)/maxV*(h-60) }
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", px(0), py(0), px(maxN), py(0))
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", px(0), py(0), px(0), py(maxV))
	text(b, px(0)-4, py(maxV)+4, fmt.Sprintf("%.0f", maxV), "end", false)
	text(b, px(0)-4, py(0)+4, "0", "end", false)
	for _, c := range cuts {
		text(b, px(float64(c.Rollouts)), py(0)+16, fmt.Sprint(c.Rollouts), "middle", false)
	}
	for i, s := range series {
		var pts []string
		for _, c := range cuts {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(float64(c.Rollouts)), py(s.v(c))))
		}
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), s.color)
		for _, p := range pts {
			xy := strings.Split(p, ",")
			fmt.Fprintf(b, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`+"\n", xy[0], xy[1], s.color)
		}
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="12" height="4" fill="%s"/>`+"\n", x+60, y+8+float64(i)*16, s.color)
		text(b, x+78, y+13+float64(i)*16, s.name, "start", false)
	}
	text(b, px(maxN/2), py(0)+32, "rollouts in flight (N)", "middle", false)
}

func text(b *strings.Builder, x, y float64, s, anchor string, bold bool) {
	weight := "normal"
	if bold {
		weight = "bold"
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="%s" font-weight="%s">%s</text>`+"\n", x, y, anchor, weight, html.EscapeString(s))
}
