package grpcretry

import (
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/a6"
	"github.com/rebound-go/rebound/internal/clocktest"
)

func TestBuckets(t *testing.T) {
	if got := bucketOf(maxMicros); got != numBuckets-1 {
		t.Fatalf("bucketOf(max) = %d, want %d", got, numBuckets-1)
	}
	if got := bucketOf(1 << 62); got != numBuckets-1 {
		t.Fatalf("bucketOf(huge) = %d, want the last bucket", got)
	}
	prev := -1
	for us := uint64(0); us <= maxMicros; us += 1 + us/97 {
		i := bucketOf(us)
		switch {
		case i < prev:
			t.Fatalf("bucketOf(%d) = %d, below bucketOf of a smaller latency (%d)", us, i, prev)
		case us >= bucketEnd(i):
			t.Fatalf("bucketOf(%d) = %d, which ends at %d", us, i, bucketEnd(i))
		case i > 0 && us < bucketEnd(i-1):
			t.Fatalf("bucketOf(%d) = %d, but bucket %d ends at %d", us, i, i-1, bucketEnd(i-1))
		}
		if lo := bucketEnd(i - 1); i >= 2*subBuckets && (bucketEnd(i)-lo)*subBuckets > lo {
			t.Fatalf("bucket %d [%d, %d) is wider than 1/%d of its start", i, lo, bucketEnd(i), subBuckets)
		}
		prev = i
	}
	if bucketEnd(0) != 1 || bucketEnd(31) != 32 || bucketEnd(32) != 34 {
		t.Fatalf("bucket ends %d %d %d, want 1 32 34", bucketEnd(0), bucketEnd(31), bucketEnd(32))
	}
}

func newWindow(a AdaptiveHedgingConfig, now time.Time) *latencyWindow {
	w := new(latencyWindow)
	w.init(&a, now)
	return w
}

func TestLatencyWindowQuantile(t *testing.T) {
	now := time.Now()
	a := AdaptiveHedgingConfig{MaxExtraLoad: 0.05, Window: 4 * time.Second, MinSamples: 100, Burst: 1}
	if w := newWindow(a, now); w.quantile != 1-0.9*0.05 {
		t.Fatalf("quantile %v for MaxExtraLoad 0.05, want 0.955", w.quantile)
	}
	for _, tc := range []struct {
		fast, slow int
		want       time.Duration
	}{
		{95, 4, -1},                          // too few samples
		{95, 5, 1024 * time.Microsecond},     // the 95th of 100 is fast
		{94, 6, 102400 * time.Microsecond},   // the 95th is slow
		{1900, 100, 1024 * time.Microsecond}, // exactly 5% slow
	} {
		w := newWindow(a, now)
		w.quantile = 0.95
		for range tc.fast {
			w.record(now, time.Millisecond)
		}
		for range tc.slow {
			w.record(now, 100*time.Millisecond)
		}
		if got := w.quantileAt(now); got != tc.want {
			t.Errorf("%d fast, %d slow: quantile %v, want %v", tc.fast, tc.slow, got, tc.want)
		}
	}
}

func TestLatencyWindowSlides(t *testing.T) {
	t0 := time.Now()
	a := AdaptiveHedgingConfig{MaxExtraLoad: 0.5, Window: 4 * time.Second, MinSamples: 1, Burst: 1}
	w := newWindow(a, t0)
	w.record(t0, 10*time.Millisecond)
	w.record(t0.Add(time.Second), 20*time.Millisecond)
	w.record(t0.Add(2*time.Second), 20*time.Millisecond)
	if got := w.quantileAt(t0.Add(3 * time.Second)); got != 20480*time.Microsecond {
		t.Fatalf("median of 10, 20, 20ms: %v", got)
	}
	// At 4s the first quarter has left the window.
	w.record(t0.Add(4*time.Second), 30*time.Millisecond)
	if got := w.quantileAt(t0.Add(4 * time.Second)); got != 20480*time.Microsecond {
		t.Fatalf("median of 20, 20, 30ms: %v", got)
	}
	// A latency that ends in a quarter whose slot is already reused is
	// dropped, not counted in the newer quarter.
	w.record(t0.Add(500*time.Millisecond), time.Hour)
	if got := w.quantileAt(t0.Add(4 * time.Second)); got != 20480*time.Microsecond {
		t.Fatalf("a stale latency moved the median to %v", got)
	}
	if got := w.quantileAt(t0.Add(9 * time.Second)); got != -1 {
		t.Fatalf("an old window still gives %v", got)
	}
	// A clock before the origin does not break the slots.
	w.record(t0.Add(-5*time.Second), time.Millisecond)
	_ = w.quantileAt(t0.Add(-5 * time.Second))
}

func TestHedgeCap(t *testing.T) {
	var c hedgeCap
	c.init(&AdaptiveHedgingConfig{MaxExtraLoad: 0.25, Burst: 2})
	for i, want := range []bool{true, true, false} {
		if c.take() != want {
			t.Fatalf("hedge %d: take = %v, want %v: a cap of 2 allows exactly 2", i+1, !want, want)
		}
	}
	for range 3 {
		c.deposit()
	}
	if c.take() {
		t.Fatal("3 calls at 0.25 paid for a hedge")
	}
	c.deposit()
	if !c.take() || c.take() {
		t.Fatal("4 calls at 0.25 did not pay for exactly one hedge")
	}
	for range 100 {
		c.deposit()
	}
	if c.tokens.Load() != 2*capUnit {
		t.Fatalf("saved %d, want at most Burst", c.tokens.Load())
	}
}

// TestCappedBudget: an adaptive method's hedge needs the throttle's,
// WithBudget's and the cap's leave, and a refusal by any of them spends
// nothing from the others; its calls are counted for a call budget.
func TestCappedBudget(t *testing.T) {
	th, _ := rebound.NewThrottle(rebound.ThrottleConfig{MaxTokens: 2, TokenRatio: 1})
	tb, _ := rebound.NewTokenBucket(rebound.TokenBucketConfig{Capacity: 10, RetryCost: 5, TimeoutCost: 10, SuccessRefund: 1, RefundRetryCost: true})
	conc, _ := rebound.NewConcurrencyBudget(rebound.ConcurrencyBudgetConfig{Percent: 100})
	c := &hedgeCap{}
	c.init(&AdaptiveHedgingConfig{MaxExtraLoad: 0.5, Burst: 2})
	b := &cappedBudget{budget: a6.Budget(th, a6.Settings{Budget: rebound.AllBudgets(tb, conc)}), cap: c}

	b.RecordFailure() // 1 <= threshold 1
	if b.Allow(false) || c.tokens.Load() != 2*capUnit || tb.Tokens() != 10 {
		t.Fatalf("a throttled hedge spent: cap %d, bucket %d", c.tokens.Load(), tb.Tokens())
	}
	b.RecordSuccess() // the throttle allows again
	if b.Allow(false) || c.tokens.Load() != 2*capUnit || tb.Tokens() != 10 {
		t.Fatalf("a hedge with no call in flight (concurrency budget) spent: cap %d, bucket %d", c.tokens.Load(), tb.Tokens())
	}
	b.StartCall()
	if calls, _ := conc.InFlight(); calls != 1 {
		t.Fatalf("StartCall: %d calls in flight, want 1", calls)
	}
	if !b.Allow(false) || c.tokens.Load() != capUnit || tb.Tokens() != 5 {
		t.Fatalf("first hedge: cap %d, bucket %d; want one of each spent", c.tokens.Load(), tb.Tokens())
	}
	b.RecordRetrySuccess(false) // the refund reaches the bucket
	if tb.Tokens() != 10 {
		t.Fatalf("bucket %d after a hedge's success, want the 5 refunded", tb.Tokens())
	}
	b.EndRetry()
	b.EndCall()
	if calls, retries := conc.InFlight(); calls != 0 || retries != 0 {
		t.Fatalf("after the call: %d calls, %d retries in flight", calls, retries)
	}
	b.StartCall()
	c.tokens.Store(0)
	if b.Allow(false) || tb.Tokens() != 10 {
		t.Fatalf("an empty cap allowed a hedge or spent the bucket (%d)", tb.Tokens())
	}
	if _, retries := conc.InFlight(); retries != 0 {
		t.Fatalf("a hedge the cap refused is in flight")
	}
	b.EndCall()
	if nb := (&cappedBudget{cap: c}); nb.Allow(false) {
		t.Fatal("an empty cap allowed a hedge")
	}
}

func TestAdaptiveDelay(t *testing.T) {
	clk := clocktest.New()
	a := AdaptiveHedgingConfig{MaxExtraLoad: 0.1, Window: 6400 * time.Millisecond, MinSamples: 10, Burst: 1}
	m := &adaptiveMethod{clock: clk, fallback: time.Second}
	m.lat.init(&a, clk.Now())
	if d := m.delay(); d != time.Second {
		t.Fatalf("no samples: delay %v, want the configured 1s", d)
	}
	for range 10 {
		m.lat.record(clk.Now(), 10*time.Millisecond)
	}
	if d := m.delay(); d != time.Second {
		t.Fatalf("delay %v recomputed before Window/64", d)
	}
	clk.Advance(100 * time.Millisecond)
	if d := m.delay(); d != 10240*time.Microsecond {
		t.Fatalf("delay %v, want the 91st percentile, 10.24ms", d)
	}
}

func BenchmarkLatencyRecord(b *testing.B) {
	w := newWindow(DefaultAdaptiveHedging(), time.Now())
	now := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		d := time.Duration(0)
		for pb.Next() {
			d += 37 * time.Microsecond
			w.record(now, d%(50*time.Millisecond))
		}
	})
}

func BenchmarkAdaptiveDelay(b *testing.B) {
	m := &adaptiveMethod{clock: rebound.RealClock(), fallback: time.Second}
	a := DefaultAdaptiveHedging()
	m.lat.init(&a, time.Now())
	for i := range 1000 {
		m.lat.record(time.Now(), time.Duration(i)*time.Microsecond)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = m.delay()
		}
	})
}

func BenchmarkLatencyQuantile(b *testing.B) {
	w := newWindow(DefaultAdaptiveHedging(), time.Now())
	for i := range 1000 {
		w.record(time.Now(), time.Duration(i)*time.Microsecond)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = w.quantileAt(time.Now())
	}
}
