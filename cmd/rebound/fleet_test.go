package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
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
	if len(rows) != 1+len(sim.FleetScenarios) || !strings.Contains(strings.Join(rows[0], "|"), "server shedding + pushback") {
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
	// The conclusion's figures for a policy are its cell's.
	compared := 0
	for _, m := range regexp.MustCompile(`([a-zA-Z0-9 +]+) \((?:goodput (\d+/s) against \d+/s)?(?:, )?(?:recovery (\S+) against [^)\s]+)?\)`).FindAllStringSubmatch(words, -1) {
		col := slices.Index(want[0], strings.TrimSpace(m[1]))
		if col < 0 || m[2] == "" && m[3] == "" {
			continue
		}
		compared++
		found := false
		for _, row := range want[1:] {
			found = found || (m[2] == "" || strings.Contains(row[col], "("+m[2])) && (m[3] == "" || strings.HasSuffix(row[col], ", "+m[3]+")"))
		}
		if !found {
			t.Errorf("the conclusion's %q is in no cell of its column", m[0])
		}
	}
	if compared == 0 {
		t.Errorf("no figure of the conclusion's compared:\n%s", out)
	}
	if !testing.Short() {
		out, stderr, code := runCLI(t, "sim", "-fleet")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		rows := tableRows(out)
		if len(rows) != 1+len(sim.FleetScenarios) {
			t.Fatalf("table rows:\n%s", out)
		}
		// The figures for the old policies; and the shedder's at
		// most 1.1x in every row, back within 2s of every outage.
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
		}
		cell := regexp.MustCompile(`^([\d.]+)x \(\d+/s, (\S+)\)$`)
		for _, row := range rows[1:] {
			m := cell.FindStringSubmatch(row[6])
			if m == nil {
				t.Errorf("row %q: shedding %q", row[0], row[6])
				continue
			}
			d, err := time.ParseDuration(m[2])
			if a, _ := strconv.ParseFloat(m[1], 64); a > 1.1 || err != nil || d > 2*time.Second {
				t.Errorf("row %q: shedding %q, want at most 1.10x and a recovery within 2s", row[0], row[6])
			}
		}
	}
	checkReport(t, page, 1, "clients x rate", len(sim.FleetScenarios), 0, "Conclusion", "server shedding + pushback", "Per-client budgets")
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
