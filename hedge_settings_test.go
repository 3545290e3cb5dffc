package rebound_test

import (
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/clocktest"
)

func TestHedgerSettings(t *testing.T) {
	th, err := rebound.NewThrottle(rebound.ThrottleConfig{MaxTokens: 10, TokenRatio: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktest.New()
	h, err := rebound.NewHedger(rebound.HedgePolicy{MaxAttempts: 3, Delay: time.Second}, rebound.WithBudget(th), rebound.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	if h.Delay() != time.Second || h.Budget() != rebound.Budget(th) || h.Clock() != rebound.Clock(clk) {
		t.Fatalf("Delay %v, Budget %v, Clock %v; want 1s and the given budget and clock", h.Delay(), h.Budget(), h.Clock())
	}

	d := 3 * time.Millisecond
	h, err = rebound.NewHedger(rebound.HedgePolicy{MaxAttempts: 2, Delay: time.Hour, DelayFunc: func() time.Duration { d -= 2 * time.Millisecond; return d }})
	if err != nil {
		t.Fatal(err)
	}
	if got := h.Delay(); got != time.Millisecond {
		t.Fatalf("first Delay = %v, want DelayFunc's 1ms", got)
	}
	if got := h.Delay(); got != 0 {
		t.Fatalf("second Delay = %v, want a negative DelayFunc value clamped to 0", got)
	}
	if h.Budget() != nil || h.Clock() == nil {
		t.Fatalf("defaults: Budget %v, Clock %v; want nil and the real clock", h.Budget(), h.Clock())
	}
}
