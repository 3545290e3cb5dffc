package a6

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/serviceconfig"
)

func TestParsePushback(t *testing.T) {
	for _, tc := range []struct {
		in            []string
		d             time.Duration
		stop, present bool
	}{
		{nil, 0, false, false},
		{[]string{"0"}, 0, false, true},
		{[]string{"1"}, time.Millisecond, false, true},
		{[]string{"250"}, 250 * time.Millisecond, false, true},
		{[]string{"2147483647"}, 2147483647 * time.Millisecond, false, true},
		{[]string{"2147483648"}, 0, true, true}, // beyond int32
		{[]string{"-1"}, 0, true, true},
		{[]string{"-2147483648"}, 0, true, true},
		{[]string{"-0"}, 0, true, true},
		{[]string{"00"}, 0, true, true},
		{[]string{"012"}, 0, true, true},
		{[]string{"+5"}, 0, true, true},
		{[]string{""}, 0, true, true},
		{[]string{"-"}, 0, true, true},
		{[]string{" 5"}, 0, true, true},
		{[]string{"5ms"}, 0, true, true},
		{[]string{"1e3"}, 0, true, true},
		{[]string{"99999999999999999999"}, 0, true, true},
		{[]string{"10", "10"}, 0, true, true}, // repeated
	} {
		d, stop, present := ParsePushback(tc.in)
		if d != tc.d || stop != tc.stop || present != tc.present {
			t.Errorf("ParsePushback(%q) = %v, %v, %v; want %v, %v, %v", tc.in, d, stop, present, tc.d, tc.stop, tc.present)
		}
	}
}

func FuzzParsePushback(f *testing.F) {
	for _, s := range []string{"0", "1", "-1", "2147483647", "2147483648", "-0", "007", "abc", "", "1 ", "٣"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, stop, present := ParsePushback([]string{s})
		if !present {
			t.Fatal("one value reported absent")
		}
		if stop && d != 0 || d < 0 || d > (1<<31-1)*time.Millisecond {
			t.Fatalf("ParsePushback(%q) = %v, %v", s, d, stop)
		}
		if !stop {
			// A value the parser accepts is exactly its canonical decimal form.
			if got := formatMillis(d); got != s {
				t.Fatalf("accepted %q, canonical form %q", s, got)
			}
		}
	})
}

func formatMillis(d time.Duration) string {
	ms := int64(d / time.Millisecond)
	if ms == 0 {
		return "0"
	}
	var b []byte
	for ; ms > 0; ms /= 10 {
		b = append([]byte{byte('0' + ms%10)}, b...)
	}
	return string(b)
}

func TestInfo(t *testing.T) {
	for _, tc := range []struct {
		retryable bool
		pushback  []string
		committed bool
		want      rebound.RetryInfo
	}{
		{false, nil, false, rebound.RetryInfo{}},
		{true, nil, false, rebound.RetryInfo{Safety: rebound.SafetyYes}},
		{true, []string{"30"}, false, rebound.RetryInfo{Safety: rebound.SafetyYes, HasRetryAfter: true, RetryAfter: 30 * time.Millisecond}},
		{false, []string{"x"}, false, rebound.RetryInfo{ServerStop: true}},
		{true, nil, true, rebound.RetryInfo{Safety: rebound.SafetyYes, Committed: true}},
	} {
		if got := Info(tc.retryable, tc.pushback, tc.committed); got != tc.want {
			t.Errorf("Info(%v, %q, %v) = %+v, want %+v", tc.retryable, tc.pushback, tc.committed, got, tc.want)
		}
	}
}

func TestThrottleSharedPerServerName(t *testing.T) {
	cfg := &serviceconfig.RetryThrottling{MaxTokens: 10, TokenRatio: 0.546}
	// Throttles live for the process: fresh names keep -count=N runs apart.
	name := fmt.Sprint("a6-test-", time.Now().UnixNano())
	a, err := Throttle(name+":1", cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Throttle(name+":1", cfg)
	c, _ := Throttle(name+":2", cfg)
	if a != b || a == c {
		t.Fatal("throttles are not shared per server name")
	}
	a.RecordFailure()
	a.RecordSuccess()
	if a.Tokens() != 9546 {
		t.Fatalf("tokens = %d, want 9546", a.Tokens())
	}
	if th, err := Throttle("x", nil); th != nil || err != nil {
		t.Fatal("nil config should mean no throttle")
	}
	if _, err := Throttle("x", &serviceconfig.RetryThrottling{MaxTokens: 0, TokenRatio: 0.001}); err == nil {
		t.Fatal("invalid config accepted")
	}
}

// FuzzParsedConfigsBuild checks that no config serviceconfig.Parse accepts
// can fail a call: its throttle and every method's strategy are made.
func FuzzParsedConfigsBuild(f *testing.F) {
	for _, s := range []string{
		`{"retryThrottling":{"maxTokens":10,"tokenRatio":0.0001}}`,
		`{"retryThrottling":{"maxTokens":10,"tokenRatio":1e13}}`,
		`{"retryThrottling":{"maxTokens":1000,"tokenRatio":1e308}}`,
		`{"methodConfig":[{"name":[{}],"retryPolicy":{"maxAttempts":3,"initialBackoff":"2s","maxBackoff":"0.05s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`,
		`{"methodConfig":[{"name":[{}],"retryPolicy":{"maxAttempts":99999999999999999999,"initialBackoff":"315576000000s","maxBackoff":"0.000000001s","backoffMultiplier":1e308,"retryableStatusCodes":[14]}}]}`,
		`{"methodConfig":[{"name":[{}],"hedgingPolicy":{"maxAttempts":5,"hedgingDelay":"0s"}}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := serviceconfig.Parse(data)
		if err != nil {
			return
		}
		th, err := Throttle("fuzz", cfg.RetryThrottling)
		if err != nil {
			t.Fatalf("parsed retryThrottling makes no throttle: %v", err)
		}
		for i := range cfg.MethodConfigs {
			if _, _, err := Strategies(&cfg.MethodConfigs[i], th, Settings{}); err != nil {
				t.Fatalf("methodConfig[%d] makes no strategy: %v", i, err)
			}
		}
	})
}

// A throttle lives while a client holds it; then its entry goes.
func TestThrottleReleased(t *testing.T) {
	cfg := &serviceconfig.RetryThrottling{MaxTokens: 10, TokenRatio: 0.1}
	name := fmt.Sprint("a6-release-", time.Now().UnixNano())
	before := throttles.Len()
	held, err := Throttle(name, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		if _, err := Throttle(fmt.Sprint(name, "-", i), cfg); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for throttles.Len() > before+1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d throttles of dropped names remain", throttles.Len()-before-1)
		}
		runtime.GC()
		runtime.Gosched()
	}
	held.RecordFailure()
	if again, _ := Throttle(name, cfg); again != held || again.Tokens() != 9000 {
		t.Fatal("a throttle in use was not kept")
	}
}
