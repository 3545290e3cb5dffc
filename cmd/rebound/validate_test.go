package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
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

// at returns "LINE:COL" of the first occurrence of s in body, counted
// independently of the parser: lines from 1, columns in bytes from 1.
func at(t *testing.T, body, s string) string {
	t.Helper()
	i := strings.Index(body, s)
	if i < 0 {
		t.Fatalf("%q not in the config", s)
	}
	line := strings.Count(body[:i], "\n") + 1
	col := i - strings.LastIndex(body[:i], "\n")
	return fmt.Sprintf("%d:%d", line, col)
}

// validate runs "rebound validate" with stdin as standard input.
func validate(stdin string, args ...string) (string, string, int) {
	var out, errb bytes.Buffer
	code := runValidate(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return out.String(), errb.String(), code
}

func wantLines(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains("\n"+out, "\n"+w+"\n") {
			t.Errorf("output lacks line %q:\n%s", w, out)
		}
	}
}

func TestValidateValid(t *testing.T) {
	body := `{"methodConfig":[{"name":[{"service":"pkg.Svc","method":"Get"}],
		"retryPolicy":{"maxAttempts":8,"initialBackoff":"0.1s","maxBackoff":"0.3s","backoffMultiplier":2,
		"retryableStatusCodes":["unavailable","invalid_argument"]},"future":true}],
		"retryThrottling":{"maxTokens":10,"tokenRatio":0.5466}}`
	p := writeFile(t, body)
	out, stderr, code := runCLI(t, "validate", "-max-attempts", "4", p)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, stderr)
	}
	wantLines(t, out,
		p+":"+at(t, body, `"invalid_argument"`)+": warning: methodConfig[0].retryPolicy.retryableStatusCodes[1]: INVALID_ARGUMENT should never be retried automatically (AIP-194)",
		p+":"+at(t, body, `"future"`)+": warning: methodConfig[0].future: unknown field, ignored",
		p+": valid",
		"  retryThrottling: maxTokens 10, +0.546 per success, retries and hedges stop at or below 5 tokens",
		"  /pkg.Svc/Get",
		"    retry: 4 attempts (config asks 8, clamped to the client maximum) on [INVALID_ARGUMENT UNAVAILABLE]",
		"      retry 1 after random(0, 100ms)",
		"      retry 2 after random(0, 200ms)",
		"      retry 3 after random(0, 300ms)",
	)
	if strings.Contains(out, "retry 4 after") {
		t.Errorf("describes a fourth retry under a limit of 4 attempts:\n%s", out)
	}
	// Warnings come in document order, Lint's among Parse's.
	if strings.Index(out, "INVALID_ARGUMENT should") > strings.Index(out, "unknown field") {
		t.Errorf("warnings out of document order:\n%s", out)
	}
}

// Errors read as FILE:LINE:COL: path: message, and the warnings of an
// invalid config are printed beside its errors.
func TestValidateInvalid(t *testing.T) {
	good := writeFile(t, `{}`)
	body := "{\"methodConfig\":[{\"name\":[{\"service\":\"a.B\"}],\n" +
		"  \"retryPolicy\":{\"maxAttempts\":2.5,\"initialBackoff\":\"0.1\",\"maxBackoff\":\"1s\",\"backoffMultiplier\":2,\n" +
		"  \"retryableStatusCodes\":[\"NOPE\"], \"jitter\": 0.2}}]}"
	bad := writeFile(t, body)
	out, _, code := runCLI(t, "validate", good, bad)
	if code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, out)
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(l, bad) {
			got = append(got, l)
		}
	}
	want := []string{
		bad + ":" + at(t, body, "2.5") + ": methodConfig[0].retryPolicy.maxAttempts: must be a JSON integer, got 2.5",
		bad + ":" + at(t, body, `"0.1"`) + `: methodConfig[0].retryPolicy.initialBackoff: invalid duration "0.1": missing "s" suffix`,
		bad + ":" + at(t, body, `"NOPE"`) + `: methodConfig[0].retryPolicy.retryableStatusCodes[0]: unknown status code name "NOPE"`,
		bad + ":" + at(t, body, `"jitter"`) + ": warning: methodConfig[0].retryPolicy.jitter: unknown field, ignored",
		bad + ": invalid (3 errors, 1 warning)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("lines for the bad file:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	wantLines(t, out, good+": valid")

	// A JSON syntax error has a place too.
	p := writeFile(t, "{\n  \"methodConfig\": [,]\n}")
	out, _, code = runCLI(t, "validate", p)
	if code != 1 || !strings.HasPrefix(out, p+":2:20: invalid JSON: invalid character ',' looking for beginning of value\n") {
		t.Errorf("syntax error: exit %d:\n%s", code, out)
	}
}

// A config in grpc-go's spellings is valid with warnings; -strict turns
// them into errors.
func TestValidateStrict(t *testing.T) {
	body := `{"methodConfig":[{"name":[{"service":"a.B"}],"RetryPolicy":{"maxAttempts":2,"initialBackoff":".1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":[14]}}]}`
	p := writeFile(t, body)
	caseLine := ":" + at(t, body, `"RetryPolicy"`) + ": warning: methodConfig[0].RetryPolicy: A6 spells this field \"retryPolicy\"; grpc-go accepts any letter case, other gRPC implementations do not"
	durLine := ":" + at(t, body, `".1s"`) + `: warning: methodConfig[0].RetryPolicy.initialBackoff: ".1s" is not a proto3 JSON duration; grpc-go reads it as "0.100s", A6's spelling`

	out, _, code := runCLI(t, "validate", p)
	if code != 0 {
		t.Fatalf("without -strict: exit %d:\n%s", code, out)
	}
	wantLines(t, out, p+caseLine, p+durLine, p+": valid", "    retry: 2 attempts on [UNAVAILABLE]")

	for _, flag := range []string{"-strict", "--strict"} {
		out, _, code = runCLI(t, "validate", flag, p)
		if code != 1 {
			t.Fatalf("%s: exit %d, want 1:\n%s", flag, code, out)
		}
		wantLines(t, out,
			p+strings.Replace(caseLine, "warning: ", "", 1),
			p+strings.Replace(durLine, "warning: ", "", 1),
			p+": invalid (2 errors, 0 warnings)")
	}

	clean := writeFile(t, `{"methodConfig":[{"name":[{}],"timeout":"1s"}]}`)
	if out, _, code := runCLI(t, "validate", "-strict", clean); code != 0 {
		t.Errorf("-strict on a config without warnings: exit %d:\n%s", code, out)
	}
}

func TestValidateStdin(t *testing.T) {
	out, _, code := validate(`{"methodConfig":[{"name":[{}],"waitForReady":true}]}`, "-")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	wantLines(t, out, "-: valid", "  default (every method)", "    waitForReady true")

	out, _, code = validate("{\n\"methodConfig\": 1}", "-")
	if code != 1 {
		t.Fatalf("invalid stdin: exit %d:\n%s", code, out)
	}
	wantLines(t, out, "-:2:17: methodConfig: must be a JSON array of objects, got number")

	if _, stderr, code := validate("{}", "-", "-"); code != 2 || !strings.Contains(stderr, "given twice") {
		t.Errorf(`"-" twice: exit %d, stderr %q`, code, stderr)
	}
	out, _, code = validate(strings.Repeat(" ", 100)+"{}", "-max-bytes", "50", "-")
	if code != 1 || !strings.Contains(out, "-: larger than 50 bytes") {
		t.Errorf("stdin over -max-bytes: exit %d:\n%s", code, out)
	}
}

func TestValidateHelp(t *testing.T) {
	for _, flag := range []string{"-h", "--help", "-help"} {
		out, stderr, code := validate("", flag)
		if code != 0 || stderr != "" {
			t.Errorf("%s: exit %d, stderr %q", flag, code, stderr)
		}
		for _, want := range []string{
			"usage: rebound validate [flags] FILE...",
			`FILE "-" reads standard input`,
			"FILE:LINE:COL: JSON.PATH: message",
			"0  every file is valid",
			"1  a file is invalid or cannot be read",
			"2  usage error",
			"-strict", "-format", "-version", "-max-attempts",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: usage lacks %q:\n%s", flag, want, out)
			}
		}
	}
}

func TestValidateVersion(t *testing.T) {
	for _, flag := range []string{"-version", "--version"} {
		out, _, code := validate("", flag)
		// A test binary is built inside the module: its version is
		// "(devel)", followed by the Go version.
		if code != 0 || !regexp.MustCompile(`^rebound (\(devel\)|v\S+)( [0-9a-f]+)? go1\.\S+\n$`).MatchString(out) {
			t.Errorf("%s: exit %d, %q", flag, code, out)
		}
	}
}

func TestValidateUsage(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"-max-attempts", "0", "x"},
		{"-format", "xml", "x"},
		{"-max-bytes", "0", "x"},
		{"-no-such-flag", "x"},
	} {
		if _, stderr, code := validate("", args...); code != 2 || stderr == "" {
			t.Errorf("%q: exit %d, stderr %q; want 2 and a message", args, code, stderr)
		}
	}
	if out, _, code := runCLI(t, "validate", filepath.Join(t.TempDir(), "missing.json")); code != 1 || !strings.Contains(out, "no such file") {
		t.Errorf("missing file: exit %d, %q", code, out)
	}
}

// The effective policy lists everything a method config sets.
func TestValidateEffectivePolicy(t *testing.T) {
	body := `{"methodConfig":[
	  {"name":[{"service":"a.B","method":"Get"},{"service":"a.B","method":"List"}],"timeout":"2.5s","waitForReady":false,
	   "maxRequestMessageBytes":1024,"maxResponseMessageBytes":"2048",
	   "retryPolicy":{"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"],"perAttemptRecvTimeout":"0.5s"}},
	  {"name":[{"service":"c.D"}],"hedgingPolicy":{"maxAttempts":3,"hedgingDelay":"0.05s","nonFatalStatusCodes":["UNAVAILABLE"]}},
	  {"name":[{"service":"e.F"}],"retryPolicy":{"maxAttempts":2,"initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":1,"perAttemptRecvTimeout":"3s"}},
	  {"name":[{}]}
	]}`
	p := writeFile(t, body)
	out, _, code := runCLI(t, "validate", p)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	wantLines(t, out,
		"  /a.B/Get, /a.B/List",
		"    timeout 2.5s",
		"    waitForReady false",
		"    maxRequestMessageBytes 1024",
		"    maxResponseMessageBytes 2048",
		"    retry: 3 attempts on [UNAVAILABLE] and per-attempt timeouts",
		"      perAttemptRecvTimeout 500ms: an attempt with no response headers, message or status by then is cancelled",
		"      retry 1 after random(0, 100ms)",
		"      retry 2 after random(0, 200ms)",
		"  /c.D/*",
		"    hedging: 3 attempts, one every 50ms, non-fatal [UNAVAILABLE]",
		"  /e.F/*",
		"    retry: 2 attempts on per-attempt timeouts only",
		"      perAttemptRecvTimeout 3s: an attempt with no response headers, message or status by then is cancelled",
		"  default (every method)",
		"    no retries",
	)
}

// Vectors for retryPolicy.perAttemptRecvTimeout (issue 21.1).
func TestValidatePerAttemptRecvTimeout(t *testing.T) {
	retry := func(extra string) string {
		return `{"methodConfig":[{"name":[{"service":"a.B"}],"retryPolicy":{"maxAttempts":2,"initialBackoff":"1s","maxBackoff":"1s","backoffMultiplier":2,` + extra + `}}]}`
	}
	tests := []struct {
		body string
		code int
		want string // a line of the output
	}{
		{retry(`"retryableStatusCodes":[14],"perAttemptRecvTimeout":"0.25s"`), 0,
			"      perAttemptRecvTimeout 250ms: an attempt with no response headers, message or status by then is cancelled"},
		{retry(`"retryableStatusCodes":[],"perAttemptRecvTimeout":"1s"`), 0, "    retry: 2 attempts on per-attempt timeouts only"},
		{retry(`"retryableStatusCodes":[14],"perAttemptRecvTimeout":"0s"`), 1, "methodConfig[0].retryPolicy.perAttemptRecvTimeout: must be greater than 0"},
		{retry(`"retryableStatusCodes":[14],"perAttemptRecvTimeout":"-1s"`), 1, "methodConfig[0].retryPolicy.perAttemptRecvTimeout: must be greater than 0"},
		{retry(`"retryableStatusCodes":[14],"perAttemptRecvTimeout":"1"`), 1, `methodConfig[0].retryPolicy.perAttemptRecvTimeout: invalid duration "1": missing "s" suffix`},
		{retry(`"retryableStatusCodes":[14],"perAttemptRecvTimeout":1`), 1, `methodConfig[0].retryPolicy.perAttemptRecvTimeout: must be a duration string like "1.5s", got number`},
		{retry(`"retryableStatusCodes":[]`), 1, "methodConfig[0].retryPolicy.retryableStatusCodes: must be non-empty unless perAttemptRecvTimeout is set"},
		{`{"methodConfig":[{"name":[{}],"hedgingPolicy":{"maxAttempts":2,"hedgingDelay":"1s","perAttemptRecvTimeout":"1s"}}]}`, 1,
			"methodConfig[0].hedgingPolicy.perAttemptRecvTimeout: applies to retryPolicy only; a hedging policy starts the next attempt after hedgingDelay instead"},
	}
	for _, tc := range tests {
		out, _, code := validate(tc.body, "-")
		if code != tc.code || !strings.Contains(out, tc.want+"\n") {
			t.Errorf("%s\nexit %d (want %d), output lacks %q:\n%s", tc.body, code, tc.code, tc.want, out)
		}
	}
}

func TestValidateJSON(t *testing.T) {
	body := "{\"methodConfig\":[{\"name\":[{\"service\":\"a.B\"}],\"waitForReady\":true,\"timeout\":\"1s\",\n" +
		"\"retryPolicy\":{\"maxAttempts\":9,\"initialBackoff\":\"0.1s\",\"maxBackoff\":\"1s\",\"backoffMultiplier\":2,\"retryableStatusCodes\":[\"UNAVAILABLE\"],\"perAttemptRecvTimeout\":\"0.5s\"}}]}"
	good := writeFile(t, body)
	out, stderr, code := runCLI(t, "validate", "--format", "json", good, filepath.Join(t.TempDir(), "missing.json"))
	if code != 1 {
		t.Fatalf("exit %d, want 1 (one file is missing): %s", code, stderr)
	}
	var reports []struct {
		File     string
		Valid    bool
		Findings []struct {
			Severity, Path, Message string
			Line, Col               int
		}
		Methods []struct {
			Names        []string
			Timeout      string
			WaitForReady *bool
			RetryPolicy  *struct {
				Attempts, ConfiguredAttempts int
				RetryableStatusCodes         []string
				PerAttemptRecvTimeout        string
				BackoffCeilings              []string
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &reports); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if len(reports) != 2 {
		t.Fatalf("%d reports, want 2:\n%s", len(reports), out)
	}
	r := reports[0]
	if r.File != good || !r.Valid || len(r.Findings) != 1 {
		t.Fatalf("first report: %+v", r)
	}
	f := r.Findings[0]
	if fmt.Sprintf("%d:%d", f.Line, f.Col) != at(t, body, "9") || f.Severity != "warning" || f.Path != "methodConfig[0].retryPolicy.maxAttempts" ||
		!strings.HasPrefix(f.Message, "9 is above the default client limit") {
		t.Errorf("finding %+v", f)
	}
	if len(r.Methods) != 1 {
		t.Fatalf("methods %+v", r.Methods)
	}
	m := r.Methods[0]
	rp := m.RetryPolicy
	if m.Timeout != "1s" || m.WaitForReady == nil || !*m.WaitForReady || rp == nil || rp.Attempts != 5 || rp.ConfiguredAttempts != 9 ||
		rp.PerAttemptRecvTimeout != "0.500s" || strings.Join(rp.RetryableStatusCodes, ",") != "UNAVAILABLE" ||
		strings.Join(rp.BackoffCeilings, ",") != "0.100s,0.200s,0.400s,0.800s" {
		t.Errorf("method %+v, retry policy %+v", m, rp)
	}
	if r := reports[1]; r.Valid || len(r.Findings) != 1 || r.Findings[0].Severity != "error" || !strings.Contains(r.Findings[0].Message, "no such file") {
		t.Errorf("missing file report %+v", r)
	}
}

// Flags may follow the files, as most command-line tools allow; after
// "--" every argument is a file.
func TestValidateFlagsAfterFiles(t *testing.T) {
	body := `{"methodConfig":[{"name":[{"service":"a.B"}],"timeout":"1s","x":1}]}`
	p := writeFile(t, body)
	out, stderr, code := runCLI(t, "validate", p, "-strict")
	if code != 1 || stderr != "" {
		t.Fatalf("exit %d, stderr %q; want 1: -strict makes the unknown field an error", code, stderr)
	}
	wantLines(t, out, p+":"+at(t, body, `"x"`)+": methodConfig[0].x: unknown field, ignored", p+": invalid (1 error, 0 warnings)")
	if strings.Contains(out, "-strict:") {
		t.Errorf("-strict read as a file:\n%s", out)
	}
	out, _, code = runCLI(t, "validate", p, "-format", "json", p)
	if code != 0 || !strings.HasPrefix(out, "[") || strings.Count(out, `"file": "`+p+`"`) != 2 {
		t.Errorf("flag between files: exit %d:\n%s", code, out)
	}
	out, _, code = runCLI(t, "validate", p, "--", "-strict")
	if code != 1 || !strings.Contains(out, "-strict: open -strict: no such file") || !strings.Contains(out, p+": valid") {
		t.Errorf("after --: exit %d:\n%s", code, out)
	}
}

// A file that starts with a UTF-8 byte order mark is valid with a warning
// that says what it is; places count from after it.
func TestValidateByteOrderMark(t *testing.T) {
	body := `{"methodConfig":[{"name":[{"service":"a.B"}],"timeout":"1s","x":1}]}`
	p := writeFile(t, "\ufeff"+body)
	out, _, code := runCLI(t, "validate", p)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	if !strings.HasPrefix(out, p+":1:1: warning: the config starts with a UTF-8 byte order mark (U+FEFF), ignored here; grpc-go rejects it") {
		t.Errorf("no warning about the byte order mark first:\n%s", out)
	}
	wantLines(t, out, p+":"+at(t, body, `"x"`)+": warning: methodConfig[0].x: unknown field, ignored", p+": valid")
	if _, _, code := runCLI(t, "validate", "-strict", p); code != 1 {
		t.Errorf("-strict: exit %d, want 1", code)
	}
}

// A near miss of a field name gets a guess, at every level, the top
// included: a check that passes over retryThrotling no longer drops
// throttling in silence.
func TestValidateDidYouMean(t *testing.T) {
	body := `{"retryThrotling":{"maxTokens":10,"tokenRatio":0.1},"methodConfig":[{"name":[{"servce":"a.B"}],"timout":"1s"}],"jitter":true}`
	// A near miss turns a setting off without a word from grpc-go: it
	// fails the check without -strict; a field near no known one (jitter)
	// stays a warning.
	out, _, code := runCLI(t, "validate", writeFile(t, body))
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	if !strings.Contains(out, ": invalid (3 errors, 1 warning)\n") || !strings.Contains(out, ": warning: jitter: unknown field, ignored\n") {
		t.Errorf("output does not count the near misses as errors and jitter as a warning:\n%s", out)
	}
	for _, want := range []string{
		`retryThrotling: unknown field, ignored (did you mean "retryThrottling"?)`,
		`methodConfig[0].name[0].servce: unknown field, ignored (did you mean "service"?)`,
		`methodConfig[0].timout: unknown field, ignored (did you mean "timeout"?)`,
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// Every finding in one run: AIP-194's advice comes with the errors of an
// invalid config, in document order.
func TestValidateEveryFinding(t *testing.T) {
	body := "{\"methodConfig\":[{\"name\":[{\"service\":\"a.B\"}],\n" +
		"\"retryPolicy\":{\"maxAttempts\":2,\"initialBackoff\":\"0.1\",\"maxBackoff\":\"1s\",\"backoffMultiplier\":2,\n" +
		"\"retryableStatusCodes\":[\"OK\",\"UNAVAILABLE\"]}}]}"
	p := writeFile(t, body)
	out, _, code := runCLI(t, "validate", p)
	if code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, out)
	}
	want := p + ":" + at(t, body, `"0.1"`) + `: methodConfig[0].retryPolicy.initialBackoff: invalid duration "0.1": missing "s" suffix` + "\n" +
		p + ":" + at(t, body, `"OK"`) + ": warning: methodConfig[0].retryPolicy.retryableStatusCodes[0]: OK should never be retried automatically (AIP-194); it is a success, so listing it has no effect\n" +
		p + ": invalid (1 error, 1 warning)\n"
	if out != want {
		t.Errorf("output:\n%s\nwant:\n%s", out, want)
	}
}
