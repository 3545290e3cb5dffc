// Package svgplot writes small line charts as standalone SVG: series of
// (x, y) points on linear or logarithmic axes with ticks and labels, a
// legend, a title, labelled reference lines (percentiles, say) and shaded x
// ranges (an outage window). A [Grid] lays charts out as small multiples.
//
// The output is a pure function of the [Chart]: the same chart always gives
// the same bytes, so a chart can be compared in tests or checked in. Every
// piece of text is XML-escaped, and points whose coordinates are NaN or
// infinite (or not positive, on a log axis) are left out, breaking the
// line, rather than corrupting the drawing.
//
// The SVG keeps to the subset that browsers, resvg, librsvg and
// ImageMagick draw alike: one <svg> element, groups moved only by
// transform="translate(…)", solid colours without opacity, and plain <text>
// without <tspan> or baseline tricks.
package svgplot

import (
	"bytes"
	"cmp"
	"encoding/xml"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
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
	// Color is any SVG paint, such as "#332288"; empty picks the
	// series' own colour and dash pattern from a colour-blind-safe
	// palette, so that no two series of a chart look alike.
	Color string
	// Dashed draws the line dashed, for reference lines such as a limit.
	Dashed bool
	// Steps draws the line as a staircase: each point's Y holds until the
	// next point's X, then the line goes straight up or down. It suits a
	// value that changes only at the samples, such as the fraction of
	// calls slower than x, where a slope would show values that never
	// occurred.
	Steps bool
}

// Band is a shaded range of X across the whole height of the plot. Its zero
// value is an unlabelled band of no width at 0.
type Band struct {
	// From and To bound the range; their order does not matter. A band
	// with a NaN or infinite bound is not drawn.
	From, To float64
	// Label is written at the top of the band; empty means none.
	Label string
	// Color is the band's fill, a solid colour such as "#fde3c8"; empty
	// means light grey.
	Color string
	// Legend, if not empty, names the band in the legend with a swatch
	// of its colour; bands of the same legend share one entry.
	Legend string
	// Strip draws the band as a strip along the bottom of the plot
	// rather than across its height, over the other bands: a mark that
	// should not hide them.
	Strip bool
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
	// Marks are labelled reference lines drawn over the bands and under
	// the lines.
	Marks []Mark
	// XLog and YLog put an axis on a logarithmic scale, for values that
	// span decades, such as a latency tail. A log axis leaves out values
	// that are not positive, and its ends are 1, 2 or 5 times a power of
	// ten.
	XLog, YLog bool
	// YMax, if greater than the data's largest Y, raises the top of a
	// linear y axis to it: charts drawn side by side share a scale by
	// setting it to the largest Y of them all.
	YMax float64
}

// Mark is a thin labelled reference line across the whole plot: vertical at
// X = Value, or horizontal at Y = Value. The zero value is an unlabelled
// vertical line at X = 0. A mark outside the data's range widens the axis
// to show it; one with a non-finite Value is not drawn.
type Mark struct {
	// Horizontal draws the line at Y = Value instead of X = Value.
	Horizontal bool
	Value      float64
	// Label is written beside the line's end; empty means none.
	Label string
}

// palette is Paul Tol's "muted" qualitative scheme, nine colours told
// apart by most forms of colour blindness
// (https://personal.sron.nl/~pault/#sec:qualitative), ordered so that the
// darker ones come first: they show best as thin lines on white.
var palette = [...]string{"#332288", "#CC6677", "#117733", "#882255", "#44AA99", "#999933", "#AA4499", "#88CCEE", "#DDCC77"}

// dashes are the dash patterns of the series that take their colour from
// the palette, one per series, so that lines of near colours (and every
// line, in a grey print) are still told apart. The first is solid.
var dashes = [...]string{"", "9 3", "2 2", "9 3 2 3", "5 2", "14 3 3 3 3 3", "2 5", "18 4", "5 2 1 2"}

const (
	defaultWidth, defaultHeight = 800, 450
	minSize, maxSize            = 200, 10000
	charWidth                   = 7 // rough advance of a 12px sans-serif character
	tickLen                     = 5
	legendSwatch                = 28 // length of a legend's sample line: long enough to show its dashes
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
// data ranges mapped onto it. On a log axis the range is of log10 of the
// values.
type layout struct {
	width, height          int
	left, right, top, bot  float64 // plot area in pixels
	xmin, xmax, ymin, ymax float64
	xlog, ylog             bool
}

// scale returns v on an axis's scale, and whether it can be drawn there.
func scale(v float64, log bool) (float64, bool) {
	if log {
		if !(v > 0) {
			return 0, false
		}
		v = math.Log10(v)
	}
	return v, finite(v)
}

// point returns p on the chart's scales, and whether it can be drawn.
func (l layout) point(p Point) (x, y float64, ok bool) {
	x, okx := scale(p.X, l.xlog)
	y, oky := scale(p.Y, l.ylog)
	return x, y, okx && oky
}

func (c *Chart) size() (int, int) {
	if c.Width < minSize || c.Height < minSize {
		return defaultWidth, defaultHeight
	}
	return min(c.Width, maxSize), min(c.Height, maxSize)
}

func (c *Chart) layout() layout {
	l := layout{xlog: c.XLog, ylog: c.YLog}
	l.width, l.height = c.size()
	legend := 0
	for _, s := range c.Series {
		legend = max(legend, len([]rune(s.Name)))
	}
	for _, b := range c.Bands {
		legend = max(legend, len([]rune(b.Legend)))
	}
	l.left, l.top = 70, 20
	if c.Title != "" {
		l.top = 40
	}
	if c.YLabel != "" {
		l.top += 18 // the y label's line, above the plot
	}
	l.right = float64(l.width) - 20
	if legend > 0 {
		// Room for the legend to the right of the plot, but never more
		// than a third of the chart.
		l.right -= min(float64(legendSwatch+18+legend*charWidth), float64(l.width)/3)
	}
	l.bot = float64(l.height) - 50

	l.xmin, l.xmax = math.Inf(1), math.Inf(-1)
	l.ymin, l.ymax = math.Inf(1), math.Inf(-1)
	if !l.ylog {
		l.ymin = 0 // a linear y axis always shows 0
	}
	for _, s := range c.Series {
		for _, p := range s.Points {
			if x, y, ok := l.point(p); ok {
				l.xmin, l.xmax = min(l.xmin, x), max(l.xmax, x)
				l.ymin, l.ymax = min(l.ymin, y), max(l.ymax, y)
			}
		}
	}
	for _, b := range c.Bands {
		from, ok1 := scale(b.From, l.xlog)
		to, ok2 := scale(b.To, l.xlog)
		if ok1 && ok2 {
			l.xmin, l.xmax = min(l.xmin, from, to), max(l.xmax, from, to)
		}
	}
	for _, m := range c.Marks {
		v, ok := scale(m.Value, m.Horizontal && l.ylog || !m.Horizontal && l.xlog)
		switch {
		case !ok:
		case m.Horizontal:
			l.ymin, l.ymax = min(l.ymin, v), max(l.ymax, v)
		default:
			l.xmin, l.xmax = min(l.xmin, v), max(l.xmax, v)
		}
	}
	if !l.ylog && finite(c.YMax) && c.YMax > l.ymax {
		l.ymax = c.YMax
	}
	l.xmin, l.xmax = widen(l.xmin, l.xmax)
	l.ymin, l.ymax = widen(l.ymin, l.ymax)
	// Round the y range out to whole ticks, so that the highest line has
	// a labelled gridline above it; a log axis to 1, 2 or 5 times a power
	// of ten, on both axes, so that its ends are labelled without a decade
	// of empty space (a tail from 0.3ms starts at 0.2, not 0.1 or 0.01).
	if l.xlog {
		l.xmin, l.xmax = logEnds(l.xmin, l.xmax)
	}
	if l.ylog {
		l.ymin, l.ymax = logEnds(l.ymin, l.ymax)
	} else if step := tickStep(l.ymin, l.ymax, l.yTicks()); step > 0 {
		if v := math.Floor(l.ymin/step) * step; finite(v) {
			l.ymin = v
		}
		if v := math.Ceil(l.ymax/step) * step; finite(v) {
			l.ymax = v
		}
	}
	return l
}

// logEnds rounds a range of log10 values out to 1, 2 or 5 times a power of
// ten, within those a float64 holds (1e-323 to 1e308).
func logEnds(lo, hi float64) (float64, float64) {
	lo, hi = max(logRound(lo, false), -323), min(logRound(hi, true), 308)
	if lo >= hi {
		if hi == 308 {
			lo = hi - 1
		} else {
			hi = lo + 1
		}
	}
	return lo, hi
}

// logMantissas are the steps within a decade that a log axis ends on.
var logMantissas = [...]float64{1, 2, 5, 10}

// logRound rounds the log10 value v down (or up) to the log10 of 1, 2 or 5
// times a power of ten. A value within a millionth of a decade of one is
// taken as that one, so that rounding error does not cost a step.
func logRound(v float64, up bool) float64 {
	if !finite(v) {
		return v
	}
	const eps = 1e-6
	e := math.Floor(v + eps)
	if up {
		for _, m := range logMantissas {
			if s := e + math.Log10(m); s >= v-eps {
				return s
			}
		}
		return e + 1
	}
	for i := len(logMantissas) - 2; i >= 0; i-- {
		if s := e + math.Log10(logMantissas[i]); s <= v+eps {
			return s
		}
	}
	return e
}

// xTicks and yTicks are how many ticks suit each axis: one per 45 pixels
// across, one per 50 up.
func (l layout) xTicks() int { return max(2, int(l.right-l.left)/45) }
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

// px and py map a value already on the axis's scale to pixels.
func (l layout) px(x float64) float64 { return l.left + frac(x, l.xmin, l.xmax)*(l.right-l.left) }
func (l layout) py(y float64) float64 { return l.bot - frac(y, l.ymin, l.ymax)*(l.bot-l.top) }

// svgOpen writes the start tag of a standalone SVG document of the given
// size; the text attributes set there are inherited by every chart in it.
func svgOpen(b *bytes.Buffer, width, height int) {
	w, h := strconv.Itoa(width), strconv.Itoa(height)
	b.WriteString(`<svg xmlns="http://www.w3.org/2000/svg" width="` + w + `" height="` + h +
		`" viewBox="0 0 ` + w + ` ` + h + `" font-family="sans-serif" font-size="12">` + "\n")
}

func (c *Chart) render(b *bytes.Buffer) {
	w, h := c.size()
	svgOpen(b, w, h)
	c.renderBody(b)
	b.WriteString("</svg>\n")
}

// renderBody writes the chart's elements, from its top left corner.
func (c *Chart) renderBody(b *bytes.Buffer) {
	l := c.layout()
	if c.Title != "" {
		b.WriteString("<title>")
		escape(b, c.Title)
		b.WriteString("</title>\n")
	}
	b.WriteString(`<rect width="` + strconv.Itoa(l.width) + `" height="` + strconv.Itoa(l.height) + `" fill="#ffffff" stroke="none"/>` + "\n")
	if c.Title != "" {
		text(b, float64(l.width)/2, 24, "middle", `font-size="16"`, c.Title)
	}
	c.renderBands(b, l)
	renderAxes(b, l, c.XLabel, c.YLabel)
	c.renderMarks(b, l)
	c.renderSeries(b, l)
	c.renderMarkLabels(b, l)
	c.renderLegend(b, l)
}

// bandFill is the shade of a band: a solid light grey, since group or fill
// opacity is drawn differently, or black, by some renderers.
const bandFill = "#ebebeb"

// stripHeight is the height of a band drawn as a strip.
const stripHeight = 8

func (c *Chart) renderBands(b *bytes.Buffer, l layout) {
	if len(c.Bands) == 0 {
		return
	}
	b.WriteString(`<g class="bands">` + "\n")
	type placed struct {
		x0, x1 float64
		band   Band
	}
	var all []placed
	for _, band := range c.Bands {
		from, ok1 := scale(band.From, l.xlog)
		to, ok2 := scale(band.To, l.xlog)
		if ok1 && ok2 {
			all = append(all, placed{l.px(min(from, to)), l.px(max(from, to)), band})
		}
	}
	// Full bands, then strips over them, then the labels over both.
	for _, strips := range []bool{false, true} {
		for _, p := range all {
			if p.band.Strip != strips {
				continue
			}
			y, h := l.top, l.bot-l.top
			if strips {
				y, h = l.bot-stripHeight, stripHeight
			}
			b.WriteString(`<rect x="` + num(p.x0) + `" y="` + num(y) + `" width="` + num(p.x1-p.x0) +
				`" height="` + num(h) + `" fill="`)
			escape(b, bandColor(p.band))
			b.WriteString(`" stroke="none"/>` + "\n")
		}
	}
	for _, p := range all {
		if p.band.Label != "" {
			text(b, (p.x0+p.x1)/2, l.top+14, "middle", `fill="#444444"`, p.band.Label)
		}
	}
	b.WriteString("</g>\n")
}

func renderAxes(b *bytes.Buffer, l layout, xlabel, ylabel string) {
	b.WriteString(`<g class="axes">` + "\n")
	for _, t := range axisTicks(l.xmin, l.xmax, l.xTicks(), l.xlog) {
		x := l.px(t.v)
		line(b, x, l.bot, x, l.bot+tickLen, `stroke="#000000"`)
		if l.xlog {
			// Decades are far apart on a log axis: a vertical gridline
			// helps to read a value off it.
			line(b, x, l.top, x, l.bot, `stroke="#dddddd"`)
		}
		text(b, x, l.bot+tickLen+13, "middle", "", t.label)
	}
	for _, t := range axisTicks(l.ymin, l.ymax, l.yTicks(), l.ylog) {
		y := l.py(t.v)
		line(b, l.left, y, l.right, y, `stroke="#dddddd"`)
		line(b, l.left-tickLen, y, l.left, y, `stroke="#000000"`)
		text(b, l.left-tickLen-3, y+4, "end", "", t.label)
	}
	// The frame goes over the gridlines at the ends of the axes.
	b.WriteString(`<rect x="` + num(l.left) + `" y="` + num(l.top) + `" width="` + num(l.right-l.left) +
		`" height="` + num(l.bot-l.top) + `" fill="none" stroke="#000000"/>` + "\n")
	b.WriteString("</g>\n")
	if xlabel != "" {
		text(b, (l.left+l.right)/2, float64(l.height)-12, "middle", "", xlabel)
	}
	if ylabel != "" {
		// Written level above the axis rather than turned along it:
		// renderers disagree on rotated text (ImageMagick drops or turns
		// it the other way).
		text(b, 8, l.top-10, "start", "", ylabel)
	}
}

// markColor is the colour of reference lines and their labels.
const markColor = "#555555"

// renderMarks draws the reference lines, under the series; their labels
// come after the series, see renderMarkLabels.
func (c *Chart) renderMarks(b *bytes.Buffer, l layout) {
	if len(c.Marks) == 0 {
		return
	}
	b.WriteString(`<g class="marks">` + "\n")
	for _, m := range c.Marks {
		v, ok := scale(m.Value, m.Horizontal && l.ylog || !m.Horizontal && l.xlog)
		if !ok {
			continue
		}
		const attrs = `stroke="` + markColor + `" stroke-dasharray="2 3"`
		if m.Horizontal {
			y := l.py(v)
			line(b, l.left, y, l.right, y, attrs)
			continue
		}
		x := l.px(v)
		line(b, x, l.top, x, l.bot, attrs)
	}
	b.WriteString("</g>\n")
}

// renderMarkLabels writes the marks' labels over everything in the plot,
// each on a white box, so that no line crosses one. A horizontal mark's
// label sits above its line at the right; vertical marks' labels are
// stacked down from the top of the plot, one line each, beside their line:
// on the side where the label crosses no other vertical mark and stays in
// the plot, the right one first.
func (c *Chart) renderMarkLabels(b *bytes.Buffer, l layout) {
	var xs []float64 // the vertical marks' lines
	for _, m := range c.Marks {
		if v, ok := scale(m.Value, l.xlog); ok && !m.Horizontal {
			xs = append(xs, l.px(v))
		}
	}
	inside := func(x0, x1 float64) bool { return x0 >= l.left && x1 <= l.right }
	free := func(x0, x1, own float64) bool {
		if !inside(x0, x1) {
			return false
		}
		for _, x := range xs {
			if x != own && x >= x0 && x <= x1 {
				return false
			}
		}
		return true
	}
	top := l.top + 16
	for _, band := range c.Bands {
		if band.Label != "" {
			top += 16 // below the bands' labels
			break
		}
	}
	started := false
	vertical := 0
	for _, m := range c.Marks {
		v, ok := scale(m.Value, m.Horizontal && l.ylog || !m.Horizontal && l.xlog)
		if !ok || m.Label == "" {
			continue
		}
		if !started {
			b.WriteString(`<g class="mark-labels">` + "\n")
			started = true
		}
		w := textWidth(m.Label)
		if m.Horizontal {
			boxedText(b, l.right-4-w, l.py(v)-4, w, m.Label)
			continue
		}
		x := l.px(v)
		y := top + 16*float64(vertical)
		vertical++
		// Right of the line, else left, where no other mark's line
		// crosses the label; else where it stays inside the plot (its box
		// hides the line it crosses); else right.
		right, left := x+4, x-4-w
		at := right
		switch {
		case free(right-2, right+w+2, x):
		case free(left-2, left+w+2, x):
			at = left
		case inside(right-2, right+w+2):
		case inside(left-2, left+w+2):
			at = left
		}
		boxedText(b, at, y, w, m.Label)
	}
	if started {
		b.WriteString("</g>\n")
	}
}

// textWidth is the rough width of s in 12px sans-serif.
func textWidth(s string) float64 { return float64(len([]rune(s)) * charWidth) }

// boxedText writes s in the mark colour from (x, y), its baseline, on a
// white box a little larger than the text that stops 2 pixels above a
// horizontal mark's line, 4 below the baseline, so as not to hide it.
func boxedText(b *bytes.Buffer, x, y, w float64, s string) {
	b.WriteString(`<rect x="` + num(x-2) + `" y="` + num(y-11) + `" width="` + num(w+4) + `" height="13" fill="#ffffff" stroke="none"/>` + "\n")
	text(b, x, y, "start", `fill="`+markColor+`"`, s)
}

func (c *Chart) renderSeries(b *bytes.Buffer, l layout) {
	b.WriteString(`<g class="series">` + "\n")
	for i, s := range c.Series {
		// A path rather than a polyline: some renderers skip a polyline
		// of two points.
		var d bytes.Buffer
		flush := func() {
			if d.Len() > 0 {
				b.WriteString(`<path fill="none" stroke-width="1.5" stroke-linejoin="round" stroke="`)
				escape(b, color(s, i))
				b.WriteString(`"`)
				dash(b, s, i)
				b.WriteString(` d="`)
				b.Write(d.Bytes())
				b.WriteString(`"/>` + "\n")
				d.Reset()
			}
		}
		for _, p := range s.Points {
			x, y, ok := l.point(p)
			if !ok {
				flush()
				continue
			}
			switch {
			case d.Len() == 0:
				d.WriteString("M" + num(l.px(x)) + " " + num(l.py(y)))
			case s.Steps:
				d.WriteString(" H" + num(l.px(x)) + " V" + num(l.py(y)))
			default:
				d.WriteString(" L" + num(l.px(x)) + " " + num(l.py(y)))
			}
		}
		flush()
	}
	b.WriteString("</g>\n")
}

func (c *Chart) renderLegend(b *bytes.Buffer, l layout) {
	b.WriteString(`<g class="legend">` + "\n")
	x, y := l.right+12, l.top+10
	for i, s := range c.Series {
		if s.Name == "" {
			continue
		}
		b.WriteString(`<line x1="` + num(x) + `" y1="` + num(y) + `" x2="` + num(x+legendSwatch) + `" y2="` + num(y) +
			`" stroke-width="2" stroke="`)
		escape(b, color(s, i))
		b.WriteString(`"`)
		dash(b, s, i)
		b.WriteString("/>\n")
		text(b, x+legendSwatch+6, y+4, "start", "", s.Name)
		y += 18
	}
	seen := map[string]bool{}
	for _, band := range c.Bands {
		if band.Legend == "" || seen[band.Legend] {
			continue
		}
		seen[band.Legend] = true
		b.WriteString(`<rect x="` + num(x) + `" y="` + num(y-6) + `" width="` + strconv.Itoa(legendSwatch) + `" height="12" fill="`)
		escape(b, bandColor(band))
		b.WriteString(`" stroke="none"/>` + "\n")
		text(b, x+legendSwatch+6, y+4, "start", "", band.Legend)
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

func bandColor(b Band) string {
	if b.Color != "" {
		return b.Color
	}
	return bandFill
}

// dash writes the dash pattern of series s, the i-th: long dashes for a
// Dashed one; for one that takes its colour from the palette, a pattern of
// its own, which also sets it apart from an earlier series that has the
// same colour once the palette runs out.
func dash(b *bytes.Buffer, s Series, i int) {
	p := ""
	switch {
	case s.Dashed:
		p = "6 4"
	case s.Color == "":
		p = dashes[(i+i/len(palette))%len(dashes)]
	}
	if p != "" {
		b.WriteString(` stroke-dasharray="` + p + `"`)
	}
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
	// Fill and stroke are explicit: ImageMagick's renderer lets a stroke
	// set on an earlier element outline later text.
	b.WriteString(`<text x="` + num(x) + `" y="` + num(y) + `" text-anchor="` + anchor + `" stroke="none"`)
	if !strings.Contains(attrs, "fill=") {
		b.WriteString(` fill="#000000"`)
	}
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

// axisTicks returns the ticks of an axis, at positions on its scale.
func axisTicks(lo, hi float64, n int, log bool) []tick {
	if log {
		return logTicks(lo, hi, n)
	}
	return ticks(lo, hi, n)
}

// logTicks returns ticks for the log10 range [lo, hi], whose ends
// [logEnds] made 1, 2 or 5 times a power of ten: both ends, every decade
// between them, or every k-th when there are more than n; and 2× and 5×
// each decade when the range spans at most two.
func logTicks(lo, hi float64, n int) []tick {
	span := hi - lo
	if !finite(span) || span <= 0 {
		return nil
	}
	const eps = 1e-6
	every := max(1, math.Ceil(span/float64(n)))
	var out []tick
	add := func(v float64) {
		if v < lo-eps || v > hi+eps {
			return
		}
		for _, t := range out {
			if math.Abs(t.v-v) < eps {
				return
			}
		}
		e := math.Floor(v + eps)
		m := math.Round(math.Pow(10, v-e))
		out = append(out, tick{v, decadeLabel(e, m)})
	}
	add(lo)
	for e := math.Ceil(lo - eps); e <= hi+eps; e += every {
		add(e)
		if span <= 2 {
			add(e + math.Log10(2))
			add(e + math.Log10(5))
		}
	}
	if span <= 2 {
		add(math.Floor(lo+eps) + math.Log10(2))
		add(math.Floor(lo+eps) + math.Log10(5))
	}
	add(hi)
	slices.SortFunc(out, func(a, b tick) int { return cmp.Compare(a.v, b.v) })
	// 1e308 is the largest decade a float64 holds, but 2e308 is not.
	return slices.DeleteFunc(out, func(t tick) bool { return !finite(math.Pow(10, t.v)) })
}

// decadeLabel labels m × 10^e plainly ("0.001", "2000") while that stays
// short, and in exponent form ("1e-06") beyond.
func decadeLabel(e, m float64) string {
	v := m * math.Pow(10, e)
	if e >= -4 && e <= 6 {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', 1, 64)
}

func label(v, step float64) string {
	if step >= 1e-4 && math.Abs(v) < 1e12 {
		dec := max(0, int(-math.Floor(math.Log10(step))))
		return strconv.FormatFloat(v, 'f', dec, 64)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// Figure is what [WriteStacked] lays out: a [*Chart] or a [*Grid].
type Figure interface {
	io.WriterTo
	size() (width, height int)
	renderBody(b *bytes.Buffer)
}

// Grid is a figure of small multiples: charts of the same size laid out in
// rows, left to right, under a title and a note, so that each series can
// have a chart of its own. Give the charts the same axes (see
// [Chart.YMax]) for the eye to compare them. The zero value is an empty
// figure. Like a Chart, a Grid is only read by its methods.
type Grid struct {
	// Title is written above the charts; Note below it, in smaller type,
	// to say what every chart shows. Empty means none.
	Title, Note string
	// Columns is the number of charts per row; values below 1 mean 3.
	Columns int
	// Charts are drawn in order, each at the size of the first.
	Charts []*Chart
}

// gridHeader is the height of the title and note lines above the charts.
func (g *Grid) header() int {
	h := 0
	if g.Title != "" {
		h += 30
	}
	if g.Note != "" {
		h += 20
	}
	if h > 0 {
		h += 6
	}
	return h
}

func (g *Grid) columns() int {
	if g.Columns < 1 {
		return 3
	}
	return g.Columns
}

func (g *Grid) cell() (int, int) {
	if len(g.Charts) == 0 {
		return 0, 0
	}
	return g.Charts[0].size()
}

func (g *Grid) size() (int, int) {
	cw, ch := g.cell()
	cols := min(g.columns(), max(len(g.Charts), 1))
	rows := (len(g.Charts) + g.columns() - 1) / g.columns()
	// A document of at most maxSize on either side, as a Chart.
	return max(min(cols*cw, maxSize), minSize), max(min(g.header()+rows*ch, maxSize), minSize)
}

// WriteTo writes the grid as a standalone SVG document. It returns the
// number of bytes written and the first write error.
func (g *Grid) WriteTo(w io.Writer) (int64, error) {
	var b bytes.Buffer
	width, height := g.size()
	svgOpen(&b, width, height)
	g.renderBody(&b)
	b.WriteString("</svg>\n")
	n, err := w.Write(b.Bytes())
	return int64(n), err
}

func (g *Grid) renderBody(b *bytes.Buffer) {
	width, height := g.size()
	if g.Title != "" {
		b.WriteString("<title>")
		escape(b, g.Title)
		b.WriteString("</title>\n")
	}
	b.WriteString(`<rect width="` + strconv.Itoa(width) + `" height="` + strconv.Itoa(height) + `" fill="#ffffff" stroke="none"/>` + "\n")
	y := 0
	if g.Title != "" {
		text(b, float64(width)/2, 24, "middle", `font-size="16"`, g.Title)
		y = 30
	}
	if g.Note != "" {
		text(b, float64(width)/2, float64(y)+16, "middle", `fill="#444444"`, g.Note)
	}
	cw, ch := g.cell()
	for i, c := range g.Charts {
		x, top := (i%g.columns())*cw, g.header()+(i/g.columns())*ch
		if x+cw > maxSize || top+ch > maxSize {
			break // past the largest document: left out rather than cut
		}
		b.WriteString(`<g transform="translate(` + strconv.Itoa(x) + ` ` + strconv.Itoa(top) + `)">` + "\n")
		// Each chart is drawn at the size of the first, so that their
		// axes line up.
		cc := *c
		cc.Width, cc.Height = cw, ch
		cc.renderBody(b)
		b.WriteString("</g>\n")
	}
}

// WriteStacked writes several figures as one SVG document, one below the
// other, each at its own size. It returns the number of bytes written and
// the first write error.
func WriteStacked(w io.Writer, figures ...Figure) (int64, error) {
	width, height := 0, 0
	for _, f := range figures {
		fw, fh := f.size()
		width = max(width, fw)
		height += fh
	}
	var b bytes.Buffer
	svgOpen(&b, width, height)
	y := 0
	for _, f := range figures {
		// A group moved into place, not a nested <svg y=…>, which some
		// renderers draw at the top.
		b.WriteString(`<g transform="translate(0 ` + strconv.Itoa(y) + `)">` + "\n")
		f.renderBody(&b)
		b.WriteString("</g>\n")
		_, fh := f.size()
		y += fh
	}
	b.WriteString("</svg>\n")
	n, err := w.Write(b.Bytes())
	return int64(n), err
}
