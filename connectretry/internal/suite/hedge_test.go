package suite

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/serviceconfig"
)

func TestHedgeFirstSuccessWins(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		started := make(chan struct{})
		canceled := make(chan struct{})
		srv := e.start(t, handlers{unary: func(in *call) (string, error) {
			if in.n == 1 {
				// A straggler: it answers only once the hedge has won.
				close(started)
				<-in.ctx.Done()
				close(canceled)
				return "", fail(serviceconfig.Cancelled, "%v", in.ctx.Err())
			}
			return fmt.Sprint("hedge ", in.n), nil
		}})
		c, clk := e.dialManual(t, srv, hedgeConfig(t, 3, "0.1s", `"UNAVAILABLE"`, ""))
		type answer struct {
			r   result
			err error
			n   int
		}
		done := make(chan answer, 1)
		go func() {
			var n int
			r, err := c.unary(e.countAttempts(context.Background(), &n), "x", http.Header{"X-Trace": {"t1"}})
			done <- answer{r, err, n}
		}()
		<-started
		if !clk.WaitPending(1) {
			t.Fatal("no hedge was scheduled")
		}
		clk.Advance(100 * time.Millisecond)
		a := <-done
		if a.err != nil {
			t.Fatal(a.err)
		}
		if a.r.value != "hedge 2" {
			t.Fatalf("got %q, want the hedge's answer", a.r.value)
		}
		select {
		case <-canceled:
		case <-time.After(10 * time.Second):
			t.Fatal("the losing attempt was not cancelled")
		}
		if got := srv.previous(unary); !slices.Equal(got, []int{-1, 1}) {
			t.Fatalf("server saw grpc-previous-rpc-attempts %v, want [absent 1]", got)
		}
		for i, at := range srv.seen(unary) {
			if at.payload != "x" || at.header.Get("X-Trace") != "t1" {
				t.Fatalf("attempt %d carried %q with X-Trace %q", i+1, at.payload, at.header.Get("X-Trace"))
			}
		}
		if a.n != 2 {
			t.Fatalf("CountAttempts reported %d, want 2", a.n)
		}
	})
}

func TestHedgeNonFatalSendsNextAtOnce(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		srv := e.start(t, failFirst(1000, serviceconfig.Unavailable))
		// The clock never moves: every hedge after the first is sent
		// because the one before failed with a non-fatal code.
		c, _ := e.dialManual(t, srv, hedgeConfig(t, 3, "10s", `"UNAVAILABLE"`, ""))
		_, err := c.unary(context.Background(), "x", nil)
		var re *rebound.Error
		if !errors.As(err, &re) || re.Attempts != 3 || !errors.Is(err, rebound.ErrAttemptsExhausted) || e.codeOf(err) != serviceconfig.Unavailable {
			t.Fatalf("err %v, want unavailable after 3 attempts, attempts exhausted", err)
		}
		if srv.count(unary) != 3 {
			t.Fatalf("server saw %d attempts, want 3", srv.count(unary))
		}
		checkLastAttempt(t, e, err, "attempt 3 fails")
	})
}

func TestHedgeFatalCodeStops(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		srv := e.start(t, failFirst(1000, serviceconfig.InvalidArgument))
		c, _ := e.dialManual(t, srv, hedgeConfig(t, 3, "10s", `"UNAVAILABLE"`, ""))
		_, err := c.unary(context.Background(), "x", nil)
		if e.codeOf(err) != serviceconfig.InvalidArgument || !errors.Is(err, rebound.ErrNotRetryable) || srv.count(unary) != 1 {
			t.Fatalf("err %v after %d attempts, want invalid_argument, not retryable, after 1", err, srv.count(unary))
		}
	})
}

func TestHedgePushback(t *testing.T) {
	t.Run("stop", func(t *testing.T) {
		each(t, func(t *testing.T, e env) {
			srv := e.start(t, pushbackHandler([]string{"-1"}))
			c, _ := e.dialManual(t, srv, hedgeConfig(t, 3, "10s", `"UNAVAILABLE"`, ""))
			_, err := c.unary(context.Background(), "x", nil)
			if !errors.Is(err, rebound.ErrPushback) || srv.count(unary) != 1 {
				t.Fatalf("err %v after %d attempts, want pushback after 1", err, srv.count(unary))
			}
		})
	})
	t.Run("delay", func(t *testing.T) {
		each(t, func(t *testing.T, e env) {
			srv := e.start(t, pushbackHandler([]string{"250"}))
			c, clk := e.dialManual(t, srv, hedgeConfig(t, 2, "10s", `"UNAVAILABLE"`, ""))
			done := make(chan error, 1)
			go func() {
				_, err := c.unary(context.Background(), "x", nil)
				done <- err
			}()
			// The pushback replaces the 10s hedging delay by 250ms.
			if !clk.WaitCreated(2) {
				t.Fatal("no hedge was scheduled after the pushback")
			}
			if got := clk.Sleeps(); !slices.Equal(got, []time.Duration{10 * time.Second, 250 * time.Millisecond}) {
				t.Fatalf("timers %v, want [10s 250ms]", got)
			}
			if srv.count(unary) != 1 {
				t.Fatalf("%d attempts before the pushback delay, want 1", srv.count(unary))
			}
			clk.Advance(250 * time.Millisecond)
			if err := <-done; !errors.Is(err, rebound.ErrAttemptsExhausted) || srv.count(unary) != 2 {
				t.Fatalf("err %v after %d attempts, want exhausted after 2", err, srv.count(unary))
			}
		})
	})
}

func TestHedgeThrottled(t *testing.T) {
	eachMajor(t, protocol{}, func(t *testing.T, e env) {
		srv := e.start(t, failFirst(1000, serviceconfig.Unavailable))
		// Tokens 4, threshold 2: the first call's two failures leave 2, at
		// the threshold, so its third hedge and any hedge of the next call
		// are not sent.
		cfg := hedgeConfig(t, 3, "10s", `"UNAVAILABLE"`, `,"retryThrottling":{"maxTokens":4,"tokenRatio":0.1}`)
		c, _ := e.dialManual(t, srv, cfg, withServerName(uniqueName(t)))
		_, err := c.unary(context.Background(), "x", nil)
		if !errors.Is(err, rebound.ErrThrottled) || srv.count(unary) != 2 {
			t.Fatalf("call 1: err %v after %d attempts, want throttled after 2", err, srv.count(unary))
		}
		_, err = c.unary(context.Background(), "x", nil)
		if !errors.Is(err, rebound.ErrThrottled) || srv.count(unary) != 3 {
			t.Fatalf("call 2: err %v, %d attempts in all, want throttled, 3", err, srv.count(unary))
		}
	})
}

// All three attempts at once, each with the caller's request header: the
// response metadata is the winner's. (connectretry for v1 hides connect's
// CallInfo from hedges, which would record them all at once; for v2 each
// attempt has a CallInfo of its own: see TestV2CallInfo.)
func TestHedgeMetadataIsWinners(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		srv := e.start(t, handlers{unary: func(in *call) (string, error) {
			if in.n < 3 {
				return "", fail(serviceconfig.Unavailable, "again")
			}
			in.setHeader("Attempt", fmt.Sprint(in.n))
			return "ok", nil
		}})
		c, _ := e.dialManual(t, srv, hedgeConfig(t, 3, "0s", `"UNAVAILABLE"`, ""))
		r, err := c.unary(context.Background(), "x", http.Header{"X-From-Caller": {"yes"}})
		if err != nil {
			t.Fatal(err)
		}
		if r.meta.Get("Attempt") != "3" {
			t.Fatalf("response header Attempt %q, want 3", r.meta.Get("Attempt"))
		}
		for i, a := range srv.seen(unary) {
			if a.header.Get("X-From-Caller") != "yes" {
				t.Fatalf("attempt %d lacks the caller's request header", i+1)
			}
		}
	})
}
