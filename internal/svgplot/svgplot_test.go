package svgplot

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"slices"
	"strings"
	"testing"
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
	if elems["polyline"] != 2 {
		t.Errorf("%d polylines, want 2", elems["polyline"])
	}
	if !bytes.Contains(doc, []byte(`stroke="red" stroke-dasharray="6 4"`)) {
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
		name      string
		chart     Chart
		polylines int
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
			if elems["polyline"] != tc.polylines {
				t.Errorf("%d polylines, want %d", elems["polyline"], tc.polylines)
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
	f.Add("title", "series", 0.0, 1.0, 2.0, 3.0)
	f.Add("<&>\"'", "\xff\x00", math.Inf(1), math.NaN(), math.Copysign(0, -1), 1e308)
	f.Fuzz(func(t *testing.T, title, name string, x0, y0, x1, y1 float64) {
		c := &Chart{
			Title:  title,
			YLabel: name,
			Series: []Series{{Name: name, Color: name, Points: []Point{{x0, y0}, {x1, y1}}}},
			Bands:  []Band{{From: x0, To: y1, Label: title}},
		}
		decode(t, render(t, c))
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
	a := &Chart{Title: "a", Series: []Series{{Name: "s", Points: []Point{{0, 0}, {1, 1}}}}}
	b := &Chart{Title: "b <&>", Width: 600, Height: 300}
	var buf bytes.Buffer
	if _, err := WriteStacked(&buf, a, b); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(&buf)
	var svgs []string
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "svg" {
			var y, h string
			for _, at := range se.Attr {
				switch at.Name.Local {
				case "y":
					y = at.Value
				case "height":
					h = at.Value
				}
			}
			svgs = append(svgs, y+"/"+h)
		}
	}
	if want := []string{"/750", "0/450", "450/300"}; !slices.Equal(svgs, want) {
		t.Fatalf("svg elements (y/height) %v, want %v", svgs, want)
	}
}
