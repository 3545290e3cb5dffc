package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rebound-go/rebound/internal/sim"
)

// tableRows returns the Markdown table rows of out, heading first.
func tableRows(out string) [][]string {
	var rows [][]string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "| ") {
			rows = append(rows, strings.Split(strings.Trim(l, "| "), " | "))
		}
	}
	return rows
}

// sim -fleet prints a row per fleet scenario and a cell per policy, each
// the scenario's result as the run gives it, and with -html writes the
// same table as a page. The outage is made short (the base flags apply to
// every row): internal/sim checks what the full rows show, and without
// -short a full run is checked for the figures too.
func TestSimFleet(t *testing.T) {
	t.Chdir(t.TempDir())
	c := sim.DefaultConfig
	c.Duration, c.OutageStart, c.OutageLength = 3*time.Second, time.Second, time.Second
	args := []string{"sim", "-fleet", "-duration", "3s", "-outage-start", "1s", "-outage-length", "1s"}
	page := filepath.Join(t.TempDir(), "fleet.html")
	out, stderr, code := runCLI(t, append(args, "-html", page)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	rows := tableRows(out)
	if len(rows) != 4 || !strings.Contains(strings.Join(rows[0], "|"), "server shedding + pushback") {
		t.Fatalf("table rows:\n%s", out)
	}
	reports, err := sim.RunFleet(context.Background(), c, sim.FleetScenarios)
	if err != nil {
		t.Fatal(err)
	}
	want := fleetTable(reports)
	for i := range want {
		if strings.Join(rows[i], " | ") != strings.Join(want[i], " | ") {
			t.Errorf("row %d:\n%q\nwant\n%q", i, rows[i], want[i])
		}
	}
	// The conclusion names, per row, the policies with the least load and
	// the one with the most, with the table's figures.
	words := strings.Join(strings.Fields(out), " ")
	for i, h := range fleetHeadlines(reports) {
		if !strings.Contains(words, h) {
			t.Errorf("output lacks the conclusion %q", h)
		}
		for _, m := range regexp.MustCompile(`\(([\d.]+x)\)`).FindAllStringSubmatch(h, -1) {
			if !strings.Contains(strings.Join(want[i+1], " "), m[1]+" (") {
				t.Errorf("the conclusion's %s is not in row %q", m[1], want[i+1])
			}
		}
	}
	if !testing.Short() {
		out, stderr, code := runCLI(t, "sim", "-fleet")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		rows := tableRows(out)
		if len(rows) != 4 {
			t.Fatalf("table rows:\n%s", out)
		}
		// The figures for the old policies, and the shedder's
		// 1.00x in every row.
		for i, want := range [][]string{
			{"50 x 20 req/s, full outage", "4.45x", "1.01x", "1.17x"},
			{"10,000 x 0.1 req/s, full outage", "4.45x", "2.20x"},
			{"10,000 x 0.1 req/s, 50% brownout", "3.07x", "2.06x"},
		} {
			row := strings.Join(rows[i+1], " | ")
			if rows[i+1][0] != want[0] {
				t.Errorf("row %d is %q, want %q", i, rows[i+1][0], want[0])
			}
			for _, w := range want[1:] {
				if !strings.Contains(row, w) {
					t.Errorf("row %q lacks %s", row, w)
				}
			}
			if !strings.HasPrefix(rows[i+1][6], "1.00x") {
				t.Errorf("row %q: shedding %q, want 1.00x", rows[i+1][0], rows[i+1][6])
			}
		}
	}
	checkReport(t, page, 1, "clients x rate", 3, 0, "Conclusion", "server shedding + pushback", "Per-client budgets")
	if !strings.Contains(out, "wrote the report (table, conclusion) to "+page) {
		t.Errorf("output does not name the report:\n%s", out)
	}
	if _, stderr, code := runCLI(t, "sim", "-fleet", "-retry-share", "1"); code != 2 || !strings.Contains(stderr, "-retry-share") {
		t.Errorf("-retry-share 1: exit %d, %q", code, stderr)
	}
	if _, err := os.Stat("rebound-sim.svg"); err == nil {
		t.Error("sim -fleet wrote the sim's chart")
	}
}
