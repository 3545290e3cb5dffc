package rebound_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/clocktest"
)

func TestThrottleTrace(t *testing.T) {
	th, err := rebound.NewThrottle(rebound.ThrottleConfig{MaxTokens: 10, TokenRatio: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	// Each step: an event, then token_count in thousandths and whether a
	// retry is allowed (token_count > 5).
	steps := []struct {
		event  string
		tokens int64
		allow  bool
	}{
		{"", 10000, true},
		{"success", 10000, true}, // capped at maxTokens
		{"failure", 9000, true},
		{"failure", 8000, true},
		{"failure", 7000, true},
		{"failure", 6000, true},
		{"failure", 5000, false}, // equal to the threshold: no retries
		{"success", 5500, true},
		{"failure", 4500, false},
		{"failure", 3500, false},
		{"failure", 2500, false},
		{"failure", 1500, false},
		{"failure", 500, false},
		{"failure", 0, false},
		{"failure", 0, false}, // never below 0
		{"success", 500, false},
	}
	for i, s := range steps {
		switch s.event {
		case "success":
			th.RecordSuccess()
		case "failure":
			th.RecordFailure()
		}
		if got := th.Tokens(); got != s.tokens {
			t.Fatalf("step %d (%s): tokens = %d, want %d", i, s.event, got, s.tokens)
		}
		if got := th.Allow(false); got != s.allow {
			t.Fatalf("step %d (%s): Allow = %v, want %v", i, s.event, got, s.allow)
		}
	}
	if got, want := th.String(), "0.5/10 (threshold 5)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestThrottleRatioDecimals(t *testing.T) {
	for _, tc := range []struct {
		ratio float64
		gain  int64
	}{
		{0.5466, 546}, {0.1, 100}, {0.29, 290}, {0.001, 1}, {0.0009, 0}, {0.0001, 0}, {0, 0},
		{1, 1000}, {2.5, 2500},
		// Above MaxTokens a success refills completely: clamped, not refused.
		{1e13, 3000}, {math.MaxFloat64, 3000}, {math.Inf(1), 3000},
	} {
		th, err := rebound.NewThrottle(rebound.ThrottleConfig{MaxTokens: 100, TokenRatio: tc.ratio})
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			th.RecordFailure()
		}
		th.RecordSuccess()
		if got := th.Tokens() - 97000; got != tc.gain {
			t.Errorf("ratio %v: a success adds %d milli-tokens, want %d", tc.ratio, got, tc.gain)
		}
	}
}

func TestThrottleConcurrentExact(t *testing.T) {
	th, _ := rebound.NewThrottle(rebound.ThrottleConfig{MaxTokens: 1000, TokenRatio: 0.001})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				th.RecordFailure()
			}
		}()
	}
	wg.Wait()
	if got := th.Tokens(); got != 200_000 {
		t.Fatalf("after 800 concurrent failures tokens = %d, want 200000", got)
	}
}

func TestNewThrottleRejects(t *testing.T) {
	for _, c := range []rebound.ThrottleConfig{
		{MaxTokens: 0, TokenRatio: 1},
		{MaxTokens: 1001, TokenRatio: 1},
		{MaxTokens: -5, TokenRatio: 1},
		{MaxTokens: 10, TokenRatio: -0.1},
		{MaxTokens: 10, TokenRatio: math.NaN()},
	} {
		if _, err := rebound.NewThrottle(c); err == nil {
			t.Errorf("NewThrottle(%+v) = nil error", c)
		}
	}
}

func TestTokenBucketArithmetic(t *testing.T) {
	b, err := rebound.NewTokenBucket(rebound.DefaultTokenBucket())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if !b.Allow(false) {
			t.Fatalf("retry %d refused with %d tokens left", i+1, b.Tokens())
		}
	}
	if b.Tokens() != 0 || b.Allow(false) {
		t.Fatalf("after 100 retries: tokens = %d, want 0 and refused", b.Tokens())
	}
	for range 9 {
		b.RecordSuccess()
	}
	if b.Allow(true) {
		t.Fatal("a timeout retry costs 10 and was allowed with 9 tokens")
	}
	if !b.Allow(false) || b.Tokens() != 4 {
		t.Fatalf("a retry costs 5: tokens = %d, want 4", b.Tokens())
	}
	b.RecordFailure() // costs nothing
	if b.Tokens() != 4 {
		t.Fatalf("RecordFailure changed the bucket to %d", b.Tokens())
	}
	for range 1000 {
		b.RecordSuccess()
	}
	if b.Tokens() != 500 {
		t.Fatalf("refunds overfilled the bucket: %d", b.Tokens())
	}
	for range 50 {
		b.Allow(true)
	}
	if b.Tokens() != 0 {
		t.Fatalf("50 timeout retries should drain 500 tokens, %d left", b.Tokens())
	}
}

func TestNewTokenBucketRejects(t *testing.T) {
	for _, c := range []rebound.TokenBucketConfig{
		{Capacity: 0, RetryCost: 5, TimeoutCost: 10},
		{Capacity: 10, RetryCost: 0, TimeoutCost: 10},
		{Capacity: 10, RetryCost: 5, TimeoutCost: -1},
		{Capacity: 10, RetryCost: 5, TimeoutCost: 10, SuccessRefund: -1},
	} {
		if _, err := rebound.NewTokenBucket(c); err == nil {
			t.Errorf("NewTokenBucket(%+v) = nil error", c)
		}
	}
}

func TestStandardWithThrottle(t *testing.T) {
	th, _ := rebound.NewThrottle(rebound.ThrottleConfig{MaxTokens: 4, TokenRatio: 1})
	s, _ := rebound.NewStandard(rebound.WithBudget(th), rebound.WithClock(clocktest.NewAuto()))
	calls := 0
	err := rebound.Do(context.Background(), s, func(context.Context) error { calls++; return rebound.Retryable(errFlaky) })
	// 4→3 retry, 3→2 at the threshold: refused.
	if !errors.Is(err, rebound.ErrThrottled) || calls != 2 || th.Tokens() != 2000 {
		t.Fatalf("Do = %v after %d calls, tokens %d; want budget exhausted after 2, 2000", err, calls, th.Tokens())
	}
}
