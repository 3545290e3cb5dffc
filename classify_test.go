package rebound_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/clocktest"
)

// TestClassAttempts: each class counts its own failures, and the first
// class to reach its limit ends the call.
func TestClassAttempts(t *testing.T) {
	// Failures alternate between class a (limit 3) and b (limit 10).
	seq := []rebound.RetryInfo{
		{Safety: rebound.SafetyYes, Class: "a", ClassAttempts: 3},
		{Safety: rebound.SafetyYes, Class: "b", ClassAttempts: 10},
	}
	for _, mk := range []func() (rebound.Strategy, error){
		func() (rebound.Strategy, error) {
			return rebound.NewRetrier(rebound.RetryPolicy{MaxAttempts: 10, Backoff: rebound.DefaultBackoff()}, rebound.WithClock(clocktest.NewAuto()))
		},
		func() (rebound.Strategy, error) {
			return rebound.NewStandard(rebound.WithMaxAttempts(10), rebound.WithClock(clocktest.NewAuto()))
		},
	} {
		s, _ := mk()
		n := 0
		err := rebound.Do(context.Background(), s, func(context.Context) error {
			n++
			return rebound.Mark(errors.New("fails"), seq[(n-1)%2])
		})
		// a fails on attempts 1, 3, 5: the fifth attempt is the last.
		if n != 5 || !errors.Is(err, rebound.ErrAttemptsExhausted) {
			t.Errorf("%T: %d attempts, err %v; want 5, attempts exhausted", s, n, err)
		}
	}
}

// TestOwnBackoff: a failure's own Backoff (a throttling error's harder
// one) sets the wait before its retry under both strategies, and one that
// is not valid is ignored, so that a classifier's mistake cannot turn the
// wait into none.
func TestOwnBackoff(t *testing.T) {
	hard := rebound.Backoff{Initial: 8 * time.Second, Max: time.Minute, Multiplier: 2}
	for _, tc := range []struct {
		name string
		own  rebound.Backoff
		want time.Duration // the wait before the retry, with jitter 0.5
	}{
		{"valid", hard, 4 * time.Second},
		{"no Max", rebound.Backoff{Initial: 8 * time.Second, Multiplier: 2}, 500 * time.Millisecond},
		{"NaN multiplier, Proportional 3", rebound.Backoff{Initial: 8 * time.Second, Max: time.Minute, Multiplier: math.NaN(), Proportional: 3}, 500 * time.Millisecond},
	} {
		for _, mk := range []func(clk rebound.Clock) (rebound.Strategy, error){
			func(clk rebound.Clock) (rebound.Strategy, error) {
				return rebound.NewRetrier(rebound.RetryPolicy{MaxAttempts: 2, Backoff: rebound.Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 2}},
					rebound.WithClock(clk), rebound.WithRandom(clocktest.NewRand(0.5)))
			},
			func(clk rebound.Clock) (rebound.Strategy, error) {
				return rebound.NewStandard(rebound.WithMaxAttempts(2), rebound.WithClock(clk), rebound.WithRandom(clocktest.NewRand(0.5)),
					rebound.WithBackoff(rebound.Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 2}))
			},
		} {
			clk := clocktest.NewAuto()
			s, err := mk(clk)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			err = rebound.Do(context.Background(), s, func(context.Context) error {
				if n++; n == 1 {
					return rebound.Mark(errors.New("throttled"), rebound.RetryInfo{Safety: rebound.SafetyYes, SlowDown: true, Backoff: tc.own})
				}
				return nil
			})
			if err != nil || n != 2 || !slices.Equal(clk.Sleeps(), []time.Duration{tc.want}) {
				t.Errorf("%s, %T: %d attempts, err %v, waits %v; want 2, nil, [%v]", tc.name, s, n, err, clk.Sleeps(), tc.want)
			}
		}
	}
}
