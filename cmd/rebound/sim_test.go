package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rebound-go/rebound/internal/sim"
	"github.com/rebound-go/rebound/internal/svgplot/svgcheck"
)

// simShort are flags that make sim run in milliseconds: 5 clients at 50
// req/s against 350 req/s, down for 10s of 30s.
var simShort = []string{
	"-clients", "5", "-rate", "50", "-capacity", "350", "-duration", "30s",
	"-outage-start", "10s", "-outage-length", "10s", "-seed", "3",
}

func simArgs(svg string, extra ...string) []string {
	args := append([]string{"sim"}, simShort...)
	return append(append(args, "-svg", svg), extra...)
}

// simRow is one line of sim's table.
type simRow struct {
	requests, attempts         int
	amp, ampOutage             float64
	goodput, recovery, success float64
}

var simRowRE = regexp.MustCompile(`(?m)^(no-retries|naive|a6-throttle|token-bucket) +(\d+) +(\d+) +([\d.]+)x +([\d.]+)x +([\d.]+) +([\d.]+) +([\d.]+)% +\S+ +\S+$`)

func parseSimTable(t *testing.T, out string) map[string]simRow {
	t.Helper()
	rows := map[string]simRow{}
	for _, m := range simRowRE.FindAllStringSubmatch(out, -1) {
		var r simRow
		var err error
		atoi := func(s string) int {
			n, e := strconv.Atoi(s)
			err = errors.Join(err, e)
			return n
		}
		atof := func(s string) float64 {
			f, e := strconv.ParseFloat(s, 64)
			err = errors.Join(err, e)
			return f
		}
		r.requests, r.attempts = atoi(m[2]), atoi(m[3])
		r.amp, r.ampOutage = atof(m[4]), atof(m[5])
		r.goodput, r.recovery, r.success = atof(m[6]), atof(m[7]), atof(m[8])
		if err != nil {
			t.Fatalf("row %q: %v", m[0], err)
		}
		rows[m[1]] = r
	}
	if len(rows) != 4 {
		t.Fatalf("found %d policy rows, want 4:\n%s", len(rows), out)
	}
	return rows
}

// parseSVG checks that the file is well-formed XML with an svg root and
// returns its text.
func parseSVG(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(bytes.NewReader(data))
	var text strings.Builder
	root := ""
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s is not well-formed XML: %v", path, err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = tok.Name.Local
			}
		case xml.CharData:
			text.Write(tok)
		}
	}
	if root != "svg" {
		t.Fatalf("%s: root element %q, want svg", path, root)
	}
	return text.String()
}

func TestSim(t *testing.T) {
	svg := filepath.Join(t.TempDir(), "load.svg")
	out, stderr, code := runCLI(t, simArgs(svg)...)
	if code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, stderr)
	}
	rows := parseSimTable(t, out)
	none, naive, throttle, bucket := rows["no-retries"], rows["naive"], rows["a6-throttle"], rows["token-bucket"]
	for name, r := range rows {
		if r.requests != none.requests {
			t.Errorf("%s: %d requests, no-retries %d: arrivals differ", name, r.requests, none.requests)
		}
		if r.attempts < r.requests || r.success <= 0 || r.success > 100 {
			t.Errorf("%s: %+v", name, r)
		}
	}
	if none.amp != 1 || none.ampOutage != 1 || none.attempts != none.requests {
		t.Errorf("no-retries: %+v, want one attempt per request", none)
	}
	if naive.ampOutage < 2.5 {
		t.Errorf("naive: amplification during the outage %v, want >= 2.5", naive.ampOutage)
	}
	if !(throttle.ampOutage < bucket.ampOutage && bucket.ampOutage < naive.ampOutage && bucket.ampOutage <= 1.3) {
		t.Errorf("amplification during the outage: a6-throttle %v, token-bucket %v, naive %v; want increasing and the budgets <= 1.3",
			throttle.ampOutage, bucket.ampOutage, naive.ampOutage)
	}
	for _, want := range []string{
		"5 clients × 50 req/s = 250 req/s; server 350 req/s (35 workers × 100ms)",
		"outage from 10s to 20s at 0% capacity",
		"On success rate ",
		"On p99 time to success ",
		// The shedder's "don't retry" and the A6 throttle tie.
		"a6-throttle and shed added the least load",
		"while naive multiplied the load on the server",
		"wrote the charts (offered load, load amplification over time) to " + svg,
	} {
		// The paragraphs are wrapped: compare words, not lines.
		if !strings.Contains(strings.Join(strings.Fields(out), " "), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	text := parseSVG(t, svg)
	for _, want := range []string{"no-retries", "naive", "a6-throttle", "token-bucket", "server capacity", "outage", "virtual time (s)",
		"Load amplification over time", "1×: one attempt per request"} {
		if !strings.Contains(text, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
	doc, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	// Every policy's line shows, and the server's dashed capacity.
	if _, err := svgcheck.Check(doc, "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#000000"); err != nil {
		t.Errorf("chart: %v", err)
	}
}

func TestSimHTML(t *testing.T) {
	page := filepath.Join(t.TempDir(), "sim.html")
	out, stderr, code := runCLI(t, simArgs("", "-html", page)...)
	if code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, stderr)
	}
	if !strings.Contains(out, "wrote the report (tables, charts, policies, conclusion) to "+page) {
		t.Errorf("output does not name the report:\n%s", out)
	}
	checkReport(t, page, 3, "policy", 4, 2, "naive retries: up to 5 attempts, no budget", "During the outage", "Failed requests by why retrying stopped")
}

// simResult is a synthetic result: requests that arrived, the share that
// succeeded, attempts per request overall and in the outage, and p99.
func simResult(p sim.Policy, success, amp, ampOutage float64, p99 time.Duration) sim.Result {
	r := sim.Result{Policy: p, Requests: 10000, SuccessRate: success, Amplification: amp, OutageAmplification: ampOutage, P99: p99}
	r.Succeeded = int(math.Round(success * 10000))
	r.Attempts = int(math.Round(amp * 10000))
	r.Exhausted = r.Requests - r.Succeeded
	return r
}

// TestSimFailedTable: the columns of the failed requests add up to every
// request that failed, whatever stopped it (pushback included).
func TestSimFailedTable(t *testing.T) {
	r := simResult(sim.Shed, 0.6, 1, 1, 100*time.Millisecond)
	r.Exhausted, r.Throttled, r.PushedBack, r.PastDeadline = 100, 200, 3000, 700
	_, failed := simTables(&sim.Report{Config: sim.DefaultConfig, Results: []sim.Result{r}})
	if want := []string{"policy", "attempts", "budget", "pushback", "deadline"}; !slices.Equal(failed[0], want) {
		t.Fatalf("headings %q, want %q", failed[0], want)
	}
	if want := []string{"shed", "100", "200", "3000", "700"}; !slices.Equal(failed[1], want) {
		t.Fatalf("row %q, want %q", failed[1], want)
	}
}

func TestSimConclusion(t *testing.T) {
	r := &sim.Report{Config: sim.DefaultConfig, Results: []sim.Result{
		simResult(sim.NoRetries, 0.666, 1, 1, 100*time.Millisecond),
		simResult(sim.Naive, 0.698, 2.37, 4.45, 8700*time.Millisecond),
		simResult(sim.Throttled, 0.667, 1.004, 1.01, 100*time.Millisecond),
		simResult(sim.Bucket, 0.667, 1.06, 1.17, 102*time.Millisecond),
	}}
	r.Results[2].Exhausted, r.Results[2].Throttled = 0, 3330
	r.Results[1].RecoveryGoodput, r.Results[2].RecoveryGoodput = 1085, 990
	got := strings.Join(simConclusion(r), " ")
	for _, want := range []string{
		"On success rate naive won with 69.8% of requests succeeding, against 66.6% with no retries. Of its 3020 failed requests, 3020 ran out of attempts.",
		"On p99 time to success no-retries, a6-throttle and token-bucket tied at about 100ms: with at most 1.06 attempts per request, " +
			"nearly all their successes came on a first attempt, while a request that retries rescue waits out their backoff (p99 8.7s for naive).",
		"During the outage, of the policies that retry, a6-throttle added the least load, 1.01× the attempts of one per request " +
			"(a6-throttle's budget refused the retries of 3330 requests once failures had drained it), while naive multiplied the load on the server 4.45×.",
		"Holding the load down cost 3.1 points of success rate (66.7% against 69.8%), and after the outage a6-throttle completed 990.0 requests/s against 1085.0 for naive.",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("conclusion lacks %q:\n%s", want, got)
		}
	}

	// Other numbers, other winners.
	r.Results[1] = simResult(sim.Naive, 0.669, 2.37, 4.45, 150*time.Millisecond)
	r.Results[3] = simResult(sim.Bucket, 0.668, 1.06, 1.0, 102*time.Millisecond)
	got = strings.Join(simConclusion(r), " ")
	for _, want := range []string{
		"On success rate no policy beat no-retries: all were within half a point of 66.9%.",
		"On p99 time to success no-retries, a6-throttle and token-bucket tied at about 100ms.",
		"During the outage, of the policies that retry, token-bucket and a6-throttle added the least load, 1.00×",
		"It lost nothing for it: 66.8% of its requests succeeded against 66.9% for naive",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("conclusion lacks %q:\n%s", want, got)
		}
	}
}

func TestSimDeterministic(t *testing.T) {
	svg := filepath.Join(t.TempDir(), "load.svg")
	render := func(extra ...string) (string, []byte) {
		out, stderr, code := runCLI(t, simArgs(svg, extra...)...)
		if code != 0 {
			t.Fatalf("exit %d, stderr: %s", code, stderr)
		}
		data, err := os.ReadFile(svg)
		if err != nil {
			t.Fatal(err)
		}
		return out, data
	}
	out1, svg1 := render()
	out2, svg2 := render()
	if out1 != out2 || !bytes.Equal(svg1, svg2) {
		t.Fatal("the same flags gave different output")
	}
	out3, svg3 := render("-seed", "4")
	if out3 == out1 || bytes.Equal(svg3, svg1) {
		t.Fatal("a different seed gave the same output")
	}
}

func TestSimWithoutSVG(t *testing.T) {
	t.Chdir(t.TempDir())
	out, stderr, code := runCLI(t, simArgs("")...)
	if code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, stderr)
	}
	if strings.Contains(out, "wrote") || strings.Contains(out, ".svg") {
		t.Errorf("output mentions a chart:\n%s", out)
	}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("sim -svg \"\" wrote %v", entries[0].Name())
	}
}

func TestSimDefaultSVGPath(t *testing.T) {
	t.Chdir(t.TempDir())
	if _, stderr, code := runCLI(t, append([]string{"sim"}, simShort...)...); code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, stderr)
	}
	parseSVG(t, "rebound-sim.svg")
}

func TestSimHelp(t *testing.T) {
	_, stderr, code := runCLI(t, "sim", "-h")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"usage: rebound sim", "Model:", "-outage-capacity", "-svg"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("help lacks %q:\n%s", want, stderr)
		}
	}
	_, stderr, _ = runCLI(t)
	if !strings.Contains(stderr, "sim ") {
		t.Errorf("command list lacks sim:\n%s", stderr)
	}
}

func TestSimRejectsBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in stderr
	}{
		{[]string{"-clients", "0"}, "-clients must be"},
		{[]string{"-clients", "many"}, "-clients"},
		{[]string{"-rate", "0"}, "-rate must be"},
		{[]string{"-rate", "NaN"}, "-rate must be"},
		{[]string{"-rate", "1e6"}, "-rate is too high"},
		{[]string{"-duration", "0s"}, "-duration must be"},
		{[]string{"-capacity", "-5"}, "-capacity must be"},
		{[]string{"-capacity", "1"}, "-capacity does not fit the latency"},
		{[]string{"-latency", "0s"}, "-latency must be"},
		{[]string{"-outage-start", "-1s"}, "-outage-start must be"},
		{[]string{"-outage-length", "-1s"}, "-outage-length must be"},
		{[]string{"-outage-length", "25s"}, "-outage-length must end by the end of the run"},
		{[]string{"-outage-capacity", "1.5"}, "-outage-capacity must be"},
		{[]string{"-max-attempts", "0"}, "-max-attempts must be"},
		{[]string{"-max-attempts", "11"}, "-max-attempts must be"},
		{[]string{"-backoff", "0s"}, "-backoff must be"},
		{[]string{"-max-backoff", "1ms"}, "-max-backoff must be"},
		{[]string{"-backoff-multiplier", "0"}, "-backoff-multiplier must be"},
		{[]string{"-backoff-multiplier", "+Inf"}, "-backoff-multiplier must be"},
		{[]string{"-deadline", "-1s"}, "-deadline must be"},
		{[]string{"-max-tokens", "0"}, "-max-tokens must be"},
		{[]string{"-token-ratio", "0"}, "-token-ratio must be"},
		{[]string{"-bucket", "0"}, "-bucket must be"},
		{[]string{"-retry-cost", "0"}, "-retry-cost must be"},
		{[]string{"-refund", "-1"}, "-refund must be"},
		{[]string{"-seed", "-1"}, "-seed"},
		{[]string{"-nope"}, "-nope"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		args := append(append([]string{"sim"}, simShort...), tc.args...)
		args = append(args, "-svg", "")
		out, stderr, code := runCLI(t, args...)
		if code != 2 || !strings.Contains(stderr, tc.want) || out != "" {
			t.Errorf("%v: exit %d, stderr %q, stdout %q; want exit 2 and %q", tc.args, code, stderr, out, tc.want)
		}
	}
}

func TestSimFlagsCoverConfig(t *testing.T) {
	// Every field a flag sets must be named in errors by that flag; the
	// map and the flag set are kept in step here.
	_, stderr, _ := runCLI(t, "sim", "-h")
	for field, name := range simFlags {
		if !strings.Contains(stderr, "\n  "+name+" ") {
			t.Errorf("%s: no flag %s in the help", field, name)
		}
	}
}

func TestSimUnwritableSVG(t *testing.T) {
	svg := filepath.Join(t.TempDir(), "missing", "load.svg")
	_, stderr, code := runCLI(t, simArgs(svg)...)
	if code != 1 || !strings.Contains(stderr, "sim: -svg:") {
		t.Fatalf("exit %d, stderr %q; want 1 and an -svg error", code, stderr)
	}
}
