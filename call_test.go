package rebound_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/clocktest"
)

// recorder records what a Call's hooks are told.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, s)
}

func (r *recorder) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

func hooks[T any](r *recorder) *rebound.Call[T] {
	return &rebound.Call[T]{
		OnRetry: func(attempt int, err error, delay time.Duration) {
			r.add(fmt.Sprintf("retrying after %d: %v in %v", attempt, err, delay))
		},
		OnHedge:     func(attempt int) { r.add(fmt.Sprintf("hedge %d", attempt)) },
		OnThrottled: func(attempt int) { r.add(fmt.Sprintf("throttled %d", attempt)) },
		OnGiveUp: func(attempts int, err, reason error) {
			r.add(fmt.Sprintf("gave up after %d: %v (%v)", attempts, err, reason))
		},
	}
}

func TestCallHooksRetry(t *testing.T) {
	p, _ := newPolicy(t, 3)
	rec := &recorder{}
	op, _ := script(retryable(errFlaky), retryable(errFlaky), retryable(errFlaky))
	_, _ = hooks[struct{}](rec).Retry(context.Background(), p, func(ctx context.Context) (struct{}, error) { return struct{}{}, op(ctx) })
	want := []string{
		"retrying after 1: flaky in 50ms",
		"retrying after 2: flaky in 100ms",
		"gave up after 3: flaky (rebound: attempts exhausted)",
	}
	if got := rec.get(); !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
}

func TestCallHooksHedge(t *testing.T) {
	h, _ := rebound.NewHedger(rebound.HedgingPolicy{MaxAttempts: 3})
	rec := &recorder{}
	_, err := hooks[int](rec).Hedge(context.Background(), h, func(ctx context.Context, n int) (int, error) { return 0, retryable(errFlaky) })
	if !errors.Is(err, rebound.ErrAttemptsExhausted) {
		t.Fatal(err)
	}
	want := []string{"hedge 2", "hedge 3", "gave up after 3: flaky (rebound: attempts exhausted)"}
	if got := rec.get(); !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
}

// A hedge the budget refuses is told to OnThrottled; the attempt already
// sent may still win, and then nothing gives up.
func TestCallHooksThrottledHedge(t *testing.T) {
	th, _ := rebound.NewThrottle(rebound.ThrottleConfig{MaxTokens: 2, TokenRatio: 1})
	th.RecordFailure() // 1 <= threshold 1: hedges refused.
	clk := clocktest.New()
	h, _ := rebound.NewHedger(rebound.HedgingPolicy{MaxAttempts: 3, HedgingDelay: hedgeDelay}, rebound.WithBudget(th), rebound.WithClock(clk))
	rec := &recorder{}
	refused := make(chan struct{})
	go func() {
		if clk.WaitPending(1) {
			clk.Advance(hedgeDelay)
			if clk.WaitPending(0) {
				close(refused)
			}
		}
	}()
	v, err := hooks[int](rec).Hedge(context.Background(), h, func(ctx context.Context, n int) (int, error) {
		<-refused
		return n, nil
	})
	if err != nil || v != 1 {
		t.Fatalf("Hedge = %d, %v, want attempt 1's success", v, err)
	}
	if got := rec.get(); !slices.Equal(got, []string{"throttled 2"}) {
		t.Fatalf("events %q, want [throttled 2]", got)
	}
}
