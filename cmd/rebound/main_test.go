package main

import (
	"bytes"
	"context"
	"regexp"
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
	out, stderr, code := runCLI(t, "demo", "-calls", "50", "-fail-rate", "0.5", "-seed", "7")
	if code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, stderr)
	}
	for _, want := range []string{
		"pushback  failed: server pushback said not to retry",
		"deadline  failed: next attempt would pass the deadline",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// The outage table: no retries makes 1 attempt per call, plain retries
	// 4, and the A6 throttle stays close to 1.
	row := regexp.MustCompile(`(?m)^  (no retries|retries|retries \+ A6 throttle \(10, 0\.1\)|retries \+ token bucket \(500/5\))\s+(\d+)\s`)
	got := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(out, -1) {
		got[m[1]] = m[2]
	}
	want := map[string]string{"no retries": "50", "retries": "200", "retries + A6 throttle (10, 0.1)": "53", "retries + token bucket (500/5)": "150"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("outage %q: %s attempts, want %s\n%s", k, got[k], v, out)
		}
	}
}

func TestDemoRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"demo", "-fail-rate", "1.5"},
		{"demo", "-calls", "0"},
		{"demo", "-max-attempts", "0"},
		{"demo", "-backoff", "-1s"},
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
