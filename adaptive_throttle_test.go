package rebound_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestAdaptiveThrottleConfig(t *testing.T) {
	for _, tc := range []struct {
		c     rebound.AdaptiveThrottleConfig
		field string // "" for valid
	}{
		{rebound.AdaptiveThrottleConfig{}, ""},
		{rebound.AdaptiveThrottleConfig{K: 1, Window: time.Second}, ""},
		{rebound.AdaptiveThrottleConfig{K: 0.5}, "K"},
		{rebound.AdaptiveThrottleConfig{K: -1}, "K"},
		{rebound.AdaptiveThrottleConfig{K: math.NaN()}, "K"},
		{rebound.AdaptiveThrottleConfig{K: math.Inf(1)}, "K"},
		{rebound.AdaptiveThrottleConfig{Window: time.Millisecond}, "Window"},
		{rebound.AdaptiveThrottleConfig{Window: -time.Minute}, "Window"},
	} {
		_, err := rebound.NewAdaptiveThrottle(tc.c)
		if (err == nil) != (tc.field == "") || tc.c.Validate() == nil != (err == nil) {
			t.Errorf("%+v: err = %v, want a complaint about %q", tc.c, err, tc.field)
			continue
		}
		if err != nil && !strings.Contains(err.Error(), "AdaptiveThrottleConfig."+tc.field) {
			t.Errorf("%+v: error %q does not name the field %s", tc.c, err, tc.field)
		}
	}
}

// TestDefaultAdaptiveThrottle: DefaultAdaptiveThrottle returns the
// documented defaults, and a zero field means the default's value: a
// throttle of the zero config and one of the defaults reject alike, and
// forget alike once the 2-minute window has passed.
func TestDefaultAdaptiveThrottle(t *testing.T) {
	def := rebound.DefaultAdaptiveThrottle()
	if def != (rebound.AdaptiveThrottleConfig{K: 2, Window: 2 * time.Minute}) || def.Validate() != nil {
		t.Fatalf("DefaultAdaptiveThrottle() = %+v, want K 2, Window 2m", def)
	}
	zero, _ := rebound.NewAdaptiveThrottle(rebound.AdaptiveThrottleConfig{})
	full, _ := rebound.NewAdaptiveThrottle(def)
	other, _ := rebound.NewAdaptiveThrottle(rebound.AdaptiveThrottleConfig{K: 3})
	for _, th := range []*rebound.AdaptiveThrottle{zero, full, other} {
		for i := range 40 {
			th.Allow(t0, 0.999999)
			if i < 10 {
				th.Accepted(t0)
			}
		}
	}
	for _, now := range []time.Time{t0, t0.Add(time.Minute), t0.Add(2*time.Minute + time.Second)} {
		pz, pf, po := zero.RejectProbability(now), full.RejectProbability(now), other.RejectProbability(now)
		if pz != pf {
			t.Errorf("at %v: zero config p = %v, DefaultAdaptiveThrottle p = %v", now.Sub(t0), pz, pf)
		}
		if now == t0 && (pz != (40.0-2*10)/41 || po == pz) {
			t.Errorf("p = %v (K 3: %v), want (40-2·10)/41 for K 2", pz, po)
		}
	}
	if p := zero.RejectProbability(t0.Add(2*time.Minute + time.Second)); p != 0 {
		t.Errorf("p = %v past the 2-minute window, want 0", p)
	}
}

// The rejection probability follows the book's formula step by step.
func TestAdaptiveThrottleFormula(t *testing.T) {
	th, _ := rebound.NewAdaptiveThrottle(rebound.AdaptiveThrottleConfig{})
	now := t0
	// 10 requests, all accepted: nothing is rejected.
	for range 10 {
		if !th.Allow(now, 0) {
			t.Fatal("rejected while the server accepts everything")
		}
		th.Accepted(now)
	}
	if p := th.RejectProbability(now); p != 0 {
		t.Fatalf("p = %v, want 0", p)
	}
	// 30 more requests, none accepted: 40 requests, 10 accepts.
	for range 30 {
		th.Allow(now, 0.999999)
	}
	want := (40.0 - 2*10) / 41
	if p := th.RejectProbability(now); math.Abs(p-want) > 1e-12 {
		t.Fatalf("p = %v, want %v", p, want)
	}
	// u below p is rejected, at or above is sent; both count.
	if th.Allow(now, want/2) {
		t.Fatal("u below p was sent")
	}
	if !th.Allow(now, 0.99) {
		t.Fatal("u above p was rejected")
	}
	if r, a := th.Counts(now); r != 42 || a != 10 {
		t.Fatalf("counts = %d, %d; want 42, 10", r, a)
	}
}

// Counts leave the window as it moves, in steps of Window/60.
func TestAdaptiveThrottleWindow(t *testing.T) {
	th, _ := rebound.NewAdaptiveThrottle(rebound.AdaptiveThrottleConfig{Window: time.Minute})
	for i := range 60 {
		at := t0.Add(time.Duration(i) * time.Second)
		th.Allow(at, 0.5)
		th.Accepted(at)
	}
	for _, step := range []struct {
		at       time.Duration
		requests int64
	}{
		{59 * time.Second, 60},
		{60 * time.Second, 59}, // the first second's slot left
		{90 * time.Second, 29},
		{30 * time.Second, 29}, // the past counts as the newest slot: no move back
		{119 * time.Second, 0},
		{time.Hour, 0},
	} {
		if r, a := th.Counts(t0.Add(step.at)); r != step.requests || a != step.requests {
			t.Fatalf("at %v: counts = %d, %d; want %d, %d", step.at, r, a, step.requests, step.requests)
		}
	}
}

// In a full outage the throttle sends about K requests per accept, so
// almost nothing once the accepts have left the window; when the server
// recovers, accepts bring the probability back to 0.
func TestAdaptiveThrottleOutageAndRecovery(t *testing.T) {
	th, _ := rebound.NewAdaptiveThrottle(rebound.AdaptiveThrottleConfig{K: 2, Window: time.Minute})
	// A deterministic stand-in for a uniform source.
	u := func(i int) float64 { return math.Mod(float64(i)*0.618033988749895, 1) }
	now := t0
	for i := range 600 { // healthy: 10 req/s for 60s
		now = now.Add(100 * time.Millisecond)
		if th.Allow(now, u(i)) {
			th.Accepted(now)
		}
	}
	sent := 0
	for i := range 1200 { // full outage: 2 minutes
		now = now.Add(100 * time.Millisecond)
		if th.Allow(now, u(i)) {
			sent++
		}
	}
	// The first minute sends while the healthy minute's accepts fade; the
	// second almost nothing.
	if sent > 700 || sent < 100 {
		t.Fatalf("sent %d of 1200 requests during the outage", sent)
	}
	if p := th.RejectProbability(now); p < 0.99 {
		t.Fatalf("p = %v after two minutes of outage, want >= 0.99", p)
	}
	for i := range 9000 { // recovery, 15 minutes: every request sent is accepted
		now = now.Add(100 * time.Millisecond)
		if th.Allow(now, u(i)) {
			th.Accepted(now)
		}
	}
	if p := th.RejectProbability(now); p != 0 {
		t.Fatalf("p = %v after 15 minutes of recovery, want 0", p)
	}
}

// TestAdaptiveThrottleRecoveryTime: after a full outage longer than the
// window, the share of requests sent grows about e^x-fold per window
// (x = K·(1 − e^−x)), and a client that sends N requests a second sends
// them all again after about Window·ln(N·Window)/x, as the type's doc
// says: within 1.1 times that, and not before half of it.
func TestAdaptiveThrottleRecoveryTime(t *testing.T) {
	for _, c := range []struct {
		k      float64
		rate   int // requests per second
		window time.Duration
	}{
		{2, 10, time.Minute},
		{2, 1, 2 * time.Minute},
		{2, 100, 2 * time.Minute},
		{1.5, 10, time.Minute},
	} {
		th, _ := rebound.NewAdaptiveThrottle(rebound.AdaptiveThrottleConfig{K: c.k, Window: c.window})
		u := func(i int) float64 { return math.Mod(float64(i)*0.618033988749895, 1) }
		step := time.Second / time.Duration(c.rate)
		now, i := t0, 0
		for range 3 * int(c.window/step) { // the outage: three windows
			now = now.Add(step)
			th.Allow(now, u(i))
			i++
		}
		x := 1.0
		for range 100 {
			x = c.k * (1 - math.Exp(-x))
		}
		want := time.Duration(c.window.Seconds() * math.Log(float64(c.rate)*c.window.Seconds()) / x * float64(time.Second))
		start, back := now, time.Duration(0)
		for now.Sub(start) < 2*want {
			now = now.Add(step)
			if th.Allow(now, u(i)) {
				th.Accepted(now)
			}
			i++
			if th.RejectProbability(now) == 0 {
				back = now.Sub(start)
				break
			}
		}
		if back == 0 || back > want*11/10 || back < want/2 {
			t.Errorf("K %v, %d/s, window %v: every request sent again after %v, want about %v (x = %.2f)", c.k, c.rate, c.window, back, want, x)
		}
	}
}

// TestAdaptiveThrottleWithdraw: a request taken back counts neither as a
// request nor as a refusal; one counted before the window, or in a slot
// that holds none, takes nothing back.
func TestAdaptiveThrottleWithdraw(t *testing.T) {
	th, _ := rebound.NewAdaptiveThrottle(rebound.AdaptiveThrottleConfig{Window: time.Minute})
	for i := range 10 {
		th.Allow(t0.Add(time.Duration(i)*time.Second), 0.5)
	}
	th.Withdraw(t0.Add(3 * time.Second))
	th.Withdraw(t0.Add(30 * time.Second)) // no request there
	if r, a := th.Counts(t0.Add(10 * time.Second)); r != 9 || a != 0 {
		t.Fatalf("after one withdrawn: %d requests, %d accepts; want 9 and 0", r, a)
	}
	later := t0.Add(90 * time.Second)
	th.Allow(later, 0.5)
	th.Withdraw(t0.Add(4 * time.Second)) // before the window
	if r, _ := th.Counts(later); r != 1 {
		t.Fatalf("a request from before the window withdrawn: %d requests, want 1", r)
	}
	th.Withdraw(later)
	if r, _ := th.Counts(later); r != 0 || th.RejectProbability(later) != 0 {
		t.Fatalf("%d requests after the last was withdrawn, want 0", r)
	}
}

func TestAdaptiveThrottleConcurrent(t *testing.T) {
	th, _ := rebound.NewAdaptiveThrottle(rebound.AdaptiveThrottleConfig{})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				now := t0.Add(time.Duration(g*1000+i) * time.Millisecond)
				if th.Allow(now, 0.5) && i%2 == 0 {
					th.Accepted(now)
				}
			}
		})
	}
	wg.Wait()
	if r, _ := th.Counts(t0.Add(8 * time.Second)); r != 8000 {
		t.Fatalf("requests = %d, want 8000", r)
	}
}

// An attempt the throttle rejects ends the call with ErrThrottled: it is
// not retried, and the budget does not count it as a failure.
func TestRejectedLocallyEndsTheCall(t *testing.T) {
	th, _ := rebound.NewThrottle(rebound.ThrottleConfig{MaxTokens: 10, TokenRatio: 0.1})
	s, err := rebound.NewRetrier(rebound.RetryPolicy{MaxAttempts: 5, Backoff: rebound.DefaultBackoff()},
		rebound.WithBudget(th), rebound.WithClassifier(func(error) rebound.RetryInfo { return rebound.RetryInfo{Safety: rebound.SafetyYes} }))
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	err = rebound.Do(context.Background(), s, func(context.Context) error {
		calls++
		return rebound.ErrRejectedLocally
	})
	if calls != 1 || !errors.Is(err, rebound.ErrThrottled) || !errors.Is(err, rebound.ErrRejectedLocally) {
		t.Fatalf("calls = %d, err = %v; want 1 call ending with ErrThrottled", calls, err)
	}
	if th.Tokens() != 10000 {
		t.Fatalf("throttle tokens = %d, want 10000: a local rejection is no failure", th.Tokens())
	}
	h, _ := rebound.NewHedger(rebound.HedgingPolicy{MaxAttempts: 3, HedgingDelay: 0})
	calls = 0
	var mu sync.Mutex
	_, err = rebound.Hedge(context.Background(), h, func(_ context.Context, attempt int) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		return 0, rebound.ErrRejectedLocally
	})
	if !errors.Is(err, rebound.ErrThrottled) {
		t.Fatalf("hedged: err = %v, want ErrThrottled", err)
	}
}

func BenchmarkAdaptiveThrottle(b *testing.B) {
	th, _ := rebound.NewAdaptiveThrottle(rebound.AdaptiveThrottleConfig{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		now := t0
		for pb.Next() {
			now = now.Add(time.Millisecond)
			if th.Allow(now, 0.5) {
				th.Accepted(now)
			}
		}
	})
}
