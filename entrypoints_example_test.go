package rebound_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/clocktest"
)

// DoValue returns the value of the attempt that succeeded.
func ExampleDoValue() {
	policy, err := rebound.NewRetrier(rebound.RetryPolicy{
		MaxAttempts: 3,
		Backoff:     rebound.Backoff{Initial: time.Millisecond, Max: time.Millisecond, Multiplier: 2},
	})
	if err != nil {
		log.Fatal(err)
	}
	attempts := 0
	price, err := rebound.DoValue(context.Background(), policy, func(context.Context) (int, error) {
		attempts++
		if attempts == 1 {
			return 0, rebound.Retryable(errors.New("connection reset"))
		}
		return 42, nil
	})
	fmt.Println(price, err, "after", attempts, "attempts")
	// Output: 42 <nil> after 2 attempts
}

// An error says what it means for retrying with Mark, or the shorthands
// Retryable, Permanent and RetryAfter; Classify reads it back through
// any wrapping.
func ExampleMark() {
	busy := errors.New("busy")
	for _, err := range []error{
		rebound.Retryable(busy),
		rebound.Permanent(busy),
		fmt.Errorf("fetching: %w", rebound.RetryAfter(busy, 2*time.Second)),
		rebound.Mark(busy, rebound.RetryInfo{Safety: rebound.SafetyYes, Timeout: true}),
		busy,
	} {
		info := rebound.Classify(err)
		fmt.Println(info.Safety, info.HasRetryAfter, info.RetryAfter, info.Timeout)
	}
	// Output:
	// yes false 0s false
	// no false 0s false
	// yes true 2s false
	// yes false 0s true
	// no false 0s false
}

// When a call gives up, its error is an *Error: how many attempts ran, the
// last one's error, and why retrying stopped, which errors.Is finds.
func ExampleError() {
	policy, err := rebound.NewRetrier(rebound.RetryPolicy{
		MaxAttempts: 2,
		Backoff:     rebound.Backoff{Initial: time.Millisecond, Max: time.Millisecond, Multiplier: 2},
	})
	if err != nil {
		log.Fatal(err)
	}
	err = rebound.Do(context.Background(), policy, flakyService(5))
	var gaveUp *rebound.Error
	if errors.As(err, &gaveUp) {
		fmt.Println(gaveUp.Attempts, "attempts;", gaveUp.Reason, ";", gaveUp.Err)
	}
	fmt.Println(errors.Is(err, rebound.ErrAttemptsExhausted))
	fmt.Println(err)
	// Output:
	// 2 attempts; rebound: attempts exhausted ; connection reset
	// true
	// rebound: gave up after 2 attempts (attempts exhausted): connection reset
}

// A Call's hooks hear what the loop decides as it decides: for logs,
// statistics and traces of the call.
func ExampleCall_Retry() {
	policy, err := rebound.NewRetrier(rebound.RetryPolicy{
		MaxAttempts: 3,
		Backoff:     rebound.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2},
	}, rebound.WithClock(clocktest.NewAuto()), rebound.WithRandom(clocktest.NewRand(0.5)))
	if err != nil {
		log.Fatal(err)
	}
	call := rebound.Call[string]{
		OnRetry: func(attempt int, err error, delay time.Duration) {
			fmt.Println("attempt", attempt, "failed:", err, "; next in", delay)
		},
		OnGiveUp: func(attempts int, err, reason error) {
			fmt.Println("gave up after", attempts, "attempts:", reason)
		},
	}
	_, err = call.Retry(context.Background(), policy, func(context.Context) (string, error) {
		return "", rebound.Retryable(errors.New("unavailable"))
	})
	fmt.Println(err != nil)
	// Output:
	// attempt 1 failed: unavailable ; next in 50ms
	// attempt 2 failed: unavailable ; next in 100ms
	// gave up after 3 attempts: rebound: attempts exhausted
	// true
}

// An AdaptiveRateLimit paces attempts to the rate a server accepts:
// Reserve before an attempt, Observe its answer. Until the server first
// throttles, it does not limit; from then on the attempts it admits are
// spaced by its rate. (The front doors' WithAdaptiveRateLimit do this
// for every attempt.)
func ExampleNewAdaptiveRateLimit() {
	limit, err := rebound.NewAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{MinRate: 10})
	if err != nil {
		log.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	send := func(throttled bool) {
		r := limit.Reserve(now)
		if r.Answer() != nil {
			// Slow start: wait for an answer to come back. Here every
			// answer comes at once.
			<-r.Answer()
		}
		now = now.Add(r.Delay(now))
		limit.Observe(r, now, rebound.RateFeedback{SlowDown: throttled})
	}
	for range 8 {
		send(false)
	}
	fmt.Println("before a throttle:", limit.Rate(), "requests/s")
	for range 4 {
		send(true)
	}
	fmt.Printf("after throttles: %.0f requests/s (MinRate)\n", limit.Rate())
	start := now
	for range 3 {
		r := limit.Reserve(now)
		fmt.Println("next attempt at +" + r.Time().Sub(start).String())
	}
	// Output:
	// before a throttle: 0 requests/s
	// after throttles: 10 requests/s (MinRate)
	// next attempt at +100ms
	// next attempt at +200ms
	// next attempt at +300ms
}
