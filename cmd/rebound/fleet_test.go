package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
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
// every row): internal/sim's TestFleet checks what the full rows show,
// the figures README and BENCHMARKS.md quote, on the same RunFleet that
// the command prints. With -short the rows are a fiftieth of the size
// (their 10,000 clients each, and the server's capacity), printed by
// runFleet, which sim -fleet calls with the rows whole; a full run prints
// them through the command.
func TestSimFleet(t *testing.T) {
	t.Chdir(t.TempDir())
	c := sim.DefaultConfig
	c.Duration, c.OutageStart, c.OutageLength = 3*time.Second, time.Second, time.Second
	page := filepath.Join(t.TempDir(), "fleet.html")
	scenarios := sim.FleetScenarios
	var out string
	if testing.Short() {
		const k = 50
		c.Capacity /= k
		scenarios = slices.Clone(scenarios)
		for i := range scenarios {
			scenarios[i].Clients /= k
			scenarios[i].AttackRate /= k
		}
		var o, e bytes.Buffer
		if code := runFleet(context.Background(), c, scenarios, page, &o, &e); code != 0 {
			t.Fatalf("exit %d: %s", code, e.String())
		}
		out = o.String()
	} else {
		args := []string{"sim", "-fleet", "-duration", "3s", "-outage-start", "1s", "-outage-length", "1s"}
		o, stderr, code := runCLI(t, append(args, "-html", page)...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		out = o
	}
	rows := tableRows(out)
	if len(rows) != 1+len(sim.FleetScenarios) || !strings.Contains(strings.Join(rows[0], "|"), "server shedding + pushback") {
		t.Fatalf("table rows:\n%s", out)
	}
	reports, err := sim.RunFleet(context.Background(), c, scenarios)
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
