package serviceconfig_test

import (
	"math"
	"testing"
	"time"

	"github.com/rebound-go/rebound/serviceconfig"
)

const lookupConfig = `{"methodConfig":[
  {"name":[{"service":"a.B","method":"M"}], "timeout":"1s"},
  {"name":[{"service":"a.B"}], "timeout":"2s"},
  {"name":[{}], "timeout":"3s"},
  {"name":[{"service":"c.D","method":"N"},{"service":"c.D","method":"O"}], "timeout":"4s"},
  {"name":[{"service":"e.F"}], "timeout":"5s"}
]}`

// lookupCases give the timeout that marks the expected entry, 0 for none;
// withDefault applies to lookupConfig, withoutDefault to it minus the
// default entry.
var lookupCases = []struct {
	method                      string
	withDefault, withoutDefault time.Duration
}{
	{"/a.B/M", 1 * time.Second, 1 * time.Second},     // exact match wins over the service
	{"a.B/M", 1 * time.Second, 1 * time.Second},      // the leading slash is optional
	{"/a.B/Other", 2 * time.Second, 2 * time.Second}, // service-wide
	{"/a.B/", 2 * time.Second, 2 * time.Second},
	{"/c.D/N", 4 * time.Second, 4 * time.Second},
	{"/c.D/O", 4 * time.Second, 4 * time.Second},
	{"/c.D/P", 3 * time.Second, 0}, // no service-wide entry for c.D
	{"/e.F/M", 5 * time.Second, 5 * time.Second},
	{"/x.Y/M", 3 * time.Second, 0},
	{"/A.B/M", 3 * time.Second, 0}, // names are case sensitive
	{"/a.B/m", 2 * time.Second, 2 * time.Second},
	{"", 3 * time.Second, 0},
	{"/", 3 * time.Second, 0},
	{"//", 3 * time.Second, 0},
	{"//M", 3 * time.Second, 0}, // a method needs a service
	{"a.B", 3 * time.Second, 0}, // no '/': not a method name
	{"/a.B", 3 * time.Second, 0},
	{"/a.B/M/x", 3 * time.Second, 0}, // the service would be "a.B/M"
	{"//a.B/M", 3 * time.Second, 0},
}

func TestMethodConfig(t *testing.T) {
	parsed, errs := parse(t, lookupConfig)
	if errs != nil {
		t.Fatal(errs)
	}
	// The same lookups must hold for a parsed Config, which has an index,
	// and for one built by hand, which is searched in order.
	withDefault := map[string]*serviceconfig.Config{
		"parsed": parsed,
		"built":  &serviceconfig.Config{MethodConfigs: parsed.MethodConfigs},
	}
	noDefault := append([]serviceconfig.MethodConfig(nil), parsed.MethodConfigs[:2]...)
	noDefault = append(noDefault, parsed.MethodConfigs[3:]...)
	parsedNoDefault, errs := parse(t, `{"methodConfig":[
	  {"name":[{"service":"a.B","method":"M"}], "timeout":"1s"},
	  {"name":[{"service":"a.B"}], "timeout":"2s"},
	  {"name":[{"service":"c.D","method":"N"},{"service":"c.D","method":"O"}], "timeout":"4s"},
	  {"name":[{"service":"e.F"}], "timeout":"5s"}]}`)
	if errs != nil {
		t.Fatal(errs)
	}
	withoutDefault := map[string]*serviceconfig.Config{
		"parsed": parsedNoDefault,
		"built":  &serviceconfig.Config{MethodConfigs: noDefault},
	}
	for _, tc := range lookupCases {
		for kind, c := range withDefault {
			if got := timeoutOf(c.MethodConfig(tc.method)); got != tc.withDefault {
				t.Errorf("%s: MethodConfig(%q) has timeout %v, want %v", kind, tc.method, got, tc.withDefault)
			}
		}
		for kind, c := range withoutDefault {
			if got := timeoutOf(c.MethodConfig(tc.method)); got != tc.withoutDefault {
				t.Errorf("%s without default: MethodConfig(%q) has timeout %v, want %v", kind, tc.method, got, tc.withoutDefault)
			}
		}
	}

	// The result is the entry itself, not a copy.
	if got := parsed.MethodConfig("/a.B/M"); got != &parsed.MethodConfigs[0] {
		t.Errorf("MethodConfig returned %p, want &MethodConfigs[0] %p", got, &parsed.MethodConfigs[0])
	}

	var nilConfig *serviceconfig.Config
	if got := nilConfig.MethodConfig("/a.B/M"); got != nil {
		t.Errorf("nil Config: MethodConfig = %+v, want nil", got)
	}
	if got := (&serviceconfig.Config{}).MethodConfig("/a.B/M"); got != nil {
		t.Errorf("zero Config: MethodConfig = %+v, want nil", got)
	}
}

// A hand-built Config may repeat a name; the first entry wins.
func TestMethodConfigBuiltFirstWins(t *testing.T) {
	c := &serviceconfig.Config{MethodConfigs: []serviceconfig.MethodConfig{
		{Names: []serviceconfig.Name{{Service: "a.B"}}, Timeout: time.Second},
		{Names: []serviceconfig.Name{{Service: "a.B", Method: "M"}, {Service: "a.B"}}, Timeout: 2 * time.Second},
	}}
	if got := timeoutOf(c.MethodConfig("/a.B/X")); got != time.Second {
		t.Errorf("timeout = %v, want 1s", got)
	}
	if got := timeoutOf(c.MethodConfig("/a.B/M")); got != 2*time.Second {
		t.Errorf("timeout = %v, want 2s", got)
	}
}

func timeoutOf(mc *serviceconfig.MethodConfig) time.Duration {
	if mc == nil {
		return 0
	}
	return mc.Timeout
}

func TestMethodConfigAllocs(t *testing.T) {
	c, errs := parse(t, lookupConfig)
	if errs != nil {
		t.Fatal(errs)
	}
	for _, m := range []string{"/a.B/M", "/a.B/Other", "/x.Y/Z", "a.B", ""} {
		if n := testing.AllocsPerRun(100, func() { c.MethodConfig(m) }); n != 0 {
			t.Errorf("MethodConfig(%q) allocates %v times per call", m, n)
		}
	}
}

func BenchmarkMethodConfig(b *testing.B) {
	c, err := serviceconfig.Parse([]byte(lookupConfig))
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct{ name, method string }{
		{"exact", "/a.B/M"},
		{"service", "/a.B/Other"},
		{"default", "/x.Y/Z"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if c.MethodConfig(bc.method) == nil {
					b.Fatal("no config")
				}
			}
		})
	}
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if c.MethodConfig("/a.B/Other") == nil {
					b.Error("no config")
					return
				}
			}
		})
	})
}

func TestAttempts(t *testing.T) {
	tests := []struct {
		maxAttempts, clientMax, want int
	}{
		{2, 0, 2},
		{5, 0, 5},
		{6, 0, 5}, // treated as 5 by default (A6 "Limits on Retries and Hedges")
		{math.MaxInt, 0, 5},
		{6, -1, 5},
		{6, 10, 6},
		{100, 10, 10},
		{4, 3, 3},
		{4, 1, 1},
		{0, 0, 1}, // a hand-built zero policy still makes the first attempt
		{-3, 5, 1},
	}
	for _, tc := range tests {
		rp := &serviceconfig.RetryPolicy{MaxAttempts: tc.maxAttempts}
		if got := rp.Attempts(tc.clientMax); got != tc.want {
			t.Errorf("RetryPolicy{MaxAttempts: %d}.Attempts(%d) = %d, want %d", tc.maxAttempts, tc.clientMax, got, tc.want)
		}
		hp := &serviceconfig.HedgingPolicy{MaxAttempts: tc.maxAttempts}
		if got := hp.Attempts(tc.clientMax); got != tc.want {
			t.Errorf("HedgingPolicy{MaxAttempts: %d}.Attempts(%d) = %d, want %d", tc.maxAttempts, tc.clientMax, got, tc.want)
		}
	}
	if got := (*serviceconfig.RetryPolicy)(nil).Attempts(5); got != 1 {
		t.Errorf("nil RetryPolicy: Attempts = %d, want 1", got)
	}
	if got := (*serviceconfig.HedgingPolicy)(nil).Attempts(5); got != 1 {
		t.Errorf("nil HedgingPolicy: Attempts = %d, want 1", got)
	}

	// The parsed value is kept; only Attempts clamps it.
	c, errs := parse(t, retryConfig(validRetry.with("maxAttempts", "8")))
	if errs != nil {
		t.Fatal(errs)
	}
	rp := c.MethodConfigs[0].RetryPolicy
	if rp.MaxAttempts != 8 || rp.Attempts(0) != 5 || rp.Attempts(10) != 8 {
		t.Errorf("maxAttempts 8: MaxAttempts=%d Attempts(0)=%d Attempts(10)=%d; want 8, 5, 8",
			rp.MaxAttempts, rp.Attempts(0), rp.Attempts(10))
	}
}

func TestBackoffCeiling(t *testing.T) {
	a6 := &serviceconfig.RetryPolicy{InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second, BackoffMultiplier: 2}
	ms := time.Millisecond
	tests := []struct {
		name  string
		p     *serviceconfig.RetryPolicy
		retry int
		want  time.Duration
	}{
		{"before the first retry", a6, 0, 0},
		{"negative", a6, -1, 0},
		{"first retry", a6, 1, 100 * ms},
		{"second", a6, 2, 200 * ms},
		{"third", a6, 3, 400 * ms},
		{"fourth", a6, 4, 800 * ms},
		{"capped", a6, 5, time.Second},
		{"far out", a6, 1000, time.Second},
		{"multiplier overflows to +Inf", a6, math.MaxInt, time.Second},
		{"multiplier 1", &serviceconfig.RetryPolicy{InitialBackoff: 300 * ms, MaxBackoff: time.Second, BackoffMultiplier: 1}, 50, 300 * ms},
		{"shrinking", &serviceconfig.RetryPolicy{InitialBackoff: 400 * ms, MaxBackoff: time.Second, BackoffMultiplier: 0.5}, 3, 100 * ms},
		{"shrinking to nothing", &serviceconfig.RetryPolicy{InitialBackoff: 400 * ms, MaxBackoff: time.Second, BackoffMultiplier: 0.5}, 1e6, 0},
		{"max below initial", &serviceconfig.RetryPolicy{InitialBackoff: 2 * time.Second, MaxBackoff: time.Second, BackoffMultiplier: 2}, 1, time.Second},
		{"beyond time.Duration", &serviceconfig.RetryPolicy{InitialBackoff: time.Hour, MaxBackoff: math.MaxInt64, BackoffMultiplier: 10}, 30, math.MaxInt64},
		{"just below the limit", &serviceconfig.RetryPolicy{InitialBackoff: 1 << 61, MaxBackoff: math.MaxInt64, BackoffMultiplier: 2}, 2, 1 << 62},
		{"NaN multiplier", &serviceconfig.RetryPolicy{InitialBackoff: ms, MaxBackoff: time.Second, BackoffMultiplier: math.NaN()}, 2, time.Second},
		{"+Inf multiplier", &serviceconfig.RetryPolicy{InitialBackoff: ms, MaxBackoff: time.Second, BackoffMultiplier: math.Inf(1)}, 2, time.Second},
		{"negative initial", &serviceconfig.RetryPolicy{InitialBackoff: -ms, MaxBackoff: time.Second, BackoffMultiplier: 2}, 2, 0},
		{"negative max", &serviceconfig.RetryPolicy{InitialBackoff: ms, MaxBackoff: -time.Second, BackoffMultiplier: 2}, 2, 0},
		{"zero policy", &serviceconfig.RetryPolicy{}, 1, 0},
		{"nil", nil, 1, 0},
	}
	for _, tc := range tests {
		if got := tc.p.BackoffCeiling(tc.retry); got != tc.want {
			t.Errorf("%s: BackoffCeiling(%d) = %v, want %v", tc.name, tc.retry, got, tc.want)
		}
	}
}

func TestThreshold(t *testing.T) {
	for _, tc := range []struct {
		maxTokens int
		want      float64
	}{{10, 5}, {1, 0.5}, {1000, 500}, {7, 3.5}} {
		if got := (&serviceconfig.RetryThrottling{MaxTokens: tc.maxTokens}).Threshold(); got != tc.want {
			t.Errorf("MaxTokens %d: Threshold = %v, want %v", tc.maxTokens, got, tc.want)
		}
	}
	if got := (*serviceconfig.RetryThrottling)(nil).Threshold(); got != 0 {
		t.Errorf("nil: Threshold = %v, want 0", got)
	}
}
