// Package svgchart draws the plain SVG charts of the bench and the soak:
// an SVG document, text, and a panel of line series over a shared x axis.
package svgchart

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// Begin starts a white w×h SVG document in b; End closes it.
func Begin(b *strings.Builder, w, h int) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
}

// End closes the document Begin started.
func End(b *strings.Builder) { b.WriteString("</svg>\n") }

// Text writes s at (x, y) with the given anchor (start, middle, end).
func Text(b *strings.Builder, x, y float64, s, anchor string, bold bool) {
	weight := "normal"
	if bold {
		weight = "bold"
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="%s" font-weight="%s">%s</text>`+"\n", x, y, anchor, weight, html.EscapeString(s))
}

// Series is one named line: Y[i] at X[i].
type Series struct {
	Name, Color string
	X, Y        []float64
}

// Panel is the box a line chart is drawn in, with its labels.
type Panel struct {
	X, Y, W, H float64
	Title      string
	XLabel     string
	// XTicks are the x values labelled under the axis.
	XTicks []float64
	// Empty is written instead of the chart when no series has a point.
	Empty string
}

// Lines draws series in p: axes from 0, the y axis up to 10% above the
// largest value (at least 1), a dot on every point and a legend.
func Lines(b *strings.Builder, p Panel, series []Series) {
	Text(b, p.X, p.Y-10, p.Title, "start", true)
	maxX, maxY, points := 0.0, 1.0, 0
	for _, s := range series {
		for i := range s.X {
			maxX, maxY = math.Max(maxX, s.X[i]), math.Max(maxY, s.Y[i]*1.1)
			points++
		}
	}
	if points == 0 || maxX == 0 {
		Text(b, p.X, p.Y+20, p.Empty, "start", false)
		return
	}
	px := func(v float64) float64 { return p.X + 40 + v/maxX*(p.W-60) }
	py := func(v float64) float64 { return p.Y + p.H - 40 - math.Max(v, 0)/maxY*(p.H-60) }
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", px(0), py(0), px(maxX), py(0))
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", px(0), py(0), px(0), py(maxY))
	Text(b, px(0)-4, py(maxY)+4, fmt.Sprintf("%.0f", maxY), "end", false)
	Text(b, px(0)-4, py(0)+4, "0", "end", false)
	for _, t := range p.XTicks {
		Text(b, px(t), py(0)+16, fmt.Sprintf("%g", t), "middle", false)
	}
	for i, s := range series {
		pts := make([]string, len(s.X))
		for j := range s.X {
			pts[j] = fmt.Sprintf("%.1f,%.1f", px(s.X[j]), py(s.Y[j]))
		}
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), s.Color)
		for j := range s.X {
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", px(s.X[j]), py(s.Y[j]), s.Color)
		}
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="12" height="4" fill="%s"/>`+"\n", p.X+60, p.Y+8+float64(i)*16, s.Color)
		Text(b, p.X+78, p.Y+13+float64(i)*16, s.Name, "start", false)
	}
	Text(b, px(maxX/2), py(0)+32, p.XLabel, "middle", false)
}

// Palette is a list of distinguishable line colours, used in turn.
var Palette = []string{"#4a7ebb", "#3a9a5b", "#c9533e", "#8e6bb8", "#d0a03a", "#4aa8a8", "#777777"}
