package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func runCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), code
}

func TestDemo(t *testing.T) {
	svg := filepath.Join(t.TempDir(), "demo.svg")
	out, stderr, code := runCLI(t, "demo", "-duration", "400ms", "-rate", "200", "-outage", "100ms", "-svg", svg)
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
		calls, _ := strconv.Atoi(r[2])
		success, _ := strconv.ParseFloat(r[3], 64)
		p50, _ := strconv.ParseFloat(r[4], 64)
		p99, _ := strconv.ParseFloat(r[5], 64)
		attempts, _ := strconv.ParseFloat(r[7], 64)
		if calls == 0 || success < 0 || success > 100 || p50 > p99 || attempts < 1 || attempts > maxAttempts[r[1]] {
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
	f, err := os.Open(svg)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := xml.NewDecoder(f)
	charts := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG not well-formed: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "title" {
			charts++
		}
	}
	if charts != 2 {
		t.Fatalf("SVG has %d charts, want 2", charts)
	}
}

func TestDemoRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"demo", "-error-rate", "1.5"},
		{"demo", "-rate", "0"},
		{"demo", "-duration", "1ms"},
		{"demo", "-outage", "10s"},
		{"demo", "-timeout", "-1s"},
		{"demo", "extra"},
		{"demo", "-nope"},
	} {
		if _, _, code := runCLI(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

func TestUnknownCommand(t *testing.T) {
	_, stderr, code := runCLI(t, "frobnicate")
	if code != 2 || !strings.Contains(stderr, `unknown command "frobnicate"`) || !strings.Contains(stderr, "demo") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if _, _, code := runCLI(t); code != 2 {
		t.Fatalf("no command: exit %d, want 2", code)
	}
}
