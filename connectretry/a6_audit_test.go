package connectretry_test

// Tests of A6 rules that an outside audit found broken (issue 12), against
// a real connect-go handler.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
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
			c, _ := dial(t, srv, protocols[0], cfg, connectretry.WithServerName(uniqueName(t)))
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
			var re *rebound.Error
			if !errors.As(err, &re) || re.Attempts != 1 {
				t.Fatalf("err = %#v, want a *rebound.Error after 1 attempt", err)
			}
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
			var fail, pushback atomic.Bool // how the method without a policy answers
			answer := func() *connect.Error {
				if !fail.Load() {
					return nil
				}
				ce := connect.NewError(connect.CodeUnavailable, errors.New("down"))
				if pushback.Load() {
					ce.Meta().Set("grpc-retry-pushback-ms", "-1")
				}
				return ce
			}
			down := connect.NewError(connect.CodeUnavailable, errors.New("down"))
			srv := startServer(t, handlers{
				unary: func(_ context.Context, _ int, req *request) (*connect.Response[msg], error) {
					if unpoliced != "unary" {
						return nil, down
					}
					if ce := answer(); ce != nil {
						return nil, ce
					}
					return connect.NewResponse(wrapperspb.String("ok")), nil
				},
				serverStream: func(_ context.Context, _ int, _ *request, st *connect.ServerStream[msg]) error {
					if unpoliced != "server stream" {
						return down
					}
					if ce := answer(); ce != nil {
						return ce
					}
					return st.Send(wrapperspb.String("ok"))
				},
			}, true)
			method, policed := "ServerStream", serverStream
			if unpoliced != "unary" {
				method, policed = "Unary", unary
			}
			cfg := parse(t, fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q,"method":%q}],"retryPolicy":{
				"maxAttempts":2,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,
				"retryableStatusCodes":["UNAVAILABLE"]}}],
				"retryThrottling":{"maxTokens":10,"tokenRatio":1}}`, service, method))
			c, _ := dial(t, srv, protocols[0], cfg, connectretry.WithServerName(uniqueName(t)))
			stream := func() {
				st, err := c.serverStream.CallServerStream(context.Background(), connect.NewRequest(wrapperspb.String("m")))
				if err == nil {
					for st.Receive() {
					}
					st.Close()
				}
			}
			callPoliced := func() int { // the attempts the server saw
				before := srv.count(policed)
				if policed == unary {
					_, _ = call(context.Background(), c.unary, "x")
				} else {
					stream()
				}
				return srv.count(policed) - before
			}
			callUnpoliced := func() {
				if unpoliced == "unary" {
					_, _ = call(context.Background(), c.unary, "x")
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
			fail.Store(true)
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
	}
}

var nameSeq atomic.Int64

// uniqueName is a server name of the test's own: throttles live for the
// process, and -count=N runs must not share one.
func uniqueName(t *testing.T) string { return fmt.Sprint(t.Name(), "-", nameSeq.Add(1)) }
