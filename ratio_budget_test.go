package rebound_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/clocktest"
)

func TestRatioBudgetTrace(t *testing.T) {
	clk := clocktest.New()
	b, err := rebound.NewRatioBudget(rebound.RatioBudgetConfig{Ratio: 0.5, MinRetriesPerSecond: 0.1, TTL: 10 * time.Second, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	// The floor alone: 0.1/s over 10s is one retry.
	steps := []struct {
		event   string // "call", "retry" (Allow), or "wait" (10s)
		allow   bool
		calls   int64
		retries int64
	}{
		{"retry", true, 0, 1},
		{"retry", false, 0, 1},
		{"call", false, 1, 1},
		{"retry", false, 1, 1}, // 2 > 0.5×1 + 1
		{"call", false, 2, 1},
		{"retry", true, 2, 2}, // 2 <= 0.5×2 + 1
		{"call", false, 3, 2},
		{"call", false, 4, 2},
		{"retry", true, 4, 3},
		{"retry", false, 4, 3},
		{"wait", false, 0, 0}, // all of it is TTL old
		{"retry", true, 0, 1},
	}
	for i, s := range steps {
		got := false
		switch s.event {
		case "call":
			b.StartCall()
			b.EndCall()
		case "retry":
			got = b.Allow(false)
			b.EndRetry()
		case "wait":
			clk.Advance(10 * time.Second)
		}
		if got != s.allow {
			t.Fatalf("step %d (%s): Allow = %v, want %v", i, s.event, got, s.allow)
		}
		if c, r := b.Counts(); c != s.calls || r != s.retries {
			t.Fatalf("step %d (%s): counts %d calls %d retries, want %d %d", i, s.event, c, r, s.calls, s.retries)
		}
	}
}

// TestRatioBudgetSlides: calls leave the window one step (TTL/60) at a
// time.
func TestRatioBudgetSlides(t *testing.T) {
	clk := clocktest.New()
	b, _ := rebound.NewRatioBudget(rebound.RatioBudgetConfig{Ratio: 1, TTL: 60 * time.Second, Clock: clk})
	for range 3 {
		b.StartCall()
		clk.Advance(time.Second)
	}
	if c, _ := b.Counts(); c != 3 {
		t.Fatalf("%d calls, want 3", c)
	}
	clk.Advance(57 * time.Second) // the first call is 60s old now, the second 59s
	if c, _ := b.Counts(); c != 2 {
		t.Fatalf("%d calls after 60s, want 2", c)
	}
}

func TestConcurrencyBudget(t *testing.T) {
	b, err := rebound.NewConcurrencyBudget(rebound.ConcurrencyBudgetConfig{Percent: 50, MinConcurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !b.Allow(false) || b.Allow(false) {
		t.Fatal("with no calls, want exactly MinConcurrency (1) retries")
	}
	for range 6 {
		b.StartCall()
	}
	// 50% of 6 calls: 3 retries in flight, one of them already. Each
	// retry allowed takes a place: two more, then none.
	for i, want := range []bool{true, true, false} {
		if got := b.Allow(false); got != want {
			t.Fatalf("with 6 calls and 1 retry in flight, Allow number %d = %v, want %v: 3 retries in flight", i+1, got, want)
		}
	}
	b.EndRetry()
	if !b.Allow(false) {
		t.Fatal("a retry that ended frees its place")
	}
	if c, r := b.InFlight(); c != 6 || r != 3 {
		t.Fatalf("in flight %d calls %d retries, want 6 3", c, r)
	}
}

func TestNewBudgetsReject(t *testing.T) {
	for _, c := range []rebound.RatioBudgetConfig{
		{Ratio: -1, TTL: time.Second},
		{Ratio: 1001, TTL: time.Second},
		{Ratio: 0.2, MinRetriesPerSecond: -1, TTL: time.Second},
		{Ratio: 0.2, TTL: time.Millisecond},
		{Ratio: 0.2, TTL: 2 * time.Hour},
	} {
		if _, err := rebound.NewRatioBudget(c); err == nil {
			t.Errorf("NewRatioBudget(%+v) = nil error", c)
		}
	}
	for _, c := range []rebound.ConcurrencyBudgetConfig{{Percent: -1}, {Percent: 20, MinConcurrency: -1}} {
		if _, err := rebound.NewConcurrencyBudget(c); err == nil {
			t.Errorf("NewConcurrencyBudget(%+v) = nil error", c)
		}
	}
}

// TestAllBudgetsRefusalSpendsNothing: a bucket that allows, followed by a
// budget that refuses, gets its cost back.
func TestAllBudgetsRefusalSpendsNothing(t *testing.T) {
	bucket, _ := rebound.NewTokenBucket(rebound.DefaultTokenBucket())
	ratio, _ := rebound.NewRatioBudget(rebound.RatioBudgetConfig{Ratio: 0, MinRetriesPerSecond: 0.1, TTL: 10 * time.Second, Clock: clocktest.New()})
	conc, _ := rebound.NewConcurrencyBudget(rebound.ConcurrencyBudgetConfig{MinConcurrency: 2})
	th, _ := rebound.NewThrottle(rebound.ThrottleConfig{MaxTokens: 10, TokenRatio: 1})
	all := rebound.AllBudgets(th, nil, bucket, conc, ratio)
	if !all.Allow(false) {
		t.Fatal("first retry refused")
	}
	if all.Allow(true) {
		t.Fatal("second retry allowed past the ratio budget's one")
	}
	if got := bucket.Tokens(); got != 495 {
		t.Fatalf("bucket %d, want 495: the refused retry must cost nothing", got)
	}
	if _, r := conc.InFlight(); r != 1 {
		t.Fatalf("%d retries in flight, want 1", r)
	}
	if _, r := ratio.Counts(); r != 1 {
		t.Fatalf("%d retries in the ratio window, want 1", r)
	}
	if rebound.AllBudgets() != nil || rebound.AllBudgets(nil, nil) != nil {
		t.Fatal("AllBudgets of no budget is not nil")
	}
}

// TestCallBudgetBalanced: whatever way a call ends, the budget ends with
// nothing in flight.
func TestCallBudgetBalanced(t *testing.T) {
	conc, _ := rebound.NewConcurrencyBudget(rebound.ConcurrencyBudgetConfig{Percent: 100, MinConcurrency: 100})
	budget := rebound.AllBudgets(conc)
	r, _ := rebound.NewRetrier(rebound.RetryPolicy{MaxAttempts: 3, Backoff: rebound.DefaultBackoff()},
		rebound.WithBudget(budget), rebound.WithClock(clocktest.NewAuto()))
	h, _ := rebound.NewHedger(rebound.HedgingPolicy{MaxAttempts: 3}, rebound.WithBudget(budget))
	fail := errors.New("fails")
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			n := 0
			_ = rebound.Do(context.Background(), r, func(context.Context) error {
				if n++; n <= i%4 {
					return rebound.Retryable(fail)
				}
				return nil
			})
		}()
		go func() {
			defer wg.Done()
			_, _ = rebound.Hedge(context.Background(), h, func(ctx context.Context, n int) (int, error) {
				if n < 3 {
					return 0, rebound.Retryable(fail)
				}
				return n, nil
			})
		}()
	}
	wg.Wait()
	if c, r := conc.InFlight(); c != 0 || r != 0 {
		t.Fatalf("after every call ended: %d calls %d retries in flight, want 0 0", c, r)
	}
}

// TestConcurrencyBudgetCountsRetryInFlight: while a retry's attempt runs,
// the budget holds its place; a second call's retry is refused.
func TestConcurrencyBudgetCountsRetryInFlight(t *testing.T) {
	conc, _ := rebound.NewConcurrencyBudget(rebound.ConcurrencyBudgetConfig{MinConcurrency: 1})
	r, _ := rebound.NewRetrier(rebound.RetryPolicy{MaxAttempts: 2, Backoff: rebound.DefaultBackoff()},
		rebound.WithBudget(conc), rebound.WithClock(clocktest.NewAuto()))
	inRetry, release := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		n := 0
		done <- rebound.Do(context.Background(), r, func(context.Context) error {
			if n++; n == 1 {
				return rebound.Retryable(errors.New("first"))
			}
			close(inRetry)
			<-release
			return nil
		})
	}()
	<-inRetry
	err := rebound.Do(context.Background(), r, func(context.Context) error { return rebound.Retryable(errors.New("other")) })
	if !errors.Is(err, rebound.ErrThrottled) {
		t.Fatalf("second call: %v, want ErrThrottled while the first call's retry is in flight", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if c, r := conc.InFlight(); c != 0 || r != 0 {
		t.Fatalf("%d calls %d retries in flight, want 0 0", c, r)
	}
}

// The budgets on the path of every retry, shared by every goroutine: a
// ratio budget takes a lock, a concurrency budget none.
func BenchmarkRatioBudgetParallel(b *testing.B) {
	rb, _ := rebound.NewRatioBudget(rebound.DefaultRatioBudget())
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			rb.StartCall()
			if rb.Allow(false) {
				rb.EndRetry()
			}
			rb.EndCall()
		}
	})
}

func BenchmarkConcurrencyBudgetParallel(b *testing.B) {
	cb, _ := rebound.NewConcurrencyBudget(rebound.DefaultConcurrencyBudget())
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			cb.StartCall()
			if cb.Allow(false) {
				cb.EndRetry()
			}
			cb.EndCall()
		}
	})
}

func BenchmarkAllBudgetsParallel(b *testing.B) {
	th, _ := rebound.NewThrottle(rebound.ThrottleConfig{MaxTokens: 10, TokenRatio: 1})
	tb, _ := rebound.NewTokenBucket(rebound.TokenBucketConfig{Capacity: 1 << 40, RetryCost: 1, TimeoutCost: 1, SuccessRefund: 1})
	cb, _ := rebound.NewConcurrencyBudget(rebound.ConcurrencyBudgetConfig{MinConcurrency: 1 << 30})
	all := rebound.AllBudgets(th, tb, cb).(rebound.CallBudget)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			all.StartCall()
			if all.Allow(false) {
				all.EndRetry()
			}
			all.RecordSuccess()
			all.EndCall()
		}
	})
}
