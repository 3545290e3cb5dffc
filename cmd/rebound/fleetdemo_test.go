package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rebound-go/rebound/internal/shedload"
)

// demo -fleet runs the fleet through a dependency that fails fast, without
// and with the Shedder, prints both runs under headings that sit over
// their figures, writes its chart to a file of its own (not the main
// demo's) and its report with -html. The run is shortened to 3s here
// (1.5s under -short): what is checked is the report's form, which a
// shorter run prints alike.
func TestDemoFleet(t *testing.T) {
	fleetDemoAdjust = func(sc *shedload.Scenario) {
		sc.Duration, sc.Outage.Start, sc.Outage.Length = 3*time.Second, time.Second, time.Second
		if testing.Short() {
			sc.Duration, sc.Outage.Start, sc.Outage.Length = 1500*time.Millisecond, 500*time.Millisecond, 500*time.Millisecond
		}
	}
	t.Cleanup(func() { fleetDemoAdjust = nil })
	t.Chdir(t.TempDir())
	out, stderr, code := runCLI(t, "demo", "-fleet", "-fleet-clients", "20", "-fleet-shape", "fail-fast", "-fleet-protocol", "connect", "-html", "fleet.html")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	flat := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{"20 client processes on loopback, each with its own connectretry client",
		"a dependency is down and the handler fails every call at once with UNAVAILABLE",
		"Load during the outage:", "attempts per call with the Shedder", "Recovery:", "Goodput during the outage:",
		"Chart (goodput, and attempts per call, over time, without and with the Shedder): rebound-fleet.svg",
		"Report (table, chart, conclusion): fleet.html"} {
		if !strings.Contains(flat, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// Each heading ends where its column's figures end, in both runs.
	lines := strings.Split(out, "\n")
	head := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "run ") {
			head = i
			break
		}
	}
	if head < 0 || len(lines) < head+3 {
		t.Fatalf("no table:\n%s", out)
	}
	ends := func(l string) []int {
		var e []int
		for i := 1; i <= len(l); i++ {
			if l[i-1] != ' ' && (i == len(l) || l[i] == ' ') {
				e = append(e, i)
			}
		}
		return e
	}
	headings := []string{"calls", "amp-outage", "shed", "failed", "goodput before", "during", "after", "recovery"}
	var headEnds []int
	for _, h := range headings {
		i := strings.Index(lines[head], h)
		if i < 0 {
			t.Fatalf("heading %q missing: %q", h, lines[head])
		}
		headEnds = append(headEnds, i+len(h))
	}
	for j, name := range []string{"without the Shedder", "with the Shedder"} {
		row := lines[head+1+j]
		if !strings.HasPrefix(row, name+" ") {
			t.Fatalf("row %d is %q, want %q first", j+1, row, name)
		}
		cells := ends(row)[len(strings.Fields(name)):]
		if len(cells) != len(headings) {
			t.Fatalf("row %q has %d figures, want %d", row, len(cells), len(headings))
		}
		for k, end := range cells {
			if end != headEnds[k] {
				t.Errorf("column %q ends at %d in the heading, %d in row %q", headings[k], headEnds[k], end, row)
			}
		}
	}
	if b, err := os.ReadFile("rebound-fleet.svg"); err != nil || !bytes.HasPrefix(b, []byte("<svg")) {
		t.Fatalf("chart: %v, %.20q", err, b)
	}
	if _, err := os.Stat("rebound-demo.svg"); err == nil {
		t.Error("demo -fleet wrote the main demo's chart")
	}
	checkReport(t, "fleet.html", 1, "run", 2, 1, "Conclusion", "Load during the outage:", "Without and with the Shedder")
}

// demo -fleet's own flags are validated before anything runs, each error
// naming its flag.
func TestDemoFleetFlags(t *testing.T) {
	t.Chdir(t.TempDir())
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-fleet-shape", "flaky"}, "-fleet-shape"},
		{[]string{"-fleet-shape", ""}, "-fleet-shape"},
		{[]string{"-fleet-protocol", "grpc-web"}, "-fleet-protocol"},
		{[]string{"-fleet-clients", "0"}, "-fleet-clients"},
		{[]string{"-fleet-clients", "2001"}, "-fleet-clients"},
		{[]string{"-svg", filepath.Join("missing", "x.svg")}, "-svg: "},
	} {
		out, stderr, code := runCLI(t, append([]string{"demo", "-fleet"}, tc.args...)...)
		if code != 2 || out != "" || !strings.Contains(stderr, tc.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and %s named", tc.args, code, out, stderr, tc.want)
		}
	}
}
