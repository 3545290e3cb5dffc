package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestValidateValid(t *testing.T) {
	p := writeFile(t, `{"methodConfig":[{"name":[{"service":"pkg.Svc","method":"Get"}],
		"retryPolicy":{"maxAttempts":8,"initialBackoff":"0.1s","maxBackoff":"0.3s","backoffMultiplier":2,
		"retryableStatusCodes":["unavailable","invalid_argument"]},"future":true}],
		"retryThrottling":{"maxTokens":10,"tokenRatio":0.5466}}`)
	out, stderr, code := runCLI(t, "validate", "-max-attempts", "4", p)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, stderr)
	}
	for _, want := range []string{
		p + ": warning: methodConfig[0].future: unknown field, ignored",
		p + ": warning: methodConfig[0].retryPolicy.retryableStatusCodes[1]: INVALID_ARGUMENT should never be retried automatically (AIP-194)",
		p + ": valid",
		"retryThrottling: maxTokens 10, +0.546 per success, retries and hedges stop at or below 5 tokens",
		"/pkg.Svc/Get",
		"retry: 4 attempts (config asks 8, clamped to the client maximum) on [INVALID_ARGUMENT UNAVAILABLE]",
		"retry 1 after random(0, 100ms)",
		"retry 2 after random(0, 200ms)",
		"retry 3 after random(0, 300ms)",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("output lacks line %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "retry 4 after") {
		t.Errorf("describes a fourth retry under a limit of 4 attempts:\n%s", out)
	}
}

func TestValidateInvalid(t *testing.T) {
	good := writeFile(t, `{}`)
	bad := writeFile(t, `{"methodConfig":[{"name":[{"service":"a.B"}],
		"retryPolicy":{"maxAttempts":2.5,"initialBackoff":"0.1","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["NOPE"]}}]}`)
	out, _, code := runCLI(t, "validate", good, bad)
	if code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, out)
	}
	var errLines []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(l, bad+": error: ") {
			errLines = append(errLines, strings.TrimPrefix(l, bad+": error: "))
		}
	}
	wantPaths := []string{
		"methodConfig[0].retryPolicy.maxAttempts: ",
		"methodConfig[0].retryPolicy.initialBackoff: ",
		"methodConfig[0].retryPolicy.retryableStatusCodes[0]: ",
	}
	if len(errLines) != len(wantPaths) {
		t.Fatalf("error lines %q, want %d", errLines, len(wantPaths))
	}
	for i, w := range wantPaths {
		if !strings.HasPrefix(errLines[i], w) {
			t.Errorf("error line %q does not start with %q", errLines[i], w)
		}
	}
	if !strings.Contains(out, good+": valid\n") {
		t.Errorf("the valid file was not reported valid:\n%s", out)
	}
}

func TestValidateUsage(t *testing.T) {
	if _, _, code := runCLI(t, "validate"); code != 2 {
		t.Fatalf("no files: exit %d, want 2", code)
	}
	if out, _, code := runCLI(t, "validate", filepath.Join(t.TempDir(), "missing.json")); code != 1 || !strings.Contains(out, "error:") {
		t.Fatalf("missing file: exit %d, %q", code, out)
	}
	if _, _, code := runCLI(t, "validate", "-max-attempts", "0", "x"); code != 2 {
		t.Fatalf("bad flag: exit %d, want 2", code)
	}
}
