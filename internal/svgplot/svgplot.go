// Package svgplot writes small line charts as standalone SVG: series of
// (x, y) points on linear axes with ticks and labels, a legend, a title and
// shaded x ranges (an outage window, say).
//
// The output is a pure function of the [Chart]: the same chart always gives
// the same bytes, so a chart can be compared in tests or checked in. Every
// piece of text is XML-escaped, and points whose coordinates are NaN or
// infinite are left out, breaking the line, rather than corrupting the
// drawing.
package svgplot

import (
	"bytes"
	"encoding/xml"
	"io"
	"math"
	"strconv"
)

// Point is one (X, Y) sample of a [Series]; the zero value is the origin.
type Point struct {
	X, Y float64
}

// Series is one line of a [Chart]. Its zero value is an unnamed, empty
// series, drawn as nothing but a legend entry.
type Series struct {
	// Name labels the series in the legend; empty names are left out of
	// it.
	Name string
	// Points are drawn joined in the order given. A point with a NaN or
	// infinite coordinate is skipped and ends the current stretch of line.
	Points []Point
	// Color is any SVG paint, such as "#0072B2"; empty picks the next
	// colour of a colour-blind-safe palette.
	Color string
	// Dashed draws the line dashed, for reference lines such as a limit.
	Dashed bool
}

// Band is a shaded range of X across the whole height of the plot. Its zero
// value is an unlabelled band of no width at 0.
type Band struct {
	// From and To bound the range; their order does not matter. A band
	// with a NaN or infinite bound is not drawn.
	From, To float64
	// Label is written at the top of the band; empty means none.
	Label string
}

// Chart is a line chart. The zero value is a valid, empty 800×450 chart. A
// Chart is only read by [Chart.WriteTo], so one may be written from several
// goroutines as long as none modifies it.
type Chart struct {
	// Title is written above the plot; empty means none.
	Title string
	// XLabel and YLabel name the axes; empty means none.
	XLabel, YLabel string
	// Width and Height are the size in pixels; values below 200 (zero
	// included) give 800×450 as a whole, and values above 10000 are
	// clamped to it.
	Width, Height int
	// Series are the lines, drawn in order, so later ones lie on top.
	Series []Series
	// Bands are shaded behind the lines.
	Bands []Band
}

// palette is the Okabe–Ito set of colours, told apart by most forms of
// colour blindness.
var palette = [...]string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442"}

const (
	defaultWidth, defaultHeight = 800, 450
	minSize, maxSize            = 200, 10000
	charWidth                   = 7 // rough advance of a 12px sans-serif character
	tickLen                     = 5
)

// WriteTo writes the chart as a standalone SVG document. It returns the
// number of bytes written and the first write error.
func (c *Chart) WriteTo(w io.Writer) (int64, error) {
	var b bytes.Buffer
	c.render(&b)
	n, err := w.Write(b.Bytes())
	return int64(n), err
}

// layout is the chart's geometry: the pixel box of the plot area and the
// data ranges mapped onto it.
type layout struct {
	width, height          int
	left, right, top, bot  float64 // plot area in pixels
	xmin, xmax, ymin, ymax float64
}

func (c *Chart) size() (int, int) {
	if c.Width < minSize || c.Height < minSize {
		return defaultWidth, defaultHeight
	}
	return min(c.Width, maxSize), min(c.Height, maxSize)
}

func (c *Chart) layout() layout {
	l := layout{}
	l.width, l.height = c.size()
	legend := 0
	for _, s := range c.Series {
		legend = max(legend, len([]rune(s.Name)))
	}
	l.left, l.top = 70, 20
	if c.Title != "" {
		l.top = 40
	}
	l.right = float64(l.width) - 20
	if legend > 0 {
		// Room for the legend to the right of the plot, but never more
		// than a third of the chart.
		l.right -= min(float64(30+legend*charWidth), float64(l.width)/3)
	}
	l.bot = float64(l.height) - 50

	l.xmin, l.xmax = math.Inf(1), math.Inf(-1)
	l.ymin, l.ymax = 0, math.Inf(-1) // the y axis always shows 0
	for _, s := range c.Series {
		for _, p := range s.Points {
			if finite(p.X) && finite(p.Y) {
				l.xmin, l.xmax = min(l.xmin, p.X), max(l.xmax, p.X)
				l.ymin, l.ymax = min(l.ymin, p.Y), max(l.ymax, p.Y)
			}
		}
	}
	for _, b := range c.Bands {
		if finite(b.From) && finite(b.To) {
			l.xmin, l.xmax = min(l.xmin, b.From, b.To), max(l.xmax, b.From, b.To)
		}
	}
	l.xmin, l.xmax = widen(l.xmin, l.xmax)
	l.ymin, l.ymax = widen(l.ymin, l.ymax)
	// Round the y range out to whole ticks, so that the highest line has
	// a labelled gridline above it.
	if step := tickStep(l.ymin, l.ymax, l.yTicks()); step > 0 {
		if v := math.Floor(l.ymin/step) * step; finite(v) {
			l.ymin = v
		}
		if v := math.Ceil(l.ymax/step) * step; finite(v) {
			l.ymax = v
		}
	}
	return l
}

// xTicks and yTicks are how many ticks suit each axis: one per 80 pixels
// across, one per 50 up.
func (l layout) xTicks() int { return max(2, int(l.right-l.left)/80) }
func (l layout) yTicks() int { return max(2, int(l.bot-l.top)/50) }

// widen turns an empty or single-valued range into one that can be drawn.
func widen(lo, hi float64) (float64, float64) {
	switch {
	case lo > hi: // nothing finite was seen
		return 0, 1
	case lo == hi:
		d := math.Abs(lo) / 2
		if d == 0 {
			d = 1
		}
		return lo - d, hi + d
	}
	return lo, hi
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// frac returns where v lies between lo and hi, as a fraction. Halving keeps
// hi-lo finite for ranges as wide as the float64s.
func frac(v, lo, hi float64) float64 {
	return (v/2 - lo/2) / (hi/2 - lo/2)
}

func (l layout) px(x float64) float64 { return l.left + frac(x, l.xmin, l.xmax)*(l.right-l.left) }
func (l layout) py(y float64) float64 { return l.bot - frac(y, l.ymin, l.ymax)*(l.bot-l.top) }

func (c *Chart) render(b *bytes.Buffer) {
	l := c.layout()
	w, h := strconv.Itoa(l.width), strconv.Itoa(l.height)
	b.WriteString(`<svg xmlns="http://www.w3.org/2000/svg" width="` + w + `" height="` + h +
		`" viewBox="0 0 ` + w + ` ` + h + `" font-family="sans-serif" font-size="12">` + "\n")
	if c.Title != "" {
		b.WriteString("<title>")
		escape(b, c.Title)
		b.WriteString("</title>\n")
	}
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	if c.Title != "" {
		text(b, float64(l.width)/2, 24, "middle", `font-size="16"`, c.Title)
	}
	c.renderBands(b, l)
	renderAxes(b, l, c.XLabel, c.YLabel)
	c.renderSeries(b, l)
	c.renderLegend(b, l)
	b.WriteString("</svg>\n")
}

func (c *Chart) renderBands(b *bytes.Buffer, l layout) {
	if len(c.Bands) == 0 {
		return
	}
	b.WriteString(`<g class="bands" fill="#000000" fill-opacity="0.08">` + "\n")
	for _, band := range c.Bands {
		if !finite(band.From) || !finite(band.To) {
			continue
		}
		x0, x1 := l.px(min(band.From, band.To)), l.px(max(band.From, band.To))
		b.WriteString(`<rect x="` + num(x0) + `" y="` + num(l.top) + `" width="` + num(x1-x0) +
			`" height="` + num(l.bot-l.top) + `"/>` + "\n")
		if band.Label != "" {
			text(b, (x0+x1)/2, l.top+14, "middle", `fill="#444444" fill-opacity="1"`, band.Label)
		}
	}
	b.WriteString("</g>\n")
}

func renderAxes(b *bytes.Buffer, l layout, xlabel, ylabel string) {
	b.WriteString(`<g class="axes" stroke="#000000" stroke-width="1">` + "\n")
	b.WriteString(`<rect x="` + num(l.left) + `" y="` + num(l.top) + `" width="` + num(l.right-l.left) +
		`" height="` + num(l.bot-l.top) + `" fill="none"/>` + "\n")
	for _, t := range ticks(l.xmin, l.xmax, l.xTicks()) {
		x := l.px(t.v)
		line(b, x, l.bot, x, l.bot+tickLen, "")
		text(b, x, l.bot+tickLen+13, "middle", `stroke="none"`, t.label)
	}
	for _, t := range ticks(l.ymin, l.ymax, l.yTicks()) {
		y := l.py(t.v)
		line(b, l.left, y, l.right, y, `stroke="#dddddd"`)
		line(b, l.left-tickLen, y, l.left, y, "")
		text(b, l.left-tickLen-3, y+4, "end", `stroke="none"`, t.label)
	}
	b.WriteString("</g>\n")
	if xlabel != "" {
		text(b, (l.left+l.right)/2, float64(l.height)-12, "middle", "", xlabel)
	}
	if ylabel != "" {
		y := (l.top + l.bot) / 2
		text(b, 16, y, "middle", `transform="rotate(-90 16 `+num(y)+`)"`, ylabel)
	}
}

func (c *Chart) renderSeries(b *bytes.Buffer, l layout) {
	b.WriteString(`<g class="series" fill="none" stroke-width="1.5" stroke-linejoin="round">` + "\n")
	for i, s := range c.Series {
		var pts bytes.Buffer
		flush := func() {
			if pts.Len() > 0 {
				b.WriteString(`<polyline stroke="`)
				escape(b, color(s, i))
				b.WriteString(`"`)
				if s.Dashed {
					b.WriteString(` stroke-dasharray="6 4"`)
				}
				b.WriteString(` points="`)
				b.Write(pts.Bytes())
				b.WriteString(`"/>` + "\n")
				pts.Reset()
			}
		}
		for _, p := range s.Points {
			if !finite(p.X) || !finite(p.Y) {
				flush()
				continue
			}
			if pts.Len() > 0 {
				pts.WriteByte(' ')
			}
			pts.WriteString(num(l.px(p.X)) + "," + num(l.py(p.Y)))
		}
		flush()
	}
	b.WriteString("</g>\n")
}

func (c *Chart) renderLegend(b *bytes.Buffer, l layout) {
	b.WriteString(`<g class="legend">` + "\n")
	y := l.top + 10
	for i, s := range c.Series {
		if s.Name == "" {
			continue
		}
		x := l.right + 12
		b.WriteString(`<line x1="` + num(x) + `" y1="` + num(y) + `" x2="` + num(x+18) + `" y2="` + num(y) +
			`" stroke-width="2" stroke="`)
		escape(b, color(s, i))
		b.WriteString(`"`)
		if s.Dashed {
			b.WriteString(` stroke-dasharray="6 4"`)
		}
		b.WriteString("/>\n")
		text(b, x+24, y+4, "start", "", s.Name)
		y += 18
	}
	b.WriteString("</g>\n")
}

func color(s Series, i int) string {
	if s.Color != "" {
		return s.Color
	}
	return palette[i%len(palette)]
}

func line(b *bytes.Buffer, x1, y1, x2, y2 float64, attrs string) {
	b.WriteString(`<line x1="` + num(x1) + `" y1="` + num(y1) + `" x2="` + num(x2) + `" y2="` + num(y2) + `"`)
	if attrs != "" {
		b.WriteString(" " + attrs)
	}
	b.WriteString("/>\n")
}

// text writes s escaped; attrs are trusted, constant attributes.
func text(b *bytes.Buffer, x, y float64, anchor, attrs, s string) {
	b.WriteString(`<text x="` + num(x) + `" y="` + num(y) + `" text-anchor="` + anchor + `"`)
	if attrs != "" {
		b.WriteString(" " + attrs)
	}
	b.WriteString(">")
	escape(b, s)
	b.WriteString("</text>\n")
}

// escape writes s as XML character data, also fit for a quoted attribute
// value: xml.EscapeText escapes quotes and replaces characters XML cannot
// hold.
func escape(b *bytes.Buffer, s string) {
	_ = xml.EscapeText(b, []byte(s)) // a bytes.Buffer does not fail
}

// num formats a pixel coordinate to a tenth of a pixel.
func num(v float64) string {
	s := strconv.FormatFloat(v, 'f', 1, 64)
	if s == "-0.0" {
		return "0.0"
	}
	return s
}

type tick struct {
	v     float64
	label string
}

// tickStep returns the spacing of about n ticks across [lo, hi]: the
// smallest of 1, 2 or 5 times a power of ten that is at least (hi-lo)/n. It
// returns 0 when there is none.
func tickStep(lo, hi float64, n int) float64 {
	raw := (hi/2 - lo/2) / float64(n) * 2
	if !finite(raw) || raw <= 0 {
		return 0
	}
	base := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if step := m * base; step >= raw && finite(step) {
			return step
		}
	}
	return 0
}

// ticks returns the multiples of [tickStep] in [lo, hi], with labels that
// show just enough decimals to tell them apart.
func ticks(lo, hi float64, n int) []tick {
	step := tickStep(lo, hi, n)
	if step == 0 {
		return nil
	}
	first := math.Ceil(lo / step)
	var out []tick
	// n+2 bounds the loop whatever rounding does to the range.
	for i := 0.0; i <= float64(n)+2; i++ {
		v := (first + i) * step
		if v > hi || !finite(v) {
			break
		}
		if math.Abs(v) < step/1e9 {
			v = 0 // not -0 or 1e-17 from rounding
		}
		out = append(out, tick{v, label(v, step)})
	}
	return out
}

func label(v, step float64) string {
	if step >= 1e-4 && math.Abs(v) < 1e12 {
		dec := max(0, int(-math.Floor(math.Log10(step))))
		return strconv.FormatFloat(v, 'f', dec, 64)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// WriteStacked writes several charts as one SVG document, one below the
// other, each at its own size. It returns the number of bytes written and
// the first write error.
func WriteStacked(w io.Writer, charts ...*Chart) (int64, error) {
	width, height := 0, 0
	for _, c := range charts {
		cw, ch := c.size()
		width = max(width, cw)
		height += ch
	}
	var b bytes.Buffer
	ws, hs := strconv.Itoa(width), strconv.Itoa(height)
	b.WriteString(`<svg xmlns="http://www.w3.org/2000/svg" width="` + ws + `" height="` + hs +
		`" viewBox="0 0 ` + ws + ` ` + hs + `">` + "\n")
	y := 0
	for _, c := range charts {
		var one bytes.Buffer
		c.render(&one)
		// Place the chart's own <svg> element at its offset.
		b.WriteString(`<svg y="` + strconv.Itoa(y) + `"`)
		b.Write(bytes.TrimPrefix(one.Bytes(), []byte("<svg")))
		_, ch := c.size()
		y += ch
	}
	b.WriteString("</svg>\n")
	n, err := w.Write(b.Bytes())
	return int64(n), err
}
