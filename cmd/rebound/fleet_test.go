package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestSimFleet(t *testing.T) {
	var out, errb bytes.Buffer
	if code := runSim(context.Background(), []string{"-fleet"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(out.String(), "\n")
	var rows []string
	for _, l := range lines {
		if strings.HasPrefix(l, "| ") {
			rows = append(rows, l)
		}
	}
	if len(rows) != 4 || !strings.Contains(rows[0], "server shedding + pushback") {
		t.Fatalf("table rows:\n%s", strings.Join(rows, "\n"))
	}
	// The figures for the old policies, and the shedder's 1.00x
	// in every row.
	for i, want := range [][]string{
		{"50 x 20 req/s, full outage", "4.45x", "1.01x", "1.17x"},
		{"10,000 x 0.1 req/s, full outage", "4.45x", "2.20x"},
		{"10,000 x 0.1 req/s, 50% brownout", "3.07x", "2.06x"},
	} {
		cells := strings.Split(rows[i+1], " | ")
		if !strings.HasSuffix(cells[0], want[0]) {
			t.Errorf("row %d is %q, want %q", i, cells[0], want[0])
		}
		for _, w := range want[1:] {
			if !strings.Contains(rows[i+1], w) {
				t.Errorf("row %q lacks %s", rows[i+1], w)
			}
		}
		if !strings.HasPrefix(cells[6], "1.00x") {
			t.Errorf("row %q: shedding %q, want 1.00x", cells[0], cells[6])
		}
	}
	if code := runSim(context.Background(), []string{"-fleet", "-retry-share", "1"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "-retry-share") {
		t.Errorf("-retry-share 1: exit %d, %q", code, errb.String())
	}
}
