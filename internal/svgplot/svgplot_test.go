package svgplot

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"image"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rebound-go/rebound/internal/svgplot/svgcheck"
)

// decode parses an SVG document with encoding/xml and returns its
// character data and the number of elements of each name.
func decode(t testing.TB, doc []byte) (string, map[string]int) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(doc))
	d.Strict = true
	var text strings.Builder
	elems := map[string]int{}
	depth := 0
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, doc)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if depth == 0 && (tok.Name.Local != "svg" || tok.Name.Space != "http://www.w3.org/2000/svg") {
				t.Fatalf("root element is %v, want svg in the SVG namespace", tok.Name)
			}
			depth++
			elems[tok.Name.Local]++
		case xml.EndElement:
			depth--
		case xml.CharData:
			text.Write(tok)
		}
	}
	if depth != 0 || elems["svg"] != 1 {
		t.Fatalf("unbalanced document (depth %d, %d svg elements)", depth, elems["svg"])
	}
	return text.String(), elems
}

func render(t testing.TB, c *Chart) []byte {
	t.Helper()
	var b bytes.Buffer
	n, err := c.WriteTo(&b)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(b.Len()) {
		t.Fatalf("WriteTo returned %d, wrote %d bytes", n, b.Len())
	}
	return b.Bytes()
}

func TestChart(t *testing.T) {
	c := &Chart{
		Title:  "Offered load",
		XLabel: "time (s)",
		YLabel: "attempts/s",
		Series: []Series{
			{Name: "naive", Points: []Point{{0, 10}, {1, 50}, {2, 20}}},
			{Name: "limit", Points: []Point{{0, 30}, {2, 30}}, Dashed: true, Color: "red"},
		},
		Bands: []Band{{From: 1.5, To: 0.5, Label: "outage"}},
	}
	doc := render(t, c)
	text, elems := decode(t, doc)
	for _, want := range []string{"Offered load", "time (s)", "attempts/s", "naive", "limit", "outage"} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q", want)
		}
	}
	if elems["path"] != 2 {
		t.Errorf("%d paths, want 2", elems["path"])
	}
	if !bytes.Contains(doc, []byte(`stroke="red" stroke-dasharray="6 4" d="`)) {
		t.Errorf("dashed red series not drawn as such:\n%s", doc)
	}
	if !bytes.Contains(doc, []byte(`stroke="`+palette[0]+`"`)) {
		t.Errorf("first series lacks the first palette colour")
	}
	// The y axis is labelled with round numbers from 0 to 50.
	for _, want := range []string{">0</text>", ">50</text>", ">2.0</text>"} {
		if !bytes.Contains(doc, []byte(want)) {
			t.Errorf("no tick label %s", want)
		}
	}
	if again := render(t, c); !bytes.Equal(doc, again) {
		t.Error("the same chart rendered differently twice")
	}
}

// TestManySeries: every series that takes its style from the palette has
// a colour and a dash pattern no other series of the chart has, in its
// line and in its legend, even past the end of the palette.
func TestManySeries(t *testing.T) {
	c := &Chart{}
	n := 2*len(palette) + 1
	for i := range n {
		c.Series = append(c.Series, Series{Name: "s" + strconv.Itoa(i), Points: []Point{{0, float64(i)}, {1, float64(i)}}})
	}
	doc := render(t, c)
	style := regexp.MustCompile(`stroke="(#[0-9A-F]{6})"(?: stroke-dasharray="([0-9 ]+)")?`)
	var paths, legend []string
	for _, m := range regexp.MustCompile(`<(path|line) [^>]*>`).FindAllString(string(doc), -1) {
		sm := style.FindStringSubmatch(m)
		if sm == nil || !strings.Contains(m, `stroke-width=`) {
			continue // axes and ticks
		}
		if strings.HasPrefix(m, "<path") {
			paths = append(paths, sm[1]+"/"+sm[2])
		} else {
			legend = append(legend, sm[1]+"/"+sm[2])
		}
	}
	if len(paths) != n || !slices.Equal(paths, legend) {
		t.Fatalf("line styles %q, legend styles %q; want %d of each, the same", paths, legend, n)
	}
	seen := map[string]int{}
	colours, patterns := map[string]bool{}, map[string]bool{}
	for i, st := range paths {
		if j, dup := seen[st]; dup {
			t.Errorf("series %d and %d are both drawn %s", j, i, st)
		}
		seen[st] = i
		colour, pattern, _ := strings.Cut(st, "/")
		if i < len(palette) && (colours[colour] || patterns[pattern]) {
			t.Errorf("series %d (%s) shares its colour or its dashes with an earlier one", i, st)
		}
		colours[colour], patterns[pattern] = true, true
	}
	if paths[0] != palette[0]+"/" {
		t.Errorf("the first series is drawn %s, want solid %s", paths[0], palette[0])
	}
	if err := svgcheck.Portable(doc); err != nil {
		t.Fatal(err)
	}
}

func TestEscapesText(t *testing.T) {
	evil := `<script>alert("x")</script> & 'q' ]]> ` + "\x00\x1b"
	c := &Chart{
		Title:  evil,
		XLabel: evil,
		YLabel: evil,
		Series: []Series{{Name: evil, Color: `red" onload="alert(1)`, Points: []Point{{0, 0}, {1, 1}}}},
		Bands:  []Band{{From: 0, To: 1, Label: evil}},
	}
	doc := render(t, c)
	text, elems := decode(t, doc)
	if elems["script"] != 0 {
		t.Fatal("text became markup")
	}
	if !strings.Contains(text, `<script>alert("x")</script> & 'q' ]]>`) {
		t.Errorf("escaped text did not decode back:\n%s", doc)
	}
	if bytes.Contains(doc, []byte(`onload="`)) {
		t.Errorf("a colour broke out of its attribute:\n%s", doc)
	}
}

func TestDegenerateInput(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	huge := math.MaxFloat64
	for _, tc := range []struct {
		name  string
		chart Chart
		paths int
	}{
		{"zero value", Chart{}, 0},
		{"empty series", Chart{Series: []Series{{Name: "a"}, {}}}, 0},
		{"single point", Chart{Series: []Series{{Points: []Point{{3, 3}}}}}, 1},
		{"all non-finite", Chart{Series: []Series{{Points: []Point{{nan, 1}, {1, inf}, {-inf, nan}}}}}, 0},
		{"gap breaks the line", Chart{Series: []Series{{Points: []Point{{0, 1}, {1, 2}, {2, nan}, {3, 1}, {4, 2}}}}}, 2},
		{"non-finite band", Chart{Bands: []Band{{From: nan, To: 1}, {From: 0, To: inf, Label: "x"}}}, 0},
		{"extreme range", Chart{Series: []Series{{Points: []Point{{-huge, -huge}, {huge, huge}}}}}, 1},
		{"tiny range", Chart{Series: []Series{{Points: []Point{{1e-300, 1e-300}, {2e-300, 3e-300}}}}}, 1},
		{"negative values", Chart{Series: []Series{{Points: []Point{{-5, -2}, {5, -1}}}}}, 1},
		{"odd size", Chart{Width: -1, Height: 1 << 40, Series: []Series{{Points: []Point{{0, 0}, {1, 1}}}}}, 1},
		{"long legend", Chart{Series: []Series{{Name: strings.Repeat("x", 5000), Points: []Point{{0, 0}, {1, 1}}}}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := render(t, &tc.chart)
			_, elems := decode(t, doc)
			if elems["path"] != tc.paths {
				t.Errorf("%d paths, want %d", elems["path"], tc.paths)
			}
			for _, bad := range []string{"NaN", "Inf"} {
				if bytes.Contains(doc, []byte(bad)) {
					t.Errorf("output contains %s:\n%s", bad, doc)
				}
			}
		})
	}
}

func TestTicks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		n      int
		want   []string
	}{
		{0, 100, 5, []string{"0", "20", "40", "60", "80", "100"}},
		{0, 90, 6, []string{"0", "20", "40", "60", "80"}},
		{0, 1, 4, []string{"0.0", "0.5", "1.0"}},
		{-3, 3, 3, []string{"-2", "0", "2"}},
		{0, 4500, 5, []string{"0", "1000", "2000", "3000", "4000"}},
	} {
		var got []string
		for _, tk := range ticks(tc.lo, tc.hi, tc.n) {
			got = append(got, tk.label)
		}
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("ticks(%v, %v, %d) = %v, want %v", tc.lo, tc.hi, tc.n, got, tc.want)
		}
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriteError(t *testing.T) {
	if _, err := (&Chart{}).WriteTo(failWriter{}); err == nil || err.Error() != "disk full" {
		t.Fatalf("err = %v, want the writer's error", err)
	}
}

func FuzzChart(f *testing.F) {
	f.Add("title", "series", 0.0, 1.0, 2.0, 3.0, false, false)
	f.Add("<&>\"'", "\xff\x00", math.Inf(1), math.NaN(), math.Copysign(0, -1), 1e308, true, false)
	f.Add("tail", "p99", 1e-300, 0.001, 5e300, 1.0, true, true)
	f.Fuzz(func(t *testing.T, title, name string, x0, y0, x1, y1 float64, xlog, ylog bool) {
		c := &Chart{
			Title:  title,
			YLabel: name,
			XLog:   xlog,
			YLog:   ylog,
			Series: []Series{{Name: name, Color: name, Points: []Point{{x0, y0}, {x1, y1}}}, {Steps: true, Points: []Point{{x1, y1}, {x0, y0}}}},
			Bands:  []Band{{From: x0, To: y1, Label: title}},
			Marks:  []Mark{{Value: x1, Label: name}, {Horizontal: true, Value: y0, Label: title}},
		}
		doc := render(t, c)
		decode(t, doc)
		if err := svgcheck.Portable(doc); err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{"NaN", "Inf"} {
			if bytes.Contains(doc, []byte(bad)) && !strings.Contains(title+name, bad) {
				t.Fatalf("output contains %s", bad)
			}
		}
	})
}

func BenchmarkChart(b *testing.B) {
	c := &Chart{Title: "bench"}
	for s := range 4 {
		pts := make([]Point, 300)
		for i := range pts {
			pts[i] = Point{float64(i), float64(i * s)}
		}
		c.Series = append(c.Series, Series{Name: "s", Points: pts})
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.WriteTo(io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}

func TestWriteStacked(t *testing.T) {
	t.Parallel() // svgcheck draws the chart: a second of CPU under -race
	// Small charts: drawing takes seconds under the race detector.
	a := &Chart{Title: "a", Width: 400, Height: 250, Series: []Series{{Name: "s", Points: []Point{{0, 0}, {1, 1}}}}}
	b := &Chart{Title: "b <&>", Width: 300, Height: 200, Series: []Series{{Name: "s", Points: []Point{{0, 1}, {1, 0}}, Color: "#D55E00"}}}
	var buf bytes.Buffer
	if _, err := WriteStacked(&buf, a, b); err != nil {
		t.Fatal(err)
	}
	doc := buf.Bytes()
	_, elems := decode(t, doc)
	if elems["title"] != 2 {
		t.Errorf("%d titles, want one per chart", elems["title"])
	}
	for _, want := range []string{`width="400" height="450"`, `<g transform="translate(0 0)">`, `<g transform="translate(0 250)">`} {
		if !bytes.Contains(doc, []byte(want)) {
			t.Errorf("stacked document lacks %s", want)
		}
	}
	img, err := svgcheck.Check(doc, palette[0], "#D55E00")
	if err != nil {
		t.Fatal(err)
	}
	// Each chart is drawn in its own place: the second one's line only
	// below the first.
	c, _ := svgcheck.ParseHex("#D55E00")
	top := img.SubImage(image.Rect(0, 0, 400, 250)).(*image.RGBA)
	if n := svgcheck.Count(top, c, 24); n != 0 {
		t.Errorf("the second chart's colour covers %d pixels of the first chart", n)
	}
	if ink := svgcheck.Ink(img, image.Rect(0, 250, 300, 450)); ink < 0.01 {
		t.Errorf("the second chart is blank where it should be (%.3f ink)", ink)
	}
}

// tail is a latency tail as the demo plots it: the fraction of calls
// slower than x ms, from 1 down to 1/1000.
func tail() *Chart {
	var pts []Point
	for i := 0; i <= 30; i++ {
		p := math.Pow(10, -float64(i)/10)
		pts = append(pts, Point{X: 1 / p, Y: p})
	}
	return &Chart{
		Title: "tail", XLabel: "latency (ms)", YLabel: "fraction slower",
		Width: 480, Height: 300, // small: drawing takes seconds under the race detector
		XLog: true, YLog: true,
		Series: []Series{{Name: "a", Points: pts, Steps: true}, {Name: "b", Points: []Point{{2, 1}, {0, 0.5}, {50, 0.01}}}},
		Marks:  []Mark{{Horizontal: true, Value: 0.01, Label: "p99"}, {Horizontal: true, Value: 0.001, Label: "p99.9"}, {Value: 20, Label: "hedge"}},
		Bands:  []Band{{From: 100, To: 200, Label: "stalls"}},
	}
}

func TestLogAxes(t *testing.T) {
	t.Parallel() // svgcheck draws the chart: a second of CPU under -race
	doc := render(t, tail())
	text, elems := decode(t, doc)
	// Whole decades label both axes: 1..1000 ms and 0.001..1.
	for _, want := range []string{">1</text>", ">10</text>", ">100</text>", ">1000</text>", ">0.001</text>", ">0.01</text>", ">0.1</text>"} {
		if !bytes.Contains(doc, []byte(want)) {
			t.Errorf("no tick label %s", want)
		}
	}
	for _, want := range []string{"p99", "p99.9", "hedge", "stalls"} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q", want)
		}
	}
	// The point at x = 0 cannot be drawn on a log axis: it breaks "b"
	// into two stretches of one point.
	if elems["path"] != 3 {
		t.Errorf("%d paths, want 3", elems["path"])
	}
	l := tail().layout()
	if l.xmin != 0 || l.xmax != 3 || l.ymin != -3 || l.ymax != 0 {
		t.Errorf("log ranges x [%v, %v] y [%v, %v], want [0, 3] and [-3, 0]", l.xmin, l.xmax, l.ymin, l.ymax)
	}
	// p99 lies two decades down a three-decade axis.
	if y, want := l.py(math.Log10(0.01)), l.top+(l.bot-l.top)*2/3; math.Abs(y-want) > 0.01 {
		t.Errorf("p99 drawn at y = %v, want %v", y, want)
	}
	if _, err := svgcheck.Check(doc, palette[0], palette[1]); err != nil {
		t.Fatal(err)
	}
}

func TestLogTicks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		n      int
		want   string
	}{
		{0, 3, 5, "1 10 100 1000"},
		{-1, 1, 5, "0.1 0.2 0.5 1 2 5 10"},
		{-8, -6, 5, "1e-08 2e-08 5e-08 1e-07 2e-07 5e-07 1e-06"},
		{0, 12, 4, "1 1000 1000000 1e+09 1e+12"},
		{-300, 300, 4, "1e-300 1e-150 1 1e+150 1e+300"},
		{307, 308, 5, "1e+307 2e+307 5e+307 1e+308"},
	} {
		var got []string
		for _, tk := range logTicks(tc.lo, tc.hi, tc.n) {
			got = append(got, tk.label)
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("logTicks(%v, %v, %d) = %v, want %v", tc.lo, tc.hi, tc.n, got, tc.want)
		}
	}
}

// TestRendersEverywhere draws every kind of chart with an independent
// renderer, and checks it keeps to what every renderer draws alike.
func TestRendersEverywhere(t *testing.T) {
	t.Parallel() // svgcheck draws the chart: a second of CPU under -race
	linear := &Chart{
		Title: "load", Width: 400, Height: 250, Series: []Series{{Name: "naive", Points: []Point{{0, 10}, {1, 50}, {2, 20}}}, {Name: "cap", Points: []Point{{0, 30}, {2, 30}}, Dashed: true}},
		Bands: []Band{{From: 0.5, To: 1.5, Label: "outage"}},
	}
	for name, c := range map[string]*Chart{"linear": linear, "log-log": tail()} {
		t.Run(name, func(t *testing.T) {
			img, err := svgcheck.Check(render(t, c), palette[0], palette[1])
			if err != nil {
				t.Fatal(err)
			}
			// The band is shaded a light grey, not black.
			band, _ := svgcheck.ParseHex(bandFill)
			if n := svgcheck.Count(img, band, 2); n < 1000 {
				t.Errorf("band covers %d pixels, want a shaded area", n)
			}
		})
	}
}

func TestPortableRejects(t *testing.T) {
	for _, doc := range []string{
		`<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><svg y="5"/></svg>`,
		`<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><g opacity="0.5"/></svg>`,
		`<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><g fill-opacity="0.1"/></svg>`,
		`<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><text>a<tspan>b</tspan></text></svg>`,
		`<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><foreignObject/></svg>`,
		`<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><text transform="rotate(-90 5 5)">y</text></svg>`,
		`<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><g transform="translate(0 5) rotate(90)"/></svg>`,
		`<g/>`,
	} {
		if err := svgcheck.Portable([]byte(doc)); err == nil {
			t.Errorf("Portable accepted %s", doc)
		}
	}
}

// TestSteps: a Steps series holds each Y until the next X, then moves
// straight up or down; a plain series goes straight from point to point.
func TestSteps(t *testing.T) {
	pts := []Point{{0, 3}, {1, 2}, {3, 1}}
	c := &Chart{Series: []Series{{Points: pts, Steps: true}, {Points: pts}}}
	l := c.layout()
	x := func(v float64) string { return num(l.px(v)) }
	y := func(v float64) string { return num(l.py(v)) }
	doc := string(render(t, c))
	steps := `d="M` + x(0) + " " + y(3) + " H" + x(1) + " V" + y(2) + " H" + x(3) + " V" + y(1) + `"`
	lines := `d="M` + x(0) + " " + y(3) + " L" + x(1) + " " + y(2) + " L" + x(3) + " " + y(1) + `"`
	for _, want := range []string{steps, lines} {
		if !strings.Contains(doc, want) {
			t.Errorf("chart lacks the path %s:\n%s", want, doc)
		}
	}
}

// TestLogEnds: a log axis ends on 1, 2 or 5 times a power of ten around
// the data, not on whole decades that leave one empty: a tail from 0.3ms
// to 250ms spans 0.2 to 500, and fractions down to 1/1600 start at 0.0005.
func TestLogEnds(t *testing.T) {
	c := &Chart{XLog: true, YLog: true, Series: []Series{{Points: []Point{{0.3, 1}, {2, 0.1}, {250, 1.0 / 1600}}}}}
	l := c.layout()
	for _, tc := range []struct {
		name      string
		got, want float64
	}{
		{"x from", l.xmin, math.Log10(0.2)}, {"x to", l.xmax, math.Log10(500)},
		{"y from", l.ymin, math.Log10(0.0005)}, {"y to", l.ymax, 0},
	} {
		if math.Abs(tc.got-tc.want) > 1e-9 {
			t.Errorf("%s: 10^%v, want 10^%v", tc.name, tc.got, tc.want)
		}
	}
	var xt, yt []string
	for _, tk := range axisTicks(l.xmin, l.xmax, l.xTicks(), true) {
		xt = append(xt, tk.label)
	}
	for _, tk := range axisTicks(l.ymin, l.ymax, l.yTicks(), true) {
		yt = append(yt, tk.label)
	}
	if got, want := strings.Join(xt, " "), "0.2 1 10 100 500"; got != want {
		t.Errorf("x ticks %s, want %s", got, want)
	}
	if got, want := strings.Join(yt, " "), "0.0005 0.001 0.01 0.1 1"; got != want {
		t.Errorf("y ticks %s, want %s", got, want)
	}
	for _, tc := range []struct{ v, down, up float64 }{
		{math.Log10(0.3), math.Log10(0.2), math.Log10(0.5)},
		{math.Log10(2), math.Log10(2), math.Log10(2)},
		{math.Log10(7), math.Log10(5), 1},
		{math.Log10(1000), 3, 3},
		{math.Log10(1.01), 0, math.Log10(2)},
	} {
		if d, u := logRound(tc.v, false), logRound(tc.v, true); math.Abs(d-tc.down) > 1e-9 || math.Abs(u-tc.up) > 1e-9 {
			t.Errorf("logRound(10^%v) = 10^%v down, 10^%v up; want 10^%v, 10^%v", tc.v, d, u, tc.down, tc.up)
		}
	}
}

// TestMarkLabels: mark labels lie over the lines on white boxes, and a
// vertical mark's label does not cross another vertical mark's line: two
// hedge delays close together get their labels on either side.
func TestMarkLabels(t *testing.T) {
	c := &Chart{
		XLog: true, YLog: true,
		Series: []Series{{Name: "a", Points: []Point{{1, 1}, {15, 0.1}, {20, 0.01}, {300, 0.001}}}},
		Marks: []Mark{{Horizontal: true, Value: 0.01, Label: "p99"},
			{Value: 15.4, Label: "adaptive hedge 15.4ms"}, {Value: 20, Label: "hedge 20.0ms"}},
	}
	doc := string(render(t, c))
	series, labels := strings.Index(doc, `<g class="series">`), strings.Index(doc, `<g class="mark-labels">`)
	if series < 0 || labels < series {
		t.Fatalf("mark labels not drawn after the series:\n%s", doc)
	}
	l := c.layout()
	lines := []float64{l.px(math.Log10(15.4)), l.px(math.Log10(20))}
	box := regexp.MustCompile(`<rect x="([0-9.]+)" y="[0-9.]+" width="([0-9.]+)" height="13" fill="#ffffff" stroke="none"/>\n<text [^>]*>([^<]*)</text>`)
	found := 0
	for _, m := range box.FindAllStringSubmatch(doc[labels:], -1) {
		found++
		x0, _ := strconv.ParseFloat(m[1], 64)
		w, _ := strconv.ParseFloat(m[2], 64)
		for i, x := range lines {
			own := (i == 0) == strings.HasPrefix(m[3], "adaptive")
			if !own && x >= x0 && x <= x0+w {
				t.Errorf("label %q (%v to %v) crosses the mark at x = %v", m[3], x0, x0+w, x)
			}
		}
	}
	if found != 3 {
		t.Errorf("%d boxed labels, want 3:\n%s", found, doc[labels:])
	}
	// A horizontal mark's label box stops short of its line.
	p99 := regexp.MustCompile(`<rect x="[0-9.]+" y="([0-9.]+)" width="[0-9.]+" height="([0-9.]+)" fill="#ffffff" stroke="none"/>\n<text [^>]*>p99</text>`).FindStringSubmatch(doc)
	if p99 == nil {
		t.Fatal("no boxed p99 label")
	}
	top, _ := strconv.ParseFloat(p99[1], 64)
	height, _ := strconv.ParseFloat(p99[2], 64)
	if top+height > l.py(-2)-1 {
		t.Errorf("the p99 label's box reaches %v, over its line at %v", top+height, l.py(-2))
	}

	// Near the right edge, with no side free of the other line, a label
	// stays inside the plot, over the legend's space.
	c.Marks = []Mark{{Value: 200, Label: "hedge 200.0ms"}, {Value: 230, Label: "adaptive hedge 230.0ms"}}
	l = c.layout()
	doc = string(render(t, c))
	for _, m := range box.FindAllStringSubmatch(doc, -1) {
		x0, _ := strconv.ParseFloat(m[1], 64)
		w, _ := strconv.ParseFloat(m[2], 64)
		if x0 < l.left || x0+w > l.right {
			t.Errorf("label %q (%v to %v) leaves the plot (%v to %v)", m[3], x0, x0+w, l.left, l.right)
		}
	}
}

// TestBandStrips: a strip lies along the bottom of the plot, drawn after
// the full bands, and every band's label after both, so that neither hides
// the outage or its label.
func TestBandStrips(t *testing.T) {
	c := &Chart{
		Series: []Series{{Points: []Point{{0, 1}, {10, 1}}}},
		Bands:  []Band{{From: 4, To: 5, Color: "#ee7733", Strip: true}, {From: 3, To: 6, Label: "outage"}},
	}
	l := c.layout()
	doc := string(render(t, c))
	strip := fmt.Sprintf(`<rect x="%s" y="%s" width="%s" height="%s" fill="#ee7733" stroke="none"/>`,
		num(l.px(4)), num(l.bot-stripHeight), num(l.px(5)-l.px(4)), num(stripHeight))
	full := fmt.Sprintf(`<rect x="%s" y="%s" width="%s" height="%s" fill="%s" stroke="none"/>`,
		num(l.px(3)), num(l.top), num(l.px(6)-l.px(3)), num(l.bot-l.top), bandFill)
	label := ">outage</text>"
	i, j, k := strings.Index(doc, full), strings.Index(doc, strip), strings.Index(doc, label)
	if i < 0 || j < 0 || k < 0 || !(i < j && j < k) {
		t.Errorf("band at %d, strip at %d, label at %d: want all three, in that order:\n%s", i, j, k, doc)
	}
}

// TestBandStyle: a band takes its own colour and names itself in the
// legend once, however many bands share the name.
func TestBandStyle(t *testing.T) {
	c := &Chart{
		Width: 360, Height: 200, // small: drawing takes seconds under the race detector
		Series: []Series{{Name: "load", Points: []Point{{0, 1}, {10, 1}}}},
		Bands: []Band{{From: 1, To: 2, Label: "outage"},
			{From: 4, To: 5, Color: "#fde3c8", Legend: "calls started late"}, {From: 7, To: 8, Color: "#fde3c8", Legend: "calls started late"}},
	}
	doc := render(t, c)
	if n := bytes.Count(doc, []byte(`fill="#fde3c8"`)); n != 3 {
		t.Errorf("%d shapes in the band colour, want 3 (two bands, one legend swatch)", n)
	}
	if n := bytes.Count(doc, []byte(">calls started late</text>")); n != 1 {
		t.Errorf("the bands' legend is written %d times, want once", n)
	}
	if n := bytes.Count(doc, []byte(`fill="`+bandFill+`"`)); n != 1 {
		t.Errorf("%d shapes in the default band colour, want 1", n)
	}
	img, err := svgcheck.Check(doc, palette[0])
	if err != nil {
		t.Fatal(err)
	}
	late, _ := svgcheck.ParseHex("#fde3c8")
	if n := svgcheck.Count(img, late, 2); n < 500 {
		t.Errorf("the coloured bands cover %d pixels", n)
	}
}

// TestYMax: charts share a linear y scale when each sets YMax to the
// largest value of them all; a YMax below the data, or on a log axis,
// changes nothing.
func TestYMax(t *testing.T) {
	small := &Chart{Series: []Series{{Points: []Point{{0, 1}, {1, 3}}}}, YMax: 4500}
	big := &Chart{Series: []Series{{Points: []Point{{0, 1}, {1, 4500}}}}, YMax: 4500}
	if s, b := small.layout(), big.layout(); s.ymin != b.ymin || s.ymax != b.ymax || s.ymax < 4500 {
		t.Errorf("y ranges [%v, %v] and [%v, %v], want the same, reaching 4500", s.ymin, s.ymax, b.ymin, b.ymax)
	}
	below := &Chart{Series: []Series{{Points: []Point{{0, 1}, {1, 50}}}}, YMax: 10}
	if l := below.layout(); l.ymax != 50 {
		t.Errorf("YMax below the data: y to %v, want 50", l.ymax)
	}
	log := &Chart{YLog: true, Series: []Series{{Points: []Point{{0, 1}, {1, 10}}}}, YMax: 1e6}
	if l := log.layout(); l.ymax != 1 {
		t.Errorf("YMax on a log axis: y to 10^%v, want 10^1", l.ymax)
	}
}

// TestGrid: small multiples, in rows, each chart in its own cell at the
// first chart's size, under a title and a note; a grid stacks with charts.
func TestGrid(t *testing.T) {
	var charts []*Chart
	for i := range 3 {
		charts = append(charts, &Chart{Title: "policy " + strconv.Itoa(i), Width: 220, Height: 200, YMax: 10,
			Series: []Series{{Points: []Point{{0, 0}, {1, float64(i + 1)}}, Color: "#117733"}}})
	}
	charts[2].Width = 999 // drawn at the first chart's size all the same
	g := &Grid{Title: "Offered load", Note: "each policy against no retries", Columns: 2, Charts: charts}
	var b bytes.Buffer
	if _, err := g.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	doc := b.Bytes()
	text, elems := decode(t, doc)
	if elems["title"] != 4 {
		t.Errorf("%d titles, want the grid's and one per chart", elems["title"])
	}
	h := g.header()
	for _, want := range []string{
		`width="440" height="` + strconv.Itoa(h+400) + `"`,
		`<g transform="translate(0 ` + strconv.Itoa(h) + `)">`,
		`<g transform="translate(220 ` + strconv.Itoa(h) + `)">`,
		`<g transform="translate(0 ` + strconv.Itoa(h+200) + `)">`,
	} {
		if !bytes.Contains(doc, []byte(want)) {
			t.Errorf("grid lacks %s", want)
		}
	}
	for _, want := range []string{"Offered load", "each policy against no retries", "policy 2"} {
		if !strings.Contains(text, want) {
			t.Errorf("grid text lacks %q", want)
		}
	}
	if bytes.Contains(doc, []byte(`width="999"`)) {
		t.Error("a chart kept its own width in the grid")
	}
	img, err := svgcheck.Check(doc, "#117733")
	if err != nil {
		t.Fatal(err)
	}
	// The third chart is drawn in the second row's first cell.
	if ink := svgcheck.Ink(img, image.Rect(0, h+200, 220, h+400)); ink < 0.01 {
		t.Errorf("the third cell is blank (%.3f ink)", ink)
	}
	if ink := svgcheck.Ink(img, image.Rect(230, h+210, 430, h+390)); ink != 0 {
		t.Errorf("ink where no chart is (%.3f)", ink)
	}
	b.Reset()
	if _, err := WriteStacked(&b, &Chart{Title: "above"}, g); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b.Bytes(), []byte(`width="800" height="`+strconv.Itoa(450+h+400)+`"`)) {
		t.Errorf("stacked chart and grid: %.120s", b.Bytes())
	}
	if err := svgcheck.Portable(b.Bytes()); err != nil {
		t.Error(err)
	}
}
