package rebound_test

import (
	"context"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
)

func BenchmarkDoSuccess(b *testing.B) {
	p, err := rebound.NewRetrier(rebound.RetryPolicy{MaxAttempts: 3, Backoff: testBackoff})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	op := func(context.Context) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		if err := rebound.Do(ctx, p, op); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDoRetryOnce(b *testing.B) {
	zero := rebound.Backoff{Initial: time.Nanosecond, Max: time.Nanosecond, Multiplier: 1}
	p, err := rebound.NewRetrier(rebound.RetryPolicy{MaxAttempts: 3, Backoff: zero}, rebound.WithRandom(zeroRand{}))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	fail := rebound.Retryable(errFlaky)
	b.ReportAllocs()
	for b.Loop() {
		n := 0
		err := rebound.Do(ctx, p, func(context.Context) error {
			n++
			if n == 1 {
				return fail
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

type zeroRand struct{}

func (zeroRand) Float64() float64 { return 0 }

func BenchmarkThrottleParallel(b *testing.B) {
	th, _ := rebound.NewThrottle(rebound.ThrottleConfig{MaxTokens: 100, TokenRatio: 0.1})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if i%10 == 0 {
				th.RecordFailure()
			} else {
				th.RecordSuccess()
			}
			th.Allow(false)
			i++
		}
	})
}

func BenchmarkTokenBucketParallel(b *testing.B) {
	tb, _ := rebound.NewTokenBucket(rebound.DefaultTokenBucket())
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if i%5 == 0 {
				tb.Allow(false)
			} else {
				tb.RecordSuccess()
			}
			i++
		}
	})
}

func BenchmarkHedgeSuccess(b *testing.B) {
	h, _ := rebound.NewHedger(rebound.HedgingPolicy{MaxAttempts: 3, HedgingDelay: time.Second})
	ctx := context.Background()
	op := func(context.Context, int) (int, error) { return 1, nil }
	b.ReportAllocs()
	for b.Loop() {
		if _, err := rebound.Hedge(ctx, h, op); err != nil {
			b.Fatal(err)
		}
	}
}
