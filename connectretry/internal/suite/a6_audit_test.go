package suite

// Tests of A6 rules that an outside audit found broken (issue 12).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/serviceconfig"
)

// A6 "Exponential Backoff": maxBackoff caps the first retry's wait too.
func TestBackoffCappedBelowInitial(t *testing.T) {
	eachMajor(t, protocol{}, func(t *testing.T, e env) {
		srv := e.start(t, failFirst(100, serviceconfig.Unavailable))
		cfg := parse(t, fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"retryPolicy":{
			"maxAttempts":3,"initialBackoff":"2s","maxBackoff":"0.05s","backoffMultiplier":2,
			"retryableStatusCodes":["UNAVAILABLE"]}}]}`, service))
		clk := clocktest.NewAuto()
		c, _ := e.dialWith(t, srv, cfg, withClock(clk), withRandom(clocktest.NewRand(0.99)))
		_, err := c.unary(context.Background(), "x", nil)
		if !errors.Is(err, rebound.ErrAttemptsExhausted) || e.codeOf(err) != serviceconfig.Unavailable {
			t.Fatalf("err = %v, want unavailable after attempts exhausted", err)
		}
		if got := srv.count(unary); got != 3 {
			t.Fatalf("server saw %d attempts, want 3", got)
		}
		want := []time.Duration{49500 * time.Microsecond, 49500 * time.Microsecond}
		if got := clk.Sleeps(); !slices.Equal(got, want) {
			t.Fatalf("backoffs = %v, want %v (0.99 of maxBackoff)", got, want)
		}
	})
}

// No config that Parse accepts may fail calls.
func TestThrottleFromAnyParsedRatio(t *testing.T) {
	for _, ratio := range []string{"0.0001", "1e13", "1e300"} {
		t.Run(ratio, func(t *testing.T) {
			eachMajor(t, protocol{}, func(t *testing.T, e env) {
				srv := e.start(t, failFirst(1, serviceconfig.Unavailable))
				cfg := retryConfig(t, 3, `"UNAVAILABLE"`, `,"retryThrottling":{"maxTokens":10,"tokenRatio":`+ratio+`}`)
				c, _ := e.dialAuto(t, srv, cfg, withServerName(uniqueName(t)))
				if _, err := c.unary(context.Background(), "x", nil); err != nil {
					t.Fatalf("call failed: %v", err)
				}
				if got := srv.count(unary); got != 2 {
					t.Fatalf("server saw %d attempts, want 2", got)
				}
			})
		})
	}
}

// A call cancelled while it waits between attempts ends with CANCELED, not
// the last attempt's code; its error still counts the attempts.
func TestCancelledDuringBackoff(t *testing.T) {
	cfg := retryConfig(t, 4, `"UNAVAILABLE"`, "")
	for _, kind := range []string{"unary", "server stream", "client stream"} {
		t.Run(kind, func(t *testing.T) {
			each(t, func(t *testing.T, e env) {
				h := clientStreamFailFirst(100, serviceconfig.Unavailable)
				h.unary = failFirst(100, serviceconfig.Unavailable).unary
				h.serverStream = streamFailFirst(100, serviceconfig.Unavailable).serverStream
				srv := e.start(t, h)
				c, clk := e.dialManual(t, srv, cfg)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				go func() {
					if clk.WaitPending(1) { // the first backoff has started
						cancel()
					}
				}()
				var err error
				switch kind {
				case "unary":
					_, err = c.unary(ctx, "x", nil)
				default:
					procedure := serverStream
					if kind == "client stream" {
						procedure = clientStream
					}
					var st stream
					if st, err = c.open(ctx, procedure, "m", nil); err == nil {
						if procedure == clientStream {
							_ = st.Send("m")
							_ = st.CloseSend()
						}
						_, err = receiveAll(t, st)
					}
				}
				if e.codeOf(err) != serviceconfig.Cancelled || !errors.Is(err, context.Canceled) {
					t.Fatalf("err = %v, want canceled with context.Canceled", err)
				}
				var re *rebound.Error
				if !errors.As(err, &re) || re.Attempts != 1 {
					t.Fatalf("err = %#v, want a *rebound.Error after 1 attempt", err)
				}
			})
		})
	}
}

// A6 "Throttling": every outgoing RPC of a server name affects its
// token_count, whatever its method: successes of methods without a policy
// refill the throttle; their failures take a token only when pushback said
// not to retry.
func TestThrottleCountsCallsWithoutPolicy(t *testing.T) {
	for _, unpoliced := range []string{"unary", "server stream"} {
		t.Run(unpoliced, func(t *testing.T) {
			eachMajor(t, protocol{}, func(t *testing.T, e env) {
				var failing, pushback atomic.Bool // how the method without a policy answers
				answer := func() error {
					if !failing.Load() {
						return nil
					}
					f := fail(serviceconfig.Unavailable, "down")
					if pushback.Load() {
						f.with("grpc-retry-pushback-ms", "-1")
					}
					return f
				}
				srv := e.start(t, handlers{
					unary: func(*call) (string, error) {
						if unpoliced != "unary" {
							return "", fail(serviceconfig.Unavailable, "down")
						}
						if err := answer(); err != nil {
							return "", err
						}
						return "ok", nil
					},
					serverStream: func(_ *call, send func(string) error) error {
						if unpoliced != "server stream" {
							return fail(serviceconfig.Unavailable, "down")
						}
						if err := answer(); err != nil {
							return err
						}
						return send("ok")
					},
				})
				method, policed := "ServerStream", serverStream
				if unpoliced != "unary" {
					method, policed = "Unary", unary
				}
				cfg := parse(t, fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q,"method":%q}],"retryPolicy":{
					"maxAttempts":2,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,
					"retryableStatusCodes":["UNAVAILABLE"]}}],
					"retryThrottling":{"maxTokens":10,"tokenRatio":1}}`, service, method))
				c, _ := e.dialAuto(t, srv, cfg, withServerName(uniqueName(t)))
				stream := func() {
					st, err := c.open(context.Background(), serverStream, "m", nil)
					if err == nil {
						_, _ = receiveAll(t, st)
					}
				}
				callPoliced := func() int { // the attempts the server saw
					before := srv.count(policed)
					if policed == unary {
						_, _ = c.unary(context.Background(), "x", nil)
					} else {
						stream()
					}
					return srv.count(policed) - before
				}
				callUnpoliced := func() {
					if unpoliced == "unary" {
						_, _ = c.unary(context.Background(), "x", nil)
					} else {
						stream()
					}
				}
				for _, want := range []int{2, 2, 1} { // 10 tokens down to 5
					if got := callPoliced(); got != want {
						t.Fatalf("draining the throttle: a call made %d attempts, want %d", got, want)
					}
				}
				callUnpoliced() // each success adds 1: 7 tokens
				callUnpoliced()
				if got := callPoliced(); got != 2 {
					t.Fatalf("after successes without a policy, a call made %d attempts, want 2 (retried)", got)
				}
				for range 5 { // 5 tokens, refilled to 10
					callUnpoliced()
				}
				failing.Store(true)
				for range 5 {
					callUnpoliced() // no pushback: not a failure for A6
				}
				if got := callPoliced(); got != 2 {
					t.Fatalf("after failures without pushback, a call made %d attempts, want 2", got)
				}
				pushback.Store(true) // 8 tokens: three stops leave 5
				for range 3 {
					callUnpoliced()
				}
				if got := callPoliced(); got != 1 {
					t.Fatalf("after pushback stops, a call made %d attempts, want 1 (throttled)", got)
				}
			})
		})
	}
}
