package svgplot

import (
	"bytes"
	"encoding/xml"
	"errors"
	"image"
	"io"
	"math"
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

// TestManySeries: a series past the end of the palette reuses a colour,
// and is dotted, in its line and its legend, so that the two are told
// apart.
func TestManySeries(t *testing.T) {
	c := &Chart{}
	for i := range len(palette) + 1 {
		c.Series = append(c.Series, Series{Name: "s" + strconv.Itoa(i), Points: []Point{{0, float64(i)}, {1, float64(i)}}})
	}
	doc := render(t, c)
	if n := bytes.Count(doc, []byte(`stroke="`+palette[0]+`"`)); n != 4 {
		t.Fatalf("%d lines and legend marks in the first colour, want 4 (two series)", n)
	}
	if n := bytes.Count(doc, []byte(`stroke="`+palette[0]+`" stroke-dasharray="2 2"`)); n != 2 {
		t.Errorf("%d dotted marks in the first colour, want 2 (the last series' line and legend)", n)
	}
	if n := bytes.Count(doc, []byte(`stroke-dasharray`)); n != 2 {
		t.Errorf("%d dashed marks, want 2", n)
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
			Series: []Series{{Name: name, Color: name, Points: []Point{{x0, y0}, {x1, y1}}}},
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
	a := &Chart{Title: "a", Series: []Series{{Name: "s", Points: []Point{{0, 0}, {1, 1}}}}}
	b := &Chart{Title: "b <&>", Width: 600, Height: 300, Series: []Series{{Name: "s", Points: []Point{{0, 1}, {1, 0}}, Color: "#D55E00"}}}
	var buf bytes.Buffer
	if _, err := WriteStacked(&buf, a, b); err != nil {
		t.Fatal(err)
	}
	doc := buf.Bytes()
	_, elems := decode(t, doc)
	if elems["title"] != 2 {
		t.Errorf("%d titles, want one per chart", elems["title"])
	}
	for _, want := range []string{`width="800" height="750"`, `<g transform="translate(0 0)">`, `<g transform="translate(0 450)">`} {
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
	top := img.SubImage(image.Rect(0, 0, 800, 450)).(*image.RGBA)
	if n := svgcheck.Count(top, c, 24); n != 0 {
		t.Errorf("the second chart's colour covers %d pixels of the first chart", n)
	}
	if ink := svgcheck.Ink(img, image.Rect(0, 450, 600, 750)); ink < 0.01 {
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
		XLog: true, YLog: true,
		Series: []Series{{Name: "a", Points: pts}, {Name: "b", Points: []Point{{2, 1}, {0, 0.5}, {50, 0.01}}}},
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
		Title: "load", Series: []Series{{Name: "naive", Points: []Point{{0, 10}, {1, 50}, {2, 20}}}, {Name: "cap", Points: []Point{{0, 30}, {2, 30}}, Dashed: true}},
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
