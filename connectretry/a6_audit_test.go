package connectretry_test

// Tests of A6 rules that an outside audit found broken (issue 12), against
// a real connect-go handler.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/connectretry"
	"github.com/rebound-go/rebound/internal/clocktest"
)

// A6 "Exponential Backoff": maxBackoff caps the first retry's wait too.
func TestBackoffCappedBelowInitial(t *testing.T) {
	srv := startServer(t, failFirst(100, connect.CodeUnavailable), true)
	cfg := parse(t, fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"retryPolicy":{
		"maxAttempts":3,"initialBackoff":"2s","maxBackoff":"0.05s","backoffMultiplier":2,
		"retryableStatusCodes":["UNAVAILABLE"]}}]}`, service))
	clk := clocktest.NewAuto()
	i, err := connectretry.New(cfg, connectretry.WithClock(clk), connectretry.WithRandom(clocktest.NewRand(0.99)))
	if err != nil {
		t.Fatal(err)
	}
	c := newClients(srv, protocols[0], i)
	_, err = call(context.Background(), c.unary, "x")
	if !errors.Is(err, rebound.ErrAttemptsExhausted) || connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("err = %v, want unavailable after attempts exhausted", err)
	}
	if got := srv.count(unary); got != 3 {
		t.Fatalf("server saw %d attempts, want 3", got)
	}
	want := []time.Duration{49500 * time.Microsecond, 49500 * time.Microsecond}
	if got := clk.Sleeps(); !slices.Equal(got, want) {
		t.Fatalf("backoffs = %v, want %v (0.99 of maxBackoff)", got, want)
	}
}

// No config that Parse accepts may fail calls.
func TestThrottleFromAnyParsedRatio(t *testing.T) {
	for _, ratio := range []string{"0.0001", "1e13", "1e300"} {
		t.Run(ratio, func(t *testing.T) {
			srv := startServer(t, failFirst(1, connect.CodeUnavailable), true)
			cfg := retryConfig(t, 3, `"UNAVAILABLE"`, `,"retryThrottling":{"maxTokens":10,"tokenRatio":`+ratio+`}`)
			c, _ := dial(t, srv, protocols[0], cfg, connectretry.WithServerName(t.Name()))
			if _, err := call(context.Background(), c.unary, "x"); err != nil {
				t.Fatalf("call failed: %v", err)
			}
			if got := srv.count(unary); got != 2 {
				t.Fatalf("server saw %d attempts, want 2", got)
			}
		})
	}
}

// A call cancelled while it waits between attempts ends with
// connect.CodeCanceled, not the last attempt's code; its error still counts
// the attempts.
func TestCancelledDuringBackoff(t *testing.T) {
	cfg := retryConfig(t, 4, `"UNAVAILABLE"`, "")
	for _, kind := range []string{"unary", "server stream"} {
		t.Run(kind, func(t *testing.T) {
			srv := startServer(t, handlers{
				unary:        failFirst(100, connect.CodeUnavailable).unary,
				serverStream: streamFailFirst(100, connect.CodeUnavailable).serverStream,
			}, true)
			clk := clocktest.New()
			i, err := connectretry.New(cfg, connectretry.WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			c := newClients(srv, protocols[0], i)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() {
				if clk.WaitPending(1) { // the first backoff has started
					cancel()
				}
			}()
			if kind == "unary" {
				_, err = call(ctx, c.unary, "x")
			} else {
				var st *connect.ServerStreamForClient[msg]
				if st, err = c.serverStream.CallServerStream(ctx, connect.NewRequest(wrapperspb.String("m"))); err == nil {
					for st.Receive() {
					}
					err = st.Err()
					st.Close()
				}
			}
			if connect.CodeOf(err) != connect.CodeCanceled || !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want canceled with context.Canceled", err)
			}
			var re *connectretry.Error
			if !errors.As(err, &re) || re.Attempts != 1 {
				t.Fatalf("err = %#v, want a *connectretry.Error after 1 attempt", err)
			}
		})
	}
}
