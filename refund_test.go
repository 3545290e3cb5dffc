package rebound_test

import (
	"context"
	"errors"
	"testing"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/clocktest"
)

// TestTokenBucketRefund runs calls whose first attempt fails and whose
// retry succeeds through the standard strategy: with RefundRetryCost the
// bucket gets each retry's cost back, without it only SuccessRefund, so
// that it drains.
func TestTokenBucketRefund(t *testing.T) {
	for _, tc := range []struct {
		refund bool
		// tokens after each of four calls
		want []int64
	}{
		{refund: true, want: []int64{10, 10, 10, 10}},
		// 10-5+1, 6-5+1; then 2 < 5: the third call's retry is refused
		// and its first-attempt failure refills nothing.
		{refund: false, want: []int64{6, 2, 2, 2}},
	} {
		b, err := rebound.NewTokenBucket(rebound.TokenBucketConfig{Capacity: 10, RetryCost: 5, TimeoutCost: 10, SuccessRefund: 1, RefundRetryCost: tc.refund})
		if err != nil {
			t.Fatal(err)
		}
		st, err := rebound.NewStandard(rebound.WithBudget(b), rebound.WithClock(clocktest.NewAuto()), rebound.WithRandom(clocktest.NewRand(0)))
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range tc.want {
			n := 0
			err := rebound.Do(context.Background(), st, func(context.Context) error {
				if n++; n == 1 {
					return rebound.Retryable(errors.New("first attempt fails"))
				}
				return nil
			})
			if got := b.Tokens(); got != want {
				t.Fatalf("refund %v, call %d: tokens %d, want %d (err %v)", tc.refund, i+1, got, want, err)
			}
		}
	}
}

// TestTokenBucketRefundTimeout: a retry of a timeout gets TimeoutCost back;
// a first attempt's success adds SuccessRefund only.
func TestTokenBucketRefundTimeout(t *testing.T) {
	b, _ := rebound.NewTokenBucket(rebound.TokenBucketConfig{Capacity: 30, RetryCost: 5, TimeoutCost: 10, SuccessRefund: 1, RefundRetryCost: true})
	if !b.Allow(true) || b.Tokens() != 20 {
		t.Fatalf("after a timeout retry: %d tokens, want 20", b.Tokens())
	}
	b.RecordRetrySuccess(true)
	if b.Tokens() != 30 {
		t.Fatalf("after its success: %d tokens, want 30", b.Tokens())
	}
	b.Allow(false)
	b.Allow(false)
	b.RecordSuccess()
	if b.Tokens() != 21 {
		t.Fatalf("two retries then a first attempt's success: %d tokens, want 21", b.Tokens())
	}
	b.RecordRetrySuccess(false)
	if b.Tokens() != 26 {
		t.Fatalf("then a retry's success: %d tokens, want 26", b.Tokens())
	}
}

// TestHedgeRefund: a hedge that wins gets its cost back.
func TestHedgeRefund(t *testing.T) {
	b, _ := rebound.NewTokenBucket(rebound.TokenBucketConfig{Capacity: 10, RetryCost: 5, TimeoutCost: 10, SuccessRefund: 1, RefundRetryCost: true})
	h, err := rebound.NewHedger(rebound.HedgingPolicy{MaxAttempts: 2}, rebound.WithBudget(b))
	if err != nil {
		t.Fatal(err)
	}
	_, err = rebound.Hedge(context.Background(), h, func(ctx context.Context, n int) (int, error) {
		if n == 1 {
			<-ctx.Done() // the first attempt hangs until the hedge wins
			return 0, ctx.Err()
		}
		return n, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Tokens(); got != 10 {
		t.Fatalf("tokens %d after a winning hedge, want 10", got)
	}
}
