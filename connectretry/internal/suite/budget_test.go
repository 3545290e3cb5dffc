package suite

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/serviceconfig"
)

// TestRatioBudget: against a server that always fails, a ratio budget of
// 0.5 beside the service config's throttle lets half as many retries as
// calls through; the throttle, still more than half full, is not what
// stops them.
func TestRatioBudget(t *testing.T) {
	eachMajor(t, protocol{}, func(t *testing.T, e env) {
		s := e.start(t, failFirst(1<<30, serviceconfig.Unavailable))
		ratio, err := rebound.NewRatioBudget(rebound.RatioBudgetConfig{Ratio: 0.5, TTL: time.Minute, Clock: clocktest.New()})
		if err != nil {
			t.Fatal(err)
		}
		cfg := retryConfig(t, 3, `"UNAVAILABLE"`, `,"retryThrottling":{"maxTokens":1000,"tokenRatio":1}`)
		c, _ := e.dialAuto(t, s, cfg, withBudget(ratio), withServerName(uniqueName(t)))
		const calls = 20
		throttled := 0
		for range calls {
			_, err := c.unary(context.Background(), "x", nil)
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
	})
}

// See grpcretry's TestAdaptiveThrottle: two attempts reach a server that
// refuses everything, then every call fails locally, streams included.
func TestAdaptiveThrottle(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		s := e.start(t, handlers{unary: func(*call) (string, error) {
			return "", fail(serviceconfig.Unavailable, "down")
		}})
		c, _ := e.dialAuto(t, s, retryConfig(t, 3, `"UNAVAILABLE"`, ""),
			withServerName(fmt.Sprint("adaptive-", uniqueName(t))),
			withAdaptiveThrottle(rebound.AdaptiveThrottleConfig{}))
		for i := range 10 {
			_, err := c.unary(context.Background(), "x", nil)
			if e.codeOf(err) != serviceconfig.Unavailable || !errors.Is(err, rebound.ErrThrottled) {
				t.Fatalf("call %d: %v, want unavailable ending with ErrThrottled", i, err)
			}
		}
		if n := s.count(unary); n != 2 {
			t.Fatalf("server saw %d attempts, want 2", n)
		}
		for _, procedure := range []string{serverStream, clientStream} {
			st, err := c.open(context.Background(), procedure, "x", nil)
			if err == nil {
				if procedure == clientStream {
					err = st.Send("x")
				}
				if err == nil {
					_, err = receiveAll(t, st)
				}
			}
			if !errors.Is(err, rebound.ErrRejectedLocally) || e.remote(err) {
				t.Fatalf("%s: %v, want a local rejection", procedure, err)
			}
			if n := s.count(procedure); n != 0 {
				t.Fatalf("server saw %d calls of %s, want 0", n, procedure)
			}
		}
	})
}
