package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// demo -fleet prints its rounds under headings that sit over their
// numbers, writes its chart to a file of its own (not the main demo's) and
// its report with -html.
func TestDemoFleet(t *testing.T) {
	t.Chdir(t.TempDir())
	out, stderr, code := runCLI(t, "demo", "-fleet", "-fleet-clients", "40", "-fleet-rounds", "3", "-fleet-limit", "4", "-html", "fleet.html")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"40 gRPC clients on loopback", "Server load: the server accepted at most its limit of 4 every round.",
		"Chart (calls, attempts reaching the server and accepted, per round): rebound-fleet.svg", "Report (table, chart, conclusion): fleet.html"} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// Each heading ends where its column's numbers end.
	lines := strings.Split(out, "\n")
	head := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "round ") {
			head = i
			break
		}
	}
	if head < 0 || len(lines) < head+4 {
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
	headings := []string{"round", "calls", "to server", "accepted", "shed", "kept home", "max in flight"}
	var headEnds []int
	for _, h := range headings[1:] {
		i := strings.Index(lines[head], h)
		if i < 0 {
			t.Fatalf("heading %q missing: %q", h, lines[head])
		}
		headEnds = append(headEnds, i+len(h))
	}
	for _, row := range lines[head+1 : head+4] {
		cells := ends(row)
		if len(cells) != len(headings) {
			t.Fatalf("row %q has %d cells, want %d", row, len(cells), len(headings))
		}
		for j, end := range cells[1:] {
			if end != headEnds[j] {
				t.Errorf("column %q ends at %d in the heading, %d in row %q", headings[j+1], headEnds[j], end, row)
			}
		}
	}
	if b, err := os.ReadFile("rebound-fleet.svg"); err != nil || !bytes.HasPrefix(b, []byte("<svg")) {
		t.Fatalf("chart: %v, %.20q", err, b)
	}
	if _, err := os.Stat("rebound-demo.svg"); err == nil {
		t.Error("demo -fleet wrote the main demo's chart")
	}
	checkReport(t, "fleet.html", 1, "round", 3, 1, "Conclusion", "Server load:", "Rounds")

	_, stderr, code = runCLI(t, "demo", "-fleet", "-fleet-clients", "10", "-fleet-rounds", "1", "-fleet-limit", "20", "-svg", "")
	if code != 2 || !strings.Contains(stderr, "-fleet-limit") {
		t.Errorf("limit above clients: exit %d, %q", code, stderr)
	}
	_, stderr, code = runCLI(t, "demo", "-fleet", "-svg", filepath.Join("missing", "x.svg"))
	if code != 2 || !strings.Contains(stderr, "-svg: ") {
		t.Errorf("unwritable -svg: exit %d, %q", code, stderr)
	}
}
