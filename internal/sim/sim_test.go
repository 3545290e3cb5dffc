package sim

import (
	"context"
	"errors"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"
)

// The tests that simulate whole scenarios run in parallel: each takes
// seconds of CPU under -race, and in go test ./... this package is often
// the last to finish, with a CPU to spare.

// small is a scenario that runs in a few milliseconds.
func small() Config {
	c := DefaultConfig
	c.Clients = 10
	c.Rate = 10
	c.Duration = 30 * time.Second
	c.Capacity = 150
	c.OutageStart = 10 * time.Second
	c.OutageLength = 10 * time.Second
	return c
}

func run(t testing.TB, c Config) *Report {
	t.Helper()
	r, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Results) != len(Policies) {
		t.Fatalf("%d results, want %d", len(r.Results), len(Policies))
	}
	for i, res := range r.Results {
		if res.Policy != Policies[i] {
			t.Fatalf("result %d is %v, want %v", i, res.Policy, Policies[i])
		}
	}
	return r
}

// runPolicies simulates c for the policies ps alone, in that order, for a
// test that looks at no others.
func runPolicies(t *testing.T, c Config, ps ...Policy) []Result {
	t.Helper()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	arr := arrivals(c)
	var out []Result
	for _, p := range ps {
		e, err := newEngine(c, p, arr, interval(c.Duration), MaxEvents)
		if err != nil {
			t.Fatal(err)
		}
		res, err := e.run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if res.Policy != p {
			t.Fatalf("simulated %v, want %v", res.Policy, p)
		}
		out = append(out, res)
	}
	return out
}

// resultOf returns the result of policy p in r, and whether r simulated
// it.
func resultOf(r *Report, p Policy) (Result, bool) {
	for _, res := range r.Results {
		if res.Policy == p {
			return res, true
		}
	}
	return Result{}, false
}

// checkInvariants checks what holds for every policy r simulated, with no
// retries among them, in every scenario.
func checkInvariants(t *testing.T, r *Report) {
	t.Helper()
	c := r.Config
	noRetries, ok := resultOf(r, NoRetries)
	if !ok {
		t.Fatal("no retries not simulated: the invariants compare the others with it")
	}
	for _, res := range r.Results {
		if res.Requests != r.Results[0].Requests || res.OutageRequests != r.Results[0].OutageRequests {
			t.Errorf("%v: %d requests (%d in the outage), but %v had %d (%d): arrivals differ",
				res.Policy, res.Requests, res.OutageRequests, r.Results[0].Policy, r.Results[0].Requests, r.Results[0].OutageRequests)
		}
		if ended := res.Succeeded + res.Exhausted + res.Throttled + res.PastDeadline + res.PushedBack; ended != res.Requests {
			t.Errorf("%v: %d requests ended, %d arrived", res.Policy, ended, res.Requests)
		}
		// An attempt the adaptive throttle keeps home ends its request
		// without being sent.
		if res.Attempts+res.RejectedLocally < res.Requests || res.Attempts > c.MaxAttempts*res.Requests || res.RejectedLocally > res.Throttled {
			t.Errorf("%v: %d attempts for %d requests", res.Policy, res.Attempts, res.Requests)
		}
		if res.OutageRequests > 0 && res.OutageAttempts > c.MaxAttempts*res.Requests {
			t.Errorf("%v: %d attempts in the outage", res.Policy, res.OutageAttempts)
		}
		if want := int((c.Duration + r.Interval - 1) / r.Interval); len(res.Offered) != want {
			t.Errorf("%v: %d offered-load points, want %d", res.Policy, len(res.Offered), want)
		}
		sent := 0.0
		for i, v := range res.Offered {
			sent += v * min(r.Interval, c.Duration-time.Duration(i)*r.Interval).Seconds()
		}
		if n := int(math.Round(sent)); n > res.Attempts || n < (res.Requests-res.RejectedLocally)*9/10 {
			t.Errorf("%v: offered load sums to %d attempts; %d sent in all", res.Policy, n, res.Attempts)
		}
		if res.Succeeded > 0 && (res.P50 < c.Latency || res.P99 < res.P50) {
			t.Errorf("%v: p50 %v, p99 %v", res.Policy, res.P50, res.P99)
		}
		if res.SuccessRate < 0 || res.SuccessRate > 1 {
			t.Errorf("%v: success rate %v", res.Policy, res.SuccessRate)
		}
	}
	if want := int((c.Duration + r.Interval - 1) / r.Interval); len(r.Arrivals) != want {
		t.Errorf("%d arrival points, want %d", len(r.Arrivals), want)
	}
	arrived := 0.0
	for i, v := range r.Arrivals {
		arrived += v * min(r.Interval, c.Duration-time.Duration(i)*r.Interval).Seconds()
		// Without retries every request makes one attempt, when it
		// arrives: its offered load is the arrival rate.
		if off := noRetries.Offered[i]; math.Abs(off-v) > 1e-9*v {
			t.Errorf("interval %d: %v arrivals/s, but no retries offered %v attempts/s", i, v, off)
		}
	}
	if n := int(math.Round(arrived)); len(r.Results) > 0 && n != r.Results[0].Requests {
		t.Errorf("arrivals sum to %d requests, %d arrived", n, r.Results[0].Requests)
	}
	if (noRetries.Requests > 0 && noRetries.Amplification != 1) || (noRetries.OutageRequests > 0 && noRetries.OutageAmplification != 1) {
		t.Errorf("no retries: amplification %v (%v in the outage), want exactly 1", noRetries.Amplification, noRetries.OutageAmplification)
	}
	// Without retries, a request ends at its deadline only when a queue
	// or a hang holds its attempt past it.
	if noRetries.Throttled != 0 || noRetries.PastDeadline != 0 && !c.Shape.queues() {
		t.Errorf("no retries: %+v", noRetries)
	}
	for _, res := range r.Results {
		if res.Recovery < 0 || res.Recovery > c.Duration || !res.Recovered && res.Recovery != 0 {
			t.Errorf("%v: recovery %v (%v)", res.Policy, res.Recovery, res.Recovered)
		}
		if !res.Policy.sheds() {
			if res.Shed != 0 || res.Limit != nil {
				t.Errorf("%v: %d shed, limit %v, without a shedder", res.Policy, res.Shed, res.Limit)
			}
			continue
		}
		if len(res.Limit) != len(res.Offered) {
			t.Errorf("%v: %d limits, %d intervals", res.Policy, len(res.Limit), len(res.Offered))
		}
		for _, l := range res.Limit {
			if l < 1 || l > 1000 {
				t.Errorf("%v: limit %v", res.Policy, l)
				break
			}
		}
		if res.Shed+res.Refused < res.PushedBack {
			t.Errorf("%v: %d told to stop, %d shed and %d refused", res.Policy, res.PushedBack, res.Shed, res.Refused)
		}
	}
	if n, ok := resultOf(r, Naive); ok && n.Throttled != 0 {
		t.Errorf("naive retries were refused by a budget %d times", n.Throttled)
	}
}

// TestDefaultScenario checks that the model reproduces the claim it is
// built for: per-request limits alone multiply the load of an outage, a
// per-client budget keeps it near 1.1×.
//
// With -short it runs at a fifth of the size, 10 clients at 20 req/s
// against 250 req/s: each client's budget sees what it sees at full size,
// and the server refuses the same share in the outage (over seeds 1-8 at
// a fifth: naive 4.43-4.46x, the A6 throttle 1.00-1.01x, the token bucket
// 1.16-1.17x). Only the healthy server's loss grows, see checkDefault.
func TestDefaultScenario(t *testing.T) {
	t.Parallel()
	c := DefaultConfig
	if testing.Short() {
		c = fifthOfDefault()
	}
	checkDefault(t, run(t, c))
}

// fifthOfDefault is DefaultConfig at a fifth of the size: a fifth of the
// clients, each at the same rate, against a fifth of the capacity.
func fifthOfDefault() Config {
	c := DefaultConfig
	c.Clients /= 5
	c.Capacity /= 5
	return c
}

// checkDefault judges a report of DefaultConfig, or of it at another
// size.
func checkDefault(t *testing.T, r *Report) {
	t.Helper()
	checkInvariants(t, r)
	c := r.Config
	none, naive, throttle, bucket := r.Results[NoRetries], r.Results[Naive], r.Results[Throttled], r.Results[Bucket]
	for _, tc := range []struct {
		res       Result
		min, max  float64 // during the outage
		overallUp float64 // overall at most
	}{
		{none, 1, 1, 1},
		{naive, 2.5, float64(c.MaxAttempts), float64(c.MaxAttempts)},
		{throttle, 1, 1.3, 1.3},
		{bucket, 1, 1.3, 1.3},
	} {
		if a := tc.res.OutageAmplification; a < tc.min || a > tc.max {
			t.Errorf("%v: amplification during the outage %.3f, want in [%v, %v]", tc.res.Policy, a, tc.min, tc.max)
		}
		if a := tc.res.Amplification; a < 1 || a > tc.overallUp {
			t.Errorf("%v: amplification %.3f, want in [1, %v]", tc.res.Policy, a, tc.overallUp)
		}
	}
	// The budgets order as their sizes: 10 tokens refuse sooner than 500.
	if !(none.OutageAmplification <= throttle.OutageAmplification &&
		throttle.OutageAmplification < bucket.OutageAmplification &&
		bucket.OutageAmplification < naive.OutageAmplification) {
		t.Errorf("outage amplification out of order: none %.3f, throttle %.3f, bucket %.3f, naive %.3f",
			none.OutageAmplification, throttle.OutageAmplification, bucket.OutageAmplification, naive.OutageAmplification)
	}
	if throttle.Throttled == 0 || bucket.Throttled == 0 {
		t.Errorf("the budgets never refused: throttle %d, bucket %d", throttle.Throttled, bucket.Throttled)
	}
	// The 10s deadline cuts naive retries short of 5 attempts.
	if naive.PastDeadline == 0 {
		t.Error("no naive request stopped at its deadline")
	}
	// A total outage leaves the server nothing to serve: every request
	// arriving in it fails without retries, and the healthy server
	// serves the rest, but for the share that finds every worker busy
	// (Erlang's loss formula: 0.2% at full size, 5% at a fifth, whose 25
	// workers meet the same bursts of arrivals with a fifth of the room).
	healthy := float64(none.Requests - none.OutageRequests)
	loss := erlangB(c.Rate*float64(c.Clients)*c.Latency.Seconds(), c.Workers())
	if n := float64(none.Succeeded); n < 0.99*(1-loss)*healthy || n > healthy {
		t.Errorf("no retries: %d succeeded, want about %.0f (%.0f arrived outside the outage, %.1f%% lost to a full server)", none.Succeeded, (1-loss)*healthy, healthy, 100*loss)
	}
	for _, res := range r.Results {
		if res.Policy == Adaptive {
			// It keeps rejecting after the outage until the accepts
			// outweigh the outage's requests in its window: see
			// TestFleet.
			continue
		}
		if res.RecoveryGoodput < 0.9*c.Rate*float64(c.Clients) {
			t.Errorf("%v: goodput after the outage %.1f/s, want near the offered %v/s", res.Policy, res.RecoveryGoodput, c.Rate*float64(c.Clients))
		}
	}
}

// erlangB is the share of the requests arriving at load erlangs (rate ×
// time held) that find all of m servers busy, with no queue.
func erlangB(load float64, m int) float64 {
	b := 1.0
	for k := 1; k <= m; k++ {
		b = load * b / (float64(k) + load*b)
	}
	return b
}

func TestDeterministic(t *testing.T) {
	t.Parallel()
	c := small()
	a, b := run(t, c), run(t, c)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same config gave different reports")
	}
	c.Seed++
	if d := run(t, c); reflect.DeepEqual(a.Results, d.Results) {
		t.Fatal("a different seed gave the same results")
	}
}

func TestScenarios(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		edit  func(*Config)
		check func(*testing.T, *Report)
	}{
		{"no outage", func(c *Config) { c.OutageLength = 0 }, func(t *testing.T, r *Report) {
			for _, res := range r.Results {
				if res.OutageRequests != 0 || res.OutageAttempts != 0 || res.Amplification > 1.05 || res.SuccessRate < 0.95 {
					t.Errorf("%v: %+v", res.Policy, res)
				}
			}
		}},
		{"partial outage", func(c *Config) { c.OutageCapacity = 0.3 }, func(t *testing.T, r *Report) {
			// The degraded server serves what it can whatever the
			// policy; retries add load, not goodput beyond capacity.
			for _, res := range r.Results {
				if res.Succeeded == 0 || res.SuccessRate > 0.95 {
					t.Errorf("%v: success rate %.3f", res.Policy, res.SuccessRate)
				}
			}
			if r.Results[Naive].OutageAmplification < 2 {
				t.Errorf("naive: amplification in the outage %.3f", r.Results[Naive].OutageAmplification)
			}
		}},
		{"short deadline", func(c *Config) { c.Deadline = 500 * time.Millisecond }, func(t *testing.T, r *Report) {
			if n := r.Results[Naive]; n.PastDeadline == 0 || n.Exhausted != 0 {
				t.Errorf("naive: %d past the deadline, %d exhausted; want all at the deadline", n.PastDeadline, n.Exhausted)
			}
		}},
		{"no deadline", func(c *Config) { c.Deadline = 0 }, func(t *testing.T, r *Report) {
			for _, res := range r.Results {
				if res.PastDeadline != 0 {
					t.Errorf("%v: %d past a deadline", res.Policy, res.PastDeadline)
				}
			}
		}},
		{"one attempt", func(c *Config) { c.MaxAttempts = 1 }, func(t *testing.T, r *Report) {
			for _, res := range r.Results {
				if res.Attempts+res.RejectedLocally != res.Requests {
					t.Errorf("%v: %d attempts for %d requests", res.Policy, res.Attempts, res.Requests)
				}
			}
		}},
		{"outage to the end", func(c *Config) { c.OutageLength = c.Duration - c.OutageStart }, func(t *testing.T, r *Report) {
			for _, res := range r.Results {
				if res.RecoveryGoodput != 0 {
					t.Errorf("%v: recovery goodput %v with no time after the outage", res.Policy, res.RecoveryGoodput)
				}
			}
		}},
		{"one client one worker", func(c *Config) {
			c.Clients, c.Rate, c.Capacity, c.Latency = 1, 0.5, 1, time.Second
		}, func(*testing.T, *Report) {}},
		{"proportional jitter", func(c *Config) { c.Backoff.Proportional = 0.2 }, func(*testing.T, *Report) {}},
		{"almost no requests", func(c *Config) {
			c.Clients, c.Rate, c.Duration, c.OutageStart, c.OutageLength = 1, 1e-9, time.Second, 0, time.Second
		}, func(t *testing.T, r *Report) {
			for _, res := range r.Results {
				if res.Requests != 0 || res.Amplification != 0 || res.Goodput != 0 || res.P99 != 0 {
					t.Errorf("%v: %+v", res.Policy, res)
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := small()
			tc.edit(&c)
			r := run(t, c)
			checkInvariants(t, r)
			tc.check(t, r)
		})
	}
}

func TestValidate(t *testing.T) {
	if err := DefaultConfig.Validate(); err != nil {
		t.Fatalf("DefaultConfig: %v", err)
	}
	for _, tc := range []struct {
		field string
		edit  func(*Config)
	}{
		{"Clients", func(c *Config) { c.Clients = 0 }},
		{"Clients", func(c *Config) { c.Clients = MaxClients + 1 }},
		{"Rate", func(c *Config) { c.Rate = 0 }},
		{"Rate", func(c *Config) { c.Rate = math.NaN() }},
		{"Rate", func(c *Config) { c.Rate = math.Inf(1) }},
		{"Rate", func(c *Config) { c.Rate = 1e6 }}, // too many requests
		{"Duration", func(c *Config) { c.Duration = 0 }},
		{"Duration", func(c *Config) { c.Duration = 25 * time.Hour }},
		{"Capacity", func(c *Config) { c.Capacity = -1 }},
		{"Capacity", func(c *Config) { c.Capacity = 1 }}, // 0.1 workers
		{"Capacity", func(c *Config) { c.Capacity = 1e300 }},
		{"Latency", func(c *Config) { c.Latency = 0 }},
		{"Latency", func(c *Config) { c.Latency = time.Hour }},
		{"OutageStart", func(c *Config) { c.OutageStart = -time.Second }},
		{"OutageLength", func(c *Config) { c.OutageLength = -time.Second }},
		{"OutageLength", func(c *Config) { c.OutageLength = c.Duration }},
		{"OutageLength", func(c *Config) { c.OutageStart = c.Duration + 1 }},
		{"OutageLength", func(c *Config) { c.OutageStart, c.OutageLength = math.MaxInt64-1, math.MaxInt64-1 }},
		{"OutageCapacity", func(c *Config) { c.OutageCapacity = 1.5 }},
		{"OutageCapacity", func(c *Config) { c.OutageCapacity = math.NaN() }},
		{"MaxAttempts", func(c *Config) { c.MaxAttempts = 0 }},
		{"MaxAttempts", func(c *Config) { c.MaxAttempts = MaxAttempts + 1 }},
		{"Backoff.Initial", func(c *Config) { c.Backoff.Initial = 0 }},
		{"Backoff.Max", func(c *Config) { c.Backoff.Max = c.Backoff.Initial - 1 }},
		{"Backoff.Multiplier", func(c *Config) { c.Backoff.Multiplier = math.Inf(1) }},
		{"Backoff.Proportional", func(c *Config) { c.Backoff.Proportional = 2 }},
		{"Deadline", func(c *Config) { c.Deadline = -1 }},
		{"Throttle.MaxTokens", func(c *Config) { c.Throttle.MaxTokens = 1001 }},
		{"Throttle.TokenRatio", func(c *Config) { c.Throttle.TokenRatio = 0.0001 }},
		{"Bucket.Capacity", func(c *Config) { c.Bucket.Capacity = 0 }},
		{"Bucket.RetryCost", func(c *Config) { c.Bucket.RetryCost = 0 }},
		{"Bucket.TimeoutCost", func(c *Config) { c.Bucket.TimeoutCost = 0 }},
		{"Bucket.SuccessRefund", func(c *Config) { c.Bucket.SuccessRefund = -1 }},
		{"Adaptive.K", func(c *Config) { c.Adaptive.K = 0.5 }},
		{"Adaptive.K", func(c *Config) { c.Adaptive.K = math.NaN() }},
		{"Adaptive.Window", func(c *Config) { c.Adaptive.Window = time.Millisecond }},
		{"RetryShare", func(c *Config) { c.RetryShare = 1 }},
		{"RetryShare", func(c *Config) { c.RetryShare = math.NaN() }},
		{"Shape", func(c *Config) { c.Shape = SlowClients + 1 }},
		{"Shape", func(c *Config) { c.Shape = -1 }},
		{"OutageCapacity", func(c *Config) { c.Shape, c.AttackRate, c.OutageCapacity = FastCalls, 10, 0.5 }},
		{"AttackRate", func(c *Config) { c.Shape = FastCalls }},
		{"AttackRate", func(c *Config) { c.Shape, c.AttackRate = SlowClients, math.NaN() }},
		{"AttackRate", func(c *Config) { c.Shape, c.AttackRate = SlowClients, 1e6 }},
		{"AttackRate", func(c *Config) { c.Shape, c.AttackRate = Hang, 10 }},
		{"AttackRate", func(c *Config) { c.Shape, c.AttackRate, c.OutageLength = FastCalls, 1e5, 30*time.Second }}, // 3e6 requests
	} {
		c := DefaultConfig
		tc.edit(&c)
		_, err := Run(context.Background(), c)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s: Run returned %v, want a FieldError for it", tc.field, err)
			continue
		}
		if fe.Error() != "sim: Config."+tc.field+" "+fe.Problem {
			t.Errorf("%s: message %q", tc.field, fe.Error())
		}
	}
	var zero Config
	if err := zero.Validate(); err == nil {
		t.Error("the zero Config is valid")
	}
}

func TestTooManyEvents(t *testing.T) {
	c := small()
	e, err := newEngine(c, Naive, arrivals(c), interval(c.Duration), 1000)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.run(context.Background()); !errors.Is(err, ErrTooManyEvents) {
		t.Fatalf("err = %v, want ErrTooManyEvents", err)
	}
	if e.events != 1000 {
		t.Fatalf("%d events run, want the limit of 1000", e.events)
	}
}

func TestCancel(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	stop := errors.New("stop")
	cancel(stop)
	if _, err := Run(ctx, small()); !errors.Is(err, stop) {
		t.Fatalf("err = %v, want the context's cause", err)
	}
}

func TestArrivals(t *testing.T) {
	c := small()
	arr := arrivals(c)
	want := float64(c.Clients) * c.Rate * c.Duration.Seconds()
	if n := float64(len(arr)); math.Abs(n-want) > 5*math.Sqrt(want) {
		t.Errorf("%v arrivals, want %v ± 5σ", n, want)
	}
	if !slices.IsSortedFunc(arr, func(a, b arrival) int { return int(a.at - b.at) }) {
		t.Error("arrivals out of order")
	}
	perClient := make([]int, c.Clients)
	for _, a := range arr {
		if a.at < 0 || a.at >= c.Duration {
			t.Fatalf("arrival at %v, outside [0, %v)", a.at, c.Duration)
		}
		perClient[a.client]++
	}
	for i, n := range perClient {
		if n == 0 {
			t.Errorf("client %d sent nothing", i)
		}
	}
}

func TestVirtualClock(t *testing.T) {
	e := &engine{now: 3 * time.Second}
	clk := virtualClock{e}
	if got := clk.Now(); !got.Equal(epoch.Add(3 * time.Second)) {
		t.Fatalf("Now() = %v", got)
	}
	tm := clk.NewTimer(time.Second)
	select {
	case at := <-tm.C():
		if !at.Equal(epoch.Add(4 * time.Second)) {
			t.Fatalf("timer fired at %v", at)
		}
	default:
		t.Fatal("timer has not fired")
	}
	if tm.Stop() {
		t.Fatal("Stop of a fired timer reported true")
	}
}

func TestPolicyNames(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range Policies {
		s := p.String()
		if seen[s] || s == "" || s != p.String() {
			t.Errorf("bad or repeated name %q", s)
		}
		seen[s] = true
		if p.Describe(DefaultConfig) == "" {
			t.Errorf("%v has no description", p)
		}
	}
	if got := Policy(9).String(); got != "Policy(9)" {
		t.Errorf("String() = %q", got)
	}
	if got := Policy(9).Describe(DefaultConfig); got != "Policy(9)" {
		t.Errorf("Describe() = %q", got)
	}
	if _, err := strategy(DefaultConfig, Policy(9), nil); err == nil {
		t.Error("unknown policy built a strategy")
	}
}

func TestShapeNames(t *testing.T) {
	for _, s := range Shapes {
		got, err := ParseShape(s.String())
		if err != nil || got != s || s.Describe() == "" || s.Describe() == s.String() {
			t.Errorf("%v: parsed %v, %v; described %q", s, got, err, s.Describe())
		}
	}
	if _, err := ParseShape("down"); err == nil {
		t.Error("an unknown shape parsed")
	}
	if got := Shape(9).String(); got != "Shape(9)" || Shape(9).Describe() != got {
		t.Errorf("String() = %q", got)
	}
}

func TestInterval(t *testing.T) {
	for _, tc := range []struct{ d, want time.Duration }{
		{time.Second, 100 * time.Millisecond},
		{30 * time.Second, 100 * time.Millisecond},
		{90 * time.Second, 500 * time.Millisecond},
		{24 * time.Hour, 5 * time.Minute},
		{1000 * time.Hour, 10 * time.Minute},
	} {
		if got := interval(tc.d); got != tc.want {
			t.Errorf("interval(%v) = %v, want %v", tc.d, got, tc.want)
		}
	}
}

func BenchmarkRun(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Run(context.Background(), DefaultConfig); err != nil {
			b.Fatal(err)
		}
	}
}
