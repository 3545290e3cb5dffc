package connectretry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/connectretry"
	"github.com/rebound-go/rebound/internal/clocktest"
)

// TestRatioBudget: against a server that always fails, a ratio budget of
// 0.5 beside the service config's throttle lets half as many retries as
// calls through; the throttle, still more than half full, is not what
// stops them.
func TestRatioBudget(t *testing.T) {
	s := startServer(t, failFirst(1<<30, connect.CodeUnavailable), false)
	ratio, err := rebound.NewRatioBudget(rebound.RatioBudgetConfig{Ratio: 0.5, TTL: time.Minute, Clock: clocktest.New()})
	if err != nil {
		t.Fatal(err)
	}
	cfg := retryConfig(t, 3, `"UNAVAILABLE"`, `,"retryThrottling":{"maxTokens":1000,"tokenRatio":1}`)
	c, _ := dial(t, s, connectProtocol, cfg, connectretry.WithBudget(ratio))
	const calls = 20
	throttled := 0
	for range calls {
		_, err := call(context.Background(), c.unary, "x")
		if errors.Is(err, rebound.ErrThrottled) {
			throttled++
		}
	}
	// Call i (from 1) may retry while its retry keeps retries <= i/2:
	// each even call retries once, the odd ones not at all.
	if got := s.count(unary) - calls; got != calls/2 {
		t.Fatalf("server saw %d retries for %d calls, want %d", got, calls, calls/2)
	}
	if throttled == 0 {
		t.Fatal("no call was throttled")
	}
}
