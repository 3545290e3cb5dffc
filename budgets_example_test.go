package rebound_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/rebound-go/rebound"
)

// Budgets that follow the traffic, as meshes keep them: retries at most
// 10% of the calls of the last 10 seconds (Finagle, Linkerd), and at most
// 20% of the calls in flight, or 3 (Envoy). Both must allow a retry, and
// one refused by either costs the other nothing. grpcretry and
// connectretry take such a budget with WithBudget, httpretry per host with
// its own WithBudget.
func ExampleAllBudgets() {
	ratio, err := rebound.NewRatioBudget(rebound.RatioBudgetConfig{Ratio: 0.1, TTL: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	inFlight, err := rebound.NewConcurrencyBudget(rebound.DefaultConcurrencyBudget())
	if err != nil {
		log.Fatal(err)
	}
	policy, err := rebound.NewRetrier(rebound.RetryPolicy{
		MaxAttempts: 3,
		Backoff:     rebound.Backoff{Initial: time.Millisecond, Max: time.Millisecond, Multiplier: 2},
	}, rebound.WithBudget(rebound.AllBudgets(ratio, inFlight)))
	if err != nil {
		log.Fatal(err)
	}

	attempts := 0
	for range 50 { // a service that is down
		_ = rebound.Do(context.Background(), policy, func(context.Context) error {
			attempts++
			return rebound.Retryable(errors.New("unavailable"))
		})
	}
	calls, retries := ratio.Counts()
	fmt.Println(calls, "calls,", retries, "retries,", attempts, "attempts")
	// Output: 50 calls, 5 retries, 55 attempts
}

// With RefundRetryCost a retry that succeeds gets its cost back, as in
// the AWS SDKs: a service whose first attempts often fail, but whose
// retries succeed, does not drain the bucket.
func ExampleTokenBucketConfig() {
	for _, refund := range []bool{false, true} {
		cfg := rebound.DefaultTokenBucket() // 500 tokens, a retry costs 5, a success gives back 1
		cfg.RefundRetryCost = refund
		bucket, err := rebound.NewTokenBucket(cfg)
		if err != nil {
			log.Fatal(err)
		}
		policy, err := rebound.NewStandard(rebound.WithBudget(bucket),
			rebound.WithBackoff(rebound.Backoff{Initial: time.Millisecond, Max: time.Millisecond, Multiplier: 2}))
		if err != nil {
			log.Fatal(err)
		}
		for range 100 {
			first := true
			_ = rebound.Do(context.Background(), policy, func(context.Context) error {
				if first {
					first = false
					return rebound.Retryable(errors.New("cold cache"))
				}
				return nil
			})
		}
		fmt.Println("refund", refund, "tokens", bucket.Tokens())
	}
	// Output:
	// refund false tokens 100
	// refund true tokens 500
}
