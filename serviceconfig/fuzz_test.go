package serviceconfig_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rebound-go/rebound/serviceconfig"
)

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		``, `{}`, `[]`, `null`, `{"a":1,"a":2}`, `{"x":[[[[]]]]}`,
		"\ufeff{\"retryThrotling\":{},\"methodConfg\":[]}",
		lookupConfig,
		retryConfig(validRetry),
		hedgeConfig(validHedge),
		methodConfigs(validMethod.with("retryPolicy", validRetry.String(), "hedgingPolicy", validHedge.String())),
		retryConfig(validRetry.with("maxAttempts", "2.0", "initialBackoff", `"0s"`, "retryableStatusCodes", `[17,"foo",1.5,true]`)),
		hedgeConfig(validHedge.with("hedgingDelay", `"-1s"`, "nonFatalStatusCodes", `[]`)),
		methodConfigs(validMethod.with("timeout", `"0s"`, "waitForReady", "true", "maxRequestMessageBytes", `"1024"`, "maxResponseMessageBytes", "-1")),
		methodConfigs(obj{{"name", `[{"method":"M"},{},{"service":""}]`}}),
		`{"retryThrottling":{"maxTokens":1000,"tokenRatio":0.5466}}`,
		`{"retryThrottling":{"maxTokens":10.5,"tokenRatio":1e-400}}`,
		`{"loadBalancingPolicy":"round_robin","loadBalancingConfig":[{"round_robin":{}}],"foo":{"bar":1}}`,
		`{"methodConfig":[{"name":[{"service":"a/B"}],"retryPolicy":{"maxAttempts":100000000000000000000,"initialBackoff":"9223372036.854775807s","maxBackoff":"0.000000001s","backoffMultiplier":1e308,"retryableStatusCodes":[0,16,"OK"]}}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := serviceconfig.Parse(data)
		if (c == nil) == (err == nil) {
			t.Fatalf("Parse = %v, %v: want exactly one nil", c, err)
		}
		checkIncludeLint(t, data, c, err)
		if err != nil {
			checkParseError(t, data, err)
			return
		}
		if !json.Valid(withoutBOM(data)) {
			t.Fatalf("Parse accepted invalid JSON")
		}
		checkInvariants(t, data, c)

		// Parsing is deterministic.
		c2, err := serviceconfig.Parse(data)
		if err != nil || !reflect.DeepEqual(exported(c), exported(c2)) {
			t.Fatalf("second Parse differs: %v", err)
		}
	})
}

func checkParseError(t *testing.T, data []byte, err error) {
	t.Helper()
	u, ok := err.(interface{ Unwrap() []error })
	if !ok || len(u.Unwrap()) == 0 {
		t.Fatalf("error %T does not unwrap to a list", err)
	}
	for _, e := range u.Unwrap() {
		var pe *serviceconfig.Error
		if !errors.As(e, &pe) {
			t.Fatalf("error element %T is not *Error", e)
		}
		if msg := e.Error(); !strings.HasPrefix(msg, "serviceconfig: ") || strings.ContainsAny(msg, "\n\r") {
			t.Fatalf("error element %q is not one line starting with serviceconfig:", msg)
		}
		checkPlace(t, data, pe.Line, pe.Column, pe.Error())
	}
	var perr *serviceconfig.ParseError
	if !errors.As(err, &perr) {
		t.Fatalf("error %T is not a *ParseError", err)
	}
	for _, w := range perr.Warnings {
		checkPlace(t, data, w.Line, w.Column, w.String())
	}
	if !json.Valid(withoutBOM(data)) {
		if n := len(u.Unwrap()); n != 1 || !strings.HasPrefix(err.Error(), "serviceconfig: invalid JSON") {
			t.Fatalf("invalid JSON gave %d errors: %v", n, err)
		}
	}
}

// withoutBOM returns data without the UTF-8 byte order mark that Parse
// reads past.
func withoutBOM(data []byte) []byte {
	rest, _ := bytes.CutPrefix(data, []byte("\ufeff"))
	return rest
}

// checkIncludeLint checks that IncludeLint changes nothing but the
// warnings, to which it only adds: the same config or the same errors.
func checkIncludeLint(t *testing.T, data []byte, c *serviceconfig.Config, err error) {
	t.Helper()
	lc, lerr := serviceconfig.Parse(data, serviceconfig.IncludeLint())
	var pe, lpe *serviceconfig.ParseError
	switch {
	case (lerr == nil) != (err == nil):
		t.Fatalf("IncludeLint changed the verdict: %v, then %v", err, lerr)
	case err != nil:
		if lerr.Error() != err.Error() {
			t.Fatalf("IncludeLint changed the errors:\n%v\nthen\n%v", err, lerr)
		}
		if errors.As(err, &pe) && errors.As(lerr, &lpe) && len(lpe.Warnings) < len(pe.Warnings) {
			t.Fatalf("IncludeLint dropped warnings: %v, then %v", pe.Warnings, lpe.Warnings)
		}
	default:
		if !reflect.DeepEqual(c.MethodConfigs, lc.MethodConfigs) || len(lc.Warnings) < len(c.Warnings) {
			t.Fatalf("IncludeLint changed the config or dropped warnings")
		}
	}
}

// checkPlace checks that a problem's line and column are in data, or both
// 0 for the summary that ends a long list.
func checkPlace(t *testing.T, data []byte, line, col int, what string) {
	t.Helper()
	if line == 0 && col == 0 && strings.Contains(what, " more ") {
		return
	}
	lines := strings.Split(string(data), "\n")
	if line < 1 || line > len(lines) || col < 1 || col > len(lines[line-1])+1 {
		t.Fatalf("%q at line %d, column %d: not in the input of %d lines", what, line, col, len(lines))
	}
}

// checkInvariants checks what Parse promises about a config it accepts.
func checkInvariants(t *testing.T, data []byte, c *serviceconfig.Config) {
	t.Helper()
	valid := serviceconfig.CodeSet(1<<17 - 1)
	for i := range c.MethodConfigs {
		mc := &c.MethodConfigs[i]
		if mc.RetryPolicy != nil && mc.HedgingPolicy != nil {
			t.Fatalf("methodConfig[%d] has both policies", i)
		}
		if rp := mc.RetryPolicy; rp != nil {
			if rp.MaxAttempts < 2 || rp.InitialBackoff <= 0 || rp.MaxBackoff <= 0 ||
				!(rp.BackoffMultiplier > 0) || math.IsInf(rp.BackoffMultiplier, 0) ||
				(rp.RetryableStatusCodes == 0 && rp.PerAttemptRecvTimeout == 0) || rp.RetryableStatusCodes&^valid != 0 ||
				rp.PerAttemptRecvTimeout < 0 {
				t.Fatalf("methodConfig[%d]: invalid retry policy accepted: %+v", i, *rp)
			}
			if a := rp.Attempts(0); a < 2 || a > serviceconfig.DefaultMaxAttemptsCap {
				t.Fatalf("Attempts(0) = %d", a)
			}
			for retry := 1; retry < 70; retry++ {
				if b := rp.BackoffCeiling(retry); b < 0 || b > rp.MaxBackoff {
					t.Fatalf("BackoffCeiling(%d) = %v outside [0, %v]", retry, b, rp.MaxBackoff)
				}
			}
		}
		if hp := mc.HedgingPolicy; hp != nil {
			if hp.MaxAttempts < 2 || hp.HedgingDelay < 0 || hp.NonFatalStatusCodes&^valid != 0 {
				t.Fatalf("methodConfig[%d]: invalid hedging policy accepted: %+v", i, *hp)
			}
		}
		if mc.Timeout < 0 {
			t.Fatalf("negative timeout accepted")
		}
		for _, p := range []*int64{mc.MaxRequestMessageBytes, mc.MaxResponseMessageBytes} {
			if p != nil && *p < 0 {
				t.Fatalf("negative message limit accepted")
			}
		}
		// Every name finds its own entry.
		for _, n := range mc.Names {
			if n.Service == "" && n.Method != "" {
				t.Fatalf("name %v without service accepted", n)
			}
			if strings.Contains(n.Service+n.Method, "/") {
				continue
			}
			method := "/" + n.Service + "/" + n.Method
			if n.Service == "" {
				method = ""
			}
			if got := c.MethodConfig(method); got != mc {
				t.Fatalf("MethodConfig(%q) = %p, want methodConfig[%d] %p", method, got, i, mc)
			}
		}
	}
	if rt := c.RetryThrottling; rt != nil {
		if rt.MaxTokens < 1 || rt.MaxTokens > 1000 || !(rt.TokenRatio >= 0) || math.IsInf(rt.TokenRatio, 0) {
			t.Fatalf("invalid throttling accepted: %+v", *rt)
		}
		if rt.TokenRatio < 1e9 {
			// Truncated to thousandths: a whole number of them.
			if m := rt.TokenRatio * 1000; math.Abs(m-math.Round(m)) > 1e-6 {
				t.Fatalf("TokenRatio %v is not in thousandths", rt.TokenRatio)
			}
		}
	}
	for _, w := range append(c.Warnings, serviceconfig.Lint(c)...) {
		if strings.ContainsAny(w.String(), "\n\r") {
			t.Fatalf("warning %q: want one line", w.String())
		}
		checkPlace(t, data, w.Line, w.Column, w.String())
	}
}

var durationRE = regexp.MustCompile(`^(-?)(0|[1-9][0-9]*)(?:\.([0-9]{1,9}))?s$`)

// FuzzParseDuration checks ParseDuration against an independent reading of
// the grammar with math/big, and that FormatDuration round-trips.
func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{
		"0s", "0.1s", "1.000000001s", "-1.5s", "315576000000s", "9223372036.854775807s", "-9223372036.854775808s",
		"1", "s", "1.s", ".1s", "01s", "+1s", "1e3s", "1.0000000001s", "1 s", " 1s", "0x1s", "NaNs", "Infs", "-0s",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := serviceconfig.ParseDuration(s)

		want, wantOK := new(big.Int), false
		if m := durationRE.FindStringSubmatch(s); m != nil {
			frac := (m[3] + "000000000")[:9]
			want.SetString(m[2]+frac, 10)
			if m[1] == "-" {
				want.Neg(want)
			}
			wantOK = want.IsInt64()
		}
		if wantOK != (err == nil) {
			t.Fatalf("ParseDuration(%q) = %v, %v; the grammar says valid=%v", s, d, err, wantOK)
		}
		if err != nil {
			if !strings.HasPrefix(err.Error(), "serviceconfig: invalid duration ") {
				t.Fatalf("error %q lacks the prefix", err)
			}
			return
		}
		if int64(d) != want.Int64() {
			t.Fatalf("ParseDuration(%q) = %d ns, want %d", s, int64(d), want.Int64())
		}
		out := serviceconfig.FormatDuration(d)
		if !durationRE.MatchString(out) {
			t.Fatalf("FormatDuration(%d) = %q, not in the grammar", int64(d), out)
		}
		if back, err := serviceconfig.ParseDuration(out); err != nil || back != d {
			t.Fatalf("ParseDuration(FormatDuration(%d) = %q) = %v, %v", int64(d), out, back, err)
		}
	})
}

func FuzzFormatDuration(f *testing.F) {
	for _, d := range []int64{0, 1, -1, 1e9, 1500e6, math.MaxInt64, math.MinInt64} {
		f.Add(d)
	}
	f.Fuzz(func(t *testing.T, n int64) {
		d := time.Duration(n)
		s := serviceconfig.FormatDuration(d)
		back, err := serviceconfig.ParseDuration(s)
		if err != nil || back != d {
			t.Fatalf("ParseDuration(FormatDuration(%d) = %q) = %v, %v", n, s, back, err)
		}
	})
}

func FuzzParseCode(f *testing.F) {
	for _, s := range []string{"UNAVAILABLE", "unavailable", "Unavailable", "FOO", "14", "", "UN\u212ANOWN", "ok"} {
		f.Add(s)
	}
	names := make(map[string]serviceconfig.Code)
	for c := serviceconfig.OK; c <= serviceconfig.Unauthenticated; c++ {
		names[c.String()] = c
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := serviceconfig.ParseCode(s)
		want, ok := names[asciiUpper(s)]
		if ok != (err == nil) || (ok && c != want) {
			t.Fatalf("ParseCode(%q) = %v, %v; want %v, ok=%v", s, c, err, want, ok)
		}
		if err == nil {
			if back, err := serviceconfig.ParseCode(c.String()); err != nil || back != c {
				t.Fatalf("ParseCode(%q) = %v, %v", c.String(), back, err)
			}
		}
	})
}

func asciiUpper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - ('a' - 'A')
		}
	}
	return string(b)
}

// fuzzFields are the places FuzzParseField can put a value: a field of a
// retry policy, a hedging policy, a method config, a name or the throttling
// settings, each inside an otherwise valid config.
var fuzzFields = []func(raw string) string{
	func(raw string) string { return retryConfig(validRetry.with("maxAttempts", raw)) },
	func(raw string) string { return retryConfig(validRetry.with("initialBackoff", raw)) },
	func(raw string) string { return retryConfig(validRetry.with("maxBackoff", raw)) },
	func(raw string) string { return retryConfig(validRetry.with("backoffMultiplier", raw)) },
	func(raw string) string { return retryConfig(validRetry.with("retryableStatusCodes", raw)) },
	func(raw string) string { return retryConfig(validRetry.with("perAttemptRecvTimeout", raw)) },
	func(raw string) string {
		return retryConfig(validRetry.with("perAttemptRecvTimeout", `"1s"`, "retryableStatusCodes", raw))
	},
	func(raw string) string { return hedgeConfig(validHedge.with("maxAttempts", raw)) },
	func(raw string) string { return hedgeConfig(validHedge.with("hedgingDelay", raw)) },
	func(raw string) string { return hedgeConfig(validHedge.with("nonFatalStatusCodes", raw)) },
	func(raw string) string { return methodConfigs(validMethod.with("name", raw)) },
	func(raw string) string { return methodConfigs(validMethod.with("timeout", raw)) },
	func(raw string) string { return methodConfigs(validMethod.with("waitForReady", raw)) },
	func(raw string) string { return methodConfigs(validMethod.with("maxRequestMessageBytes", raw)) },
	func(raw string) string { return methodConfigs(validMethod.with("retryPolicy", raw)) },
	func(raw string) string { return methodConfigs(validMethod, obj{{"name", raw}}) },
	func(raw string) string {
		return `{"retryThrottling":` + validThrottle.with("maxTokens", raw).String() + `}`
	},
	func(raw string) string {
		return `{"retryThrottling":` + validThrottle.with("tokenRatio", raw).String() + `}`
	},
	func(raw string) string { return `{"loadBalancingPolicy":` + raw + `}` },
}

// FuzzParseField fuzzes one value at a time inside a valid config, which
// reaches the checks of each field far more often than FuzzParse's raw bytes.
func FuzzParseField(f *testing.F) {
	for i := range fuzzFields {
		for _, raw := range []string{"2", `"0.1s"`, "1e-400", `[14, "ok"]`, `[{"service":"a.B","method":"M"}]`, "null", `"1024"`, "0.5466"} {
			f.Add(uint8(i), raw)
		}
	}
	f.Fuzz(func(t *testing.T, field uint8, raw string) {
		data := []byte(fuzzFields[int(field)%len(fuzzFields)](raw))
		c, err := serviceconfig.Parse(data)
		if (c == nil) == (err == nil) {
			t.Fatalf("Parse = %v, %v: want exactly one nil", c, err)
		}
		if err != nil {
			checkParseError(t, data, err)
			return
		}
		if !json.Valid(data) {
			t.Fatalf("Parse accepted invalid JSON")
		}
		checkInvariants(t, data, c)
	})
}
