package rebound_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/clocktest"
)

// TestMinDelay: a server's MinDelay is a floor under the backoff of both
// strategies, pushback still wins under the Retrier, and Stop ends
// retrying with its reason.
func TestMinDelay(t *testing.T) {
	b := rebound.Backoff{Initial: time.Second, Max: 10 * time.Second, Multiplier: 2}
	for _, tc := range []struct {
		name   string
		info   rebound.RetryInfo
		sleeps []time.Duration // of the Retrier and the Standard strategy, at jitter 0.5
		reason error
	}{
		{"below the backoff", rebound.RetryInfo{MinDelay: 100 * time.Millisecond}, []time.Duration{500 * time.Millisecond, time.Second}, nil},
		{"above the backoff", rebound.RetryInfo{MinDelay: 3 * time.Second}, []time.Duration{3 * time.Second, 3 * time.Second}, nil},
		// The Retrier waits exactly the pushback, Standard at least the
		// retry-after: 500ms, then 1s.
		{"pushback wins", rebound.RetryInfo{MinDelay: 3 * time.Second, HasRetryAfter: true, RetryAfter: 200 * time.Millisecond},
			nil, nil},
		{"stop", rebound.RetryInfo{Stop: rebound.ErrRetryDelayTooLong}, nil, rebound.ErrRetryDelayTooLong},
	} {
		info := tc.info
		info.Safety = rebound.SafetyYes
		for _, mk := range []func(...rebound.Option) (rebound.Strategy, error){
			func(o ...rebound.Option) (rebound.Strategy, error) {
				return rebound.NewRetrier(rebound.RetryPolicy{MaxAttempts: 3, Backoff: b}, o...)
			},
			func(o ...rebound.Option) (rebound.Strategy, error) {
				return rebound.NewStandard(append(o, rebound.WithMaxAttempts(3), rebound.WithBackoff(b))...)
			},
		} {
			clk := clocktest.NewAuto()
			s, err := mk(rebound.WithClock(clk), rebound.WithRandom(clocktest.NewRand(0.5)), rebound.WithBudget(nil))
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			err = rebound.Do(context.Background(), s, func(context.Context) error {
				n++
				return rebound.Mark(errors.New("fails"), info)
			})
			want := tc.reason
			if want == nil {
				want = rebound.ErrAttemptsExhausted
			}
			if !errors.Is(err, want) {
				t.Errorf("%s, %T: err %v, want %v", tc.name, s, err, want)
			}
			sleeps := tc.sleeps
			if tc.name == "pushback wins" {
				sleeps = []time.Duration{200 * time.Millisecond, 200 * time.Millisecond}
				if _, ok := s.(*rebound.Standard); ok {
					sleeps = []time.Duration{500 * time.Millisecond, time.Second}
				}
			}
			if got := clk.Sleeps(); !slices.Equal(got, sleeps) {
				t.Errorf("%s, %T: waited %v, want %v", tc.name, s, got, sleeps)
			}
		}
	}
}

// TestHedgeMinDelay: a non-fatal failure with MinDelay sends the next hedge
// after MinDelay rather than at once; Stop ends hedging with its reason.
func TestHedgeMinDelay(t *testing.T) {
	clk := clocktest.New()
	h, _ := rebound.NewHedger(rebound.HedgingPolicy{MaxAttempts: 3, HedgingDelay: time.Hour}, rebound.WithClock(clk))
	done := make(chan error)
	go func() {
		_, err := rebound.Hedge(context.Background(), h, func(ctx context.Context, n int) (int, error) {
			if n == 1 {
				return 0, rebound.Mark(errors.New("busy"), rebound.RetryInfo{Safety: rebound.SafetyYes, MinDelay: 2 * time.Second})
			}
			return n, nil
		})
		done <- err
	}()
	if !clk.WaitCreated(2) || !clk.WaitPending(1) {
		t.Fatal("no timer for the next hedge")
	}
	clk.Advance(2 * time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got, want := clk.Sleeps(), []time.Duration{time.Hour, 2 * time.Second, time.Hour}; !slices.Equal(got, want) {
		t.Fatalf("timers %v, want %v", got, want)
	}

	h2, _ := rebound.NewHedger(rebound.HedgingPolicy{MaxAttempts: 3, HedgingDelay: time.Hour}, rebound.WithClock(clocktest.New()))
	calls := 0
	_, err := rebound.Hedge(context.Background(), h2, func(ctx context.Context, n int) (int, error) {
		calls++
		return 0, rebound.Mark(errors.New("busy"), rebound.RetryInfo{Safety: rebound.SafetyYes, Stop: rebound.ErrRetryDelayTooLong})
	})
	if !errors.Is(err, rebound.ErrRetryDelayTooLong) || calls != 1 {
		t.Fatalf("err %v after %d attempts, want ErrRetryDelayTooLong after 1", err, calls)
	}
}
