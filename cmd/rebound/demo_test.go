package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/rebound-go/rebound/internal/svgplot"
	"github.com/rebound-go/rebound/internal/svgplot/svgcheck"
)

// TestDemo runs a short demo with every output and checks that it
// explains itself: a row per policy with the same calls, the config of
// every policy, the adaptive hedging delay, why pushback reads as it does,
// a conclusion that leads with one line per question, a chart every
// renderer draws, the HTML report and the trace file.
func TestDemo(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	svg, page, trace := filepath.Join(dir, "demo.svg"), filepath.Join(dir, "demo.html"), filepath.Join(dir, "trace.json")
	out, stderr, code := runCLI(t, "demo", "-duration", "400ms", "-rate", "200", "-outage", "100ms", "-svg", svg, "-html", page, "-trace", trace)
	if code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, stderr)
	}
	row := regexp.MustCompile(`(?m)^(no retries|A6 retry|retry \+ throttling|hedging \(20ms\)|adaptive hedging)\s+(\d+)\s+([\d.]+)%\s+([\d.]+)ms\s+([\d.]+)ms\s+([\d.]+)ms\s+([\d.]+)x\s+(\d+)\s+(\d+)$`)
	rows := row.FindAllStringSubmatch(out, -1)
	if len(rows) != 5 {
		t.Fatalf("%d policy rows, want 5:\n%s", len(rows), out)
	}
	maxAttempts := map[string]float64{"no retries": 1, "A6 retry": 4, "retry + throttling": 4, "hedging (20ms)": 3, "adaptive hedging": 3}
	for _, r := range rows {
		// Every policy makes the same calls: 200/s for 400ms, however
		// busy the machine.
		if r[2] != "80" {
			t.Errorf("%s made %s calls, want 80", r[1], r[2])
		}
		success, _ := strconv.ParseFloat(r[3], 64)
		p50, _ := strconv.ParseFloat(r[4], 64)
		p99, _ := strconv.ParseFloat(r[5], 64)
		attempts, _ := strconv.ParseFloat(r[7], 64)
		if success < 0 || success > 100 || p50 > p99 || attempts < 1 || attempts > maxAttempts[r[1]] {
			t.Errorf("implausible row %q", r[0])
		}
		if r[1] == "no retries" && (attempts != 1 || r[8] != "0" || r[9] != "0") {
			t.Errorf("no retries made %vx attempts, %s throttled, %s pushback", attempts, r[8], r[9])
		}
	}
	for i := 1; i <= 5; i++ {
		if !strings.Contains(stderr, fmt.Sprintf("[%d/5]", i)) {
			t.Errorf("no progress line for policy %d on stderr:\n%s", i, stderr)
		}
	}
	for _, want := range []string{
		"Policies, with the service config each ran with:",
		`  no retries           {}`,
		`"retryPolicy":{"maxAttempts":4,`,
		`"retryThrottling":{"maxTokens":10,"tokenRatio":0.5}`,
		`"hedgingPolicy":{"maxAttempts":3,"hedgingDelay":"0.02s"`,
		"+ WithAdaptiveHedging{MaxExtraLoad: 0.05, Window: 400ms, MinSamples: 50, Burst: 100}",
		"Pushback is",
		"Chart (latency tail on log-log axes, server load over time): " + svg,
		"Report (table, charts, config, conclusion): " + page,
		"Traces of one retried and one hedged call (spans in " + trace + ")",
	} {
		// The paragraphs are wrapped: compare words, not lines.
		if !strings.Contains(strings.Join(strings.Fields(out), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// The conclusion leads with a line per question, then the detail.
	headlines := regexp.MustCompile(`(?m)^Conclusion:\n  Success rate: .*\n(    .*\n)*  p99 latency: .*\n(    .*\n)*  Extra load: .*\n(    .*\n)*  (Worse than no retries: |No policy did worse than no retries).*\n(    .*\n)*\n\S`)
	if !headlines.MatchString(out) {
		t.Errorf("the conclusion does not lead with success, p99, load and worse-than-no-retries lines:\n%s", out)
	}
	delay := regexp.MustCompile(`adaptive hedging (settled on a hedging delay of \d+\.\dms \(the median of the \d+ hedge timers|kept the configured hedging delay, 20ms)`)
	if !delay.MatchString(strings.Join(strings.Fields(out), " ")) {
		t.Errorf("output does not say which hedging delay adaptive hedging used:\n%s", out)
	}

	doc, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{">p90<", ">p99<", ">p99.9<", ">hedge 20.0ms<", ">outage<"} {
		if !bytes.Contains(doc, []byte(want)) {
			t.Errorf("chart lacks the label %s", want)
		}
	}
	if n := bytes.Count(doc, []byte("<title>")); n != 2 {
		t.Errorf("SVG has %d charts, want 2", n)
	}
	// The tail is drawn as steps: level, then straight down.
	if !regexp.MustCompile(`<path [^>]*d="M[\d.]+ [\d.]+ H[\d.]+ V[\d.]+`).Match(doc) {
		t.Error("the latency tail is not drawn as steps")
	}
	checkChart(t, doc, "#332288")

	checkReport(t, page, 2, "policy", 5, 2, "Conclusion", "Results", "Configuration", "retryPolicy", "p99 latency:")
	report, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	// The conclusion leads with a list, a line per question; configs
	// break only after JSON punctuation.
	for _, want := range []string{"<ul>\n<li>Success rate: ", "<li>p99 latency: ", "<li>Extra load: ",
		`&#34;retryThrottling&#34;:<wbr>{<wbr>&#34;maxTokens&#34;:<wbr>10,<wbr>&#34;tokenRatio&#34;:<wbr>0.5}`} {
		if !bytes.Contains(report, []byte(want)) {
			t.Errorf("report lacks %s", want)
		}
	}
	checkTraceFile(t, trace)
}

// checkChart checks that doc keeps to what every renderer draws alike and
// holds each of colors; outside -short, it draws doc with an independent
// renderer and checks each colour shows (svgplot's tests draw every kind
// of chart; under the race detector a drawing takes seconds).
func checkChart(t *testing.T, doc []byte, colors ...string) {
	t.Helper()
	if err := svgcheck.Portable(doc); err != nil {
		t.Error(err)
	}
	for _, c := range colors {
		if !bytes.Contains(doc, []byte(`stroke="`+c+`"`)) {
			t.Errorf("chart has no line in %s", c)
		}
	}
	if testing.Short() {
		return
	}
	if _, err := svgcheck.Check(doc, colors...); err != nil {
		t.Errorf("chart: %v", err)
	}
}

// checkReport checks that the HTML page at path parses and holds tables
// tables (the configuration's included), the first headed by heading with
// a row for each of rows policies, charts inline <svg> elements under
// "Charts", and each of texts; and that it is self-contained.
func checkReport(t *testing.T, path string, tables int, heading string, rows, charts int, texts ...string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	root, err := html.Parse(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	var text strings.Builder
	var firstTH string
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		switch n.Type {
		case html.ElementNode:
			count[n.Data]++
			if n.Data == "th" && firstTH == "" && n.FirstChild != nil {
				firstTH = n.FirstChild.Data
			}
		case html.TextNode:
			text.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(root)
	if firstTH != heading {
		t.Errorf("report: first table heading %q, want %q", firstTH, heading)
	}
	if count["table"] != tables || count["svg"] != charts || count["tr"] < rows+1 {
		t.Errorf("report: %d tables, %d svg, %d tr; want %d tables, %d charts and rows for %d policies",
			count["table"], count["svg"], count["tr"], tables, charts, rows)
	}
	if charts > 0 {
		texts = append(texts, "Charts")
	}
	for _, want := range texts {
		if !strings.Contains(text.String(), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if bytes.Contains(data, []byte("<script")) || bytes.Contains(data, []byte(" src=")) {
		t.Error("report is not self-contained")
	}
	// It reads at any width: no line break kept from the terminal, no
	// word broken anywhere, every results table in a box of its own that
	// scrolls rather than cut a column off, and smaller tables on a
	// narrow screen.
	for _, bad := range []string{"pre-line", "break-all"} {
		if bytes.Contains(data, []byte(bad)) {
			t.Errorf("report styles text with %s", bad)
		}
	}
	if n, config := bytes.Count(data, []byte(`<div class="scroll"><table>`)), bytes.Count(data, []byte(`<table class="config">`)); n+config != tables {
		t.Errorf("%d of %d tables scroll in a box of their own", n, tables-config)
	}
	for _, want := range []string{`<meta name="viewport"`, "@media (max-width: 800px)"} {
		if !bytes.Contains(data, []byte(want)) {
			t.Errorf("report lacks %s", want)
		}
	}
}

// synthetic returns an outcome of the demo policy named name: 1000 calls,
// ok of them successful, the given attempts, and latencies whose p99 is p99
// and whose other calls took 1ms.
func synthetic(t *testing.T, c demoConfig, name string, ok, attempts int, p99 time.Duration) *outcome {
	t.Helper()
	for _, p := range demoPolicies(c) {
		if p.name != name {
			continue
		}
		o := &outcome{pol: p, calls: 1000, ok: ok, attempts: attempts, slice: 100 * time.Millisecond}
		for i := range 1000 {
			d := time.Millisecond
			if i >= 989 {
				d = p99
			}
			o.latencies = append(o.latencies, d)
		}
		if p.hedges() {
			o.hedgeDelay = 20 * time.Millisecond
		}
		// 400 attempts/s, and attempts × 400 during the outage (1.6s to 2.2s).
		for i := range 40 {
			v := int64(40)
			if i >= 16 && i < 22 {
				v = int64(40 * attempts / 1000)
			}
			o.load = append(o.load, v)
		}
		return o
	}
	t.Fatalf("no policy %q", name)
	return nil
}

func defaultDemoConfig() demoConfig {
	return demoConfig{duration: 4 * time.Second, rate: 400, errorRate: 0.1, pushbackRate: 0.2, latency: time.Millisecond,
		stragglerRate: 0.03, stragglerLatency: 150 * time.Millisecond, outage: 600 * time.Millisecond, timeout: 2 * time.Second}
}

func TestDemoConclusion(t *testing.T) {
	c := defaultDemoConfig()
	none := synthetic(t, c, "no retries", 760, 1000, 150*time.Millisecond)
	retry := synthetic(t, c, "A6 retry", 870, 1500, 151*time.Millisecond)
	retry.failedInOutage, retry.pushback = 110, 20
	throttled := synthetic(t, c, "retry + throttling", 840, 1080, 151*time.Millisecond)
	throttled.throttled = 230
	hedge := synthetic(t, c, "hedging (20ms)", 835, 1110, 22*time.Millisecond)

	got := demoConclusion(c, []*outcome{none, retry, throttled, hedge})
	wantLines(t, strings.Join(got.Headlines, "\n")+"\n",
		"Success rate: A6 retry won with 87.0% of calls succeeding, against 76.0% with no retries.",
		"p99 latency: hedging (20ms) won with 22.0ms, against 150.0ms with no retries.",
		"Extra load: of the policies that retry or hedge, retry + throttling made the fewest attempts, 1.080x per call, against 1.500x for A6 retry.",
		"No policy did worse than no retries in success rate or p99 latency, beyond what counts as a tie.",
	)
	detail := strings.Join(got.Detail, " ")
	for _, want := range []string{
		"A6 retry retries a failed attempt up to 3 times after a backoff, with no budget.",
		"Of A6 retry's 130 failed calls, 20 were told to stop by the server and 110 ran out of attempts or time; 110 of the 130 started during the 600ms outage.",
		"3% of attempts stall for 150ms, so at p99 a call that does not race a second attempt waits for a stalled one; " +
			"hedging (20ms) sends another attempt when one has not answered in 20ms (here 20.0ms).",
		"retry + throttling's throttle refused the retries or hedges of 230 calls",
		"During the outage A6 retry sent 1.5 times the attempts of no retries, retry + throttling 1.1 times",
	} {
		if !strings.Contains(detail, want) {
			t.Errorf("conclusion lacks %q:\n%s", want, detail)
		}
	}
	// Each number as the table writes it.
	table := demoTable([]*outcome{none, retry, throttled, hedge})
	for _, cell := range []string{table[2][2], table[1][2], table[4][4], table[1][4], table[3][6], table[2][6]} {
		if !strings.Contains(strings.Join(got.Headlines, " "), cell) {
			t.Errorf("headlines lack the table's %s", cell)
		}
	}

	// Other numbers, other winners: the paragraph follows the results.
	throttled.ok, retry.attempts = 871, 1050
	got = demoConclusion(c, []*outcome{none, retry, throttled, hedge})
	wantLines(t, strings.Join(got.Headlines, "\n")+"\n",
		"Success rate: retry + throttling (87.1%) and A6 retry (87.0%) tied, within half a point, against 76.0% with no retries.",
		"Extra load: of the policies that retry or hedge, A6 retry made the fewest attempts, 1.050x per call, against 1.110x for hedging (20ms).",
	)

	// A policy that does worse than no retries is named, with the numbers.
	worse := synthetic(t, c, "adaptive hedging", 700, 1100, 400*time.Millisecond)
	got = demoConclusion(c, []*outcome{none, retry, worse})
	wantLines(t, strings.Join(got.Headlines, "\n")+"\n",
		"Worse than no retries: adaptive hedging (70.0% of calls succeeded against 76.0%; p99 400.0ms against 150.0ms).")

	// When nothing helps, it says so.
	flat := synthetic(t, c, "A6 retry", 760, 1000, 150*time.Millisecond)
	got = demoConclusion(c, []*outcome{none, flat})
	wantLines(t, strings.Join(got.Headlines, "\n")+"\n",
		"Success rate: no policy beat no retries; all were within half a point of 76.0%.",
		"p99 latency: no retries (150.0ms) and A6 retry (150.0ms) tied, within 5%.",
	)
}

// The load chart shows only the slices wholly within the run, and shades
// the times calls started late, merged across policies; the tail is drawn
// as steps of the fraction of calls slower than each latency.
func TestDemoCharts(t *testing.T) {
	c := defaultDemoConfig()
	none := synthetic(t, c, "no retries", 760, 1000, 150*time.Millisecond)
	retry := synthetic(t, c, "A6 retry", 870, 1500, 151*time.Millisecond)
	// A last slice cut short by the end of the calls, past the run.
	none.load = append(none.load, 3)
	none.late = []span{{100 * time.Millisecond, 180 * time.Millisecond}}
	retry.late = []span{{150 * time.Millisecond, 250 * time.Millisecond}, {2 * time.Second, 2100 * time.Millisecond}}
	figs := demoCharts(c, []*outcome{none, retry})
	tail, load := figs[0].(*svgplot.Chart), figs[1].(*svgplot.Chart)
	for _, s := range load.Series {
		if n := len(s.Points); n != 40 {
			t.Errorf("%s: %d load points, want 40 (4s in 100ms slices)", s.Name, n)
		}
		if last := s.Points[len(s.Points)-1]; last.X >= c.duration.Seconds() {
			t.Errorf("%s: a point at %vs, past the run", s.Name, last.X)
		}
	}
	var late []svgplot.Band
	for _, b := range load.Bands {
		if b.Color == lateColor {
			late = append(late, b)
		}
	}
	if len(late) != 2 || late[0].From != 0.1 || late[0].To != 0.25 || late[1].From != 2 || late[1].To != 2.1 || late[0].Legend == "" ||
		!late[0].Strip || !late[1].Strip {
		t.Errorf("late bands %+v, want strips at 0.1s-0.25s and 2s-2.1s, with a legend", late)
	}
	for _, s := range tail.Series {
		if !s.Steps {
			t.Errorf("%s: the tail is not drawn as steps", s.Name)
		}
	}
	got := ccdf([]time.Duration{time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond, 4 * time.Millisecond})
	want := []svgplot.Point{{X: 1, Y: 0.75}, {X: 2, Y: 0.5}, {X: 3, Y: 0.25}, {X: 4, Y: 0.25}}
	if !slices.Equal(got, want) {
		t.Errorf("ccdf = %v, want %v", got, want)
	}
}

func TestLateNote(t *testing.T) {
	c := defaultDemoConfig()
	none := synthetic(t, c, "no retries", 760, 1000, time.Millisecond)
	retry := synthetic(t, c, "A6 retry", 870, 1500, time.Millisecond)
	if got := lateNote([]*outcome{none, retry}); got != "" {
		t.Errorf("no late calls: %q, want nothing", got)
	}
	retry.late = []span{{time.Second, time.Second + 80*time.Millisecond}, {2 * time.Second, 2*time.Second + 60*time.Millisecond}}
	want := "The machine was busy: 2 of 2000 calls started more than 50.0ms after they were due, at most 80.0ms late (A6 retry 2)."
	if got := lateNote([]*outcome{none, retry}); !strings.HasPrefix(got, want) {
		t.Errorf("%q, want it to start %q", got, want)
	}
}

func TestPushbackNote(t *testing.T) {
	c := defaultDemoConfig()
	mk := func(counts ...int) []*outcome {
		out := []*outcome{synthetic(t, c, "no retries", 760, 1000, time.Millisecond)}
		for _, n := range counts {
			o := synthetic(t, c, "A6 retry", 870, 1500, time.Millisecond)
			o.pushback = n
			out = append(out, o)
		}
		return out
	}
	for _, tc := range []struct {
		counts []int
		want   string
	}{
		{[]int{21, 21, 21}, "Pushback is the same for every policy that retries or hedges: outside the outage the server tells 1.0% of attempts to stop"},
		{[]int{20, 21, 21}, "Pushback is nearly the same for every policy that retries or hedges (20 to 21)"},
		{[]int{5, 40}, "Pushback is from 5 to 40 across the policies that retry or hedge"},
	} {
		if got := pushbackNote(c, mk(tc.counts...)); !strings.HasPrefix(got, tc.want) {
			t.Errorf("%v: %q, want it to start %q", tc.counts, got, tc.want)
		}
	}
}

func TestWriteTableAndWrap(t *testing.T) {
	var b bytes.Buffer
	writeTable(&b, [][]string{{"policy", "calls"}, {"a", "10"}, {"longer", "1"}})
	if want := "policy  calls\na          10\nlonger      1\n"; b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}
	if got, want := wrap("aa bb cc dd", 5), "aa bb\ncc dd"; got != want {
		t.Errorf("wrap = %q, want %q", got, want)
	}
}

func TestDemoRejectsTooFewCalls(t *testing.T) {
	out, stderr, code := runCLI(t, "demo", "-rate", "10", "-duration", "50ms", "-outage", "0s")
	if code != 2 || out != "" || !strings.Contains(stderr, "-rate × -duration must make at least one call") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want exit 2 and the reason", code, out, stderr)
	}
}

// An output file that cannot be written fails the command at once, naming
// its flag, before any policy runs; it leaves nothing behind.
func TestDemoChecksOutputsFirst(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "nonexistent", "x")
	for _, tc := range []struct{ flag, path string }{
		{"-svg", missing + ".svg"}, {"-html", missing + ".html"}, {"-trace", missing + ".json"}, {"-svg", dir},
	} {
		out, stderr, code := runCLI(t, "demo", "-duration", "10m", tc.flag, tc.path)
		if code != 2 || out != "" || !strings.Contains(stderr, "rebound demo: "+tc.flag+": ") || strings.Contains(stderr, "[1/5]") {
			t.Errorf("%s %s: exit %d, stdout %q, stderr %q; want 2 and an error naming %s before any run", tc.flag, tc.path, code, out, stderr, tc.flag)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("the checks left %v behind", entries)
	}
	// A file that exists is not changed by the check.
	existing := filepath.Join(dir, "old.html")
	if err := os.WriteFile(existing, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := checkWritable(existing); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(existing); string(b) != "old" {
		t.Errorf("the check changed the file to %q", b)
	}
}

// A flag that does not apply is a usage error naming it, not ignored.
func TestDemoFlagsThatDoNotApply(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"-fleet", "-rate", "10"}, "-rate"},
		{[]string{"-fleet", "-trace", "t.json"}, "-trace"},
		{[]string{"-fleet", "-duration", "1s"}, "-duration"},
		{[]string{"-fleet-clients", "10"}, "-fleet-clients"},
		{[]string{"-fleet-shape", "hang"}, "-fleet-shape"},
		{[]string{"-fleet-protocol", "http"}, "-fleet-protocol"},
	} {
		out, stderr, code := runCLI(t, append([]string{"demo"}, tc.args...)...)
		if code != 2 || out != "" || !strings.Contains(stderr, tc.flag+" ") || !strings.Contains(stderr, "appl") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and %s named", tc.args, code, out, stderr, tc.flag)
		}
	}
}
