package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/rebound-go/rebound/internal/svgplot/svgcheck"
)

// TestDemoExplains runs a short demo and checks that it explains itself:
// the config of every policy, the adaptive hedging delay, why pushback
// reads as it does, a conclusion, a chart every renderer draws and the
// HTML report.
func TestDemoExplains(t *testing.T) {
	dir := t.TempDir()
	svg, page := filepath.Join(dir, "demo.svg"), filepath.Join(dir, "demo.html")
	out, stderr, code := runCLI(t, "demo", "-duration", "400ms", "-rate", "200", "-outage", "100ms", "-svg", svg, "-html", page)
	if code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, stderr)
	}
	for _, want := range []string{
		"Policies, with the service config each ran with:",
		`  no retries           {}`,
		`"retryPolicy":{"maxAttempts":4,`,
		`"retryThrottling":{"maxTokens":10,"tokenRatio":0.5}`,
		`"hedgingPolicy":{"maxAttempts":3,"hedgingDelay":"0.02s"`,
		"+ WithAdaptiveHedging{MaxExtraLoad: 0.05, Window: 400ms, MinSamples: 50, Burst: 100}",
		"Pushback is",
		"On success rate ",
		"On p99 latency ",
		"Of the policies that retry or hedge, ",
		"Chart (latency tail on log-log axes, server load over time): " + svg,
		"Report (table, charts, config, conclusion): " + page,
	} {
		// The paragraphs are wrapped: compare words, not lines.
		if !strings.Contains(strings.Join(strings.Fields(out), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// Every policy makes the same calls: 200/s for 400ms, however busy
	// the machine.
	rows := regexp.MustCompile(`(?m)^(no retries|A6 retry|retry \+ throttling|hedging \(20ms\)|adaptive hedging) +(\d+) `).FindAllStringSubmatch(out, -1)
	if len(rows) != 5 {
		t.Fatalf("%d policy rows, want 5:\n%s", len(rows), out)
	}
	for _, r := range rows {
		if r[2] != "80" {
			t.Errorf("%s made %s calls, want 80", r[1], r[2])
		}
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
	// The last series drawn lies on top of the others, so its colour
	// must show.
	if _, err := svgcheck.Check(doc, "#E69F00"); err != nil {
		t.Errorf("chart: %v", err)
	}

	checkReport(t, page, 2, "policy", 5, 2, "retryPolicy", "On p99 latency")
}

// checkReport checks that the HTML page at path parses and holds tables
// tables (the configuration's included), the first headed by heading with
// a row for each of rows policies, charts inline <svg> elements, and each
// of texts.
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
	if count["table"] != tables || count["svg"] != charts || count["tr"] < rows+1+rows {
		t.Errorf("report: %d tables, %d svg, %d tr; want %d tables, %d charts and rows for %d policies",
			count["table"], count["svg"], count["tr"], tables, charts, rows)
	}
	for _, want := range append([]string{"Conclusion", "Results", "Charts", "Configuration"}, texts...) {
		if !strings.Contains(text.String(), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if bytes.Contains(data, []byte("<script")) || bytes.Contains(data, []byte(" src=")) {
		t.Error("report is not self-contained")
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

	got := strings.Join(demoConclusion(c, []*outcome{none, retry, throttled, hedge}), " ")
	for _, want := range []string{
		"On success rate A6 retry won with 87.0% of calls succeeding, against 76.0% with no retries: A6 retry retries a failed attempt",
		"Of its 130 failed calls, 20 were told to stop by the server and 110 ran out of attempts or time; 110 of the 130 started during the 600ms outage.",
		"On p99 latency hedging (20ms) won with 22.0ms, against 150.0ms with no retries: 3% of attempts stall for 150ms",
		"hedging (20ms) sends another attempt when one has not answered in 20ms (here 20.0ms).",
		"Of the policies that retry or hedge, retry + throttling added the least load, 0.080 extra attempts per call against 0.500 for A6 retry: " +
			"its throttle refused the retries or hedges of 230 calls",
		"During the outage A6 retry sent 1.5× the attempts of no retries, retry + throttling 1.1×",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("conclusion lacks %q:\n%s", want, got)
		}
	}

	// Other numbers, other winners: the paragraph follows the results.
	throttled.ok, retry.attempts = 871, 1050
	got = strings.Join(demoConclusion(c, []*outcome{none, retry, throttled, hedge}), " ")
	for _, want := range []string{
		"On success rate retry + throttling and A6 retry tied at about 87.1%",
		"Of the policies that retry or hedge, A6 retry added the least load, 0.050 extra attempts per call against 0.110 for hedging (20ms).",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("conclusion lacks %q:\n%s", want, got)
		}
	}

	// When nothing helps, it says so.
	flat := synthetic(t, c, "A6 retry", 760, 1000, 150*time.Millisecond)
	got = strings.Join(demoConclusion(c, []*outcome{none, flat}), " ")
	for _, want := range []string{
		"On success rate no policy beat no retries: all were within half a point of 76.0%.",
		"On p99 latency no retries and A6 retry tied at about 150.0ms.",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("conclusion lacks %q:\n%s", want, got)
		}
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
