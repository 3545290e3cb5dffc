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

// flakyService returns a function that stands for a call to a service:
// it fails `failures` times with an error that may be retried, then
// succeeds.
func flakyService(failures int) func(context.Context) error {
	calls := 0
	return func(context.Context) error {
		calls++
		if calls <= failures {
			return rebound.Retryable(errors.New("connection reset"))
		}
		return nil
	}
}

func ExampleDo() {
	ctx, callService := context.Background(), flakyService(2)
	throttle, err := rebound.NewThrottle(rebound.ThrottleConfig{MaxTokens: 10, TokenRatio: 0.1})
	if err != nil {
		log.Fatal(err)
	}

	policy, err := rebound.NewRetrier(rebound.RetryPolicy{
		MaxAttempts: 4,
		Backoff:     rebound.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond, Multiplier: 2},
	}, rebound.WithBudget(throttle)) // an A6 Throttle or a TokenBucket, shared across calls
	if err != nil {
		log.Fatal(err)
	}
	attempts := 0
	err = rebound.Do(ctx, policy, func(ctx context.Context) error {
		attempts++
		return callService(ctx) // mark retryable failures with rebound.Retryable(err)
	})
	fmt.Println(err, "after", attempts, "attempts")
	// Output: <nil> after 3 attempts
}

func ExampleNewStandard() {
	// The fake clock records the delays instead of sleeping them.
	clock := clocktest.NewAuto()
	standard, err := rebound.NewStandard(rebound.WithMaxAttempts(3), rebound.WithClock(clock), rebound.WithRandom(clocktest.NewRand(0.5)))
	if err != nil {
		panic(err)
	}
	err = rebound.Do(context.Background(), standard, func(ctx context.Context) error {
		// A throttling error with the server's hint of 5s.
		return rebound.RetryAfter(errors.New("429 too many requests"), 5*time.Second)
	})
	fmt.Println(err)
	fmt.Println(errors.Is(err, rebound.ErrAttemptsExhausted), clock.Sleeps())
	// Output:
	// rebound: gave up after 3 attempts (attempts exhausted): 429 too many requests
	// true [5s 5s]
}

func ExampleThrottle() {
	throttle, err := rebound.NewThrottle(rebound.ThrottleConfig{MaxTokens: 4, TokenRatio: 0.5})
	if err != nil {
		panic(err)
	}
	for range 2 {
		throttle.RecordFailure()
	}
	fmt.Println(throttle, throttle.Allow(false))
	throttle.RecordSuccess()
	fmt.Println(throttle, throttle.Allow(false))
	// Output:
	// 2/4 (threshold 2) false
	// 2.5/4 (threshold 2) true
}

func ExampleHedge() {
	hedger, err := rebound.NewHedger(rebound.HedgingPolicy{MaxAttempts: 3, HedgingDelay: 10 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	winner, err := rebound.Hedge(context.Background(), hedger, func(ctx context.Context, attempt int) (string, error) {
		if attempt == 1 {
			<-ctx.Done() // a straggler: it waits until the hedge wins
			return "", ctx.Err()
		}
		return fmt.Sprintf("attempt %d", attempt), nil
	})
	fmt.Println(winner, err)
	// Output: attempt 2 <nil>
}
