package grpcretry_test

// Tests of A6 rules that an outside audit found broken (issue 12), one
// test per rule, each against a real grpc-go server.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/internal/grpctest"
	"github.com/rebound-go/rebound/serviceconfig"
)

func parseConfig(t testing.TB, js string) *serviceconfig.Config {
	t.Helper()
	cfg, err := serviceconfig.Parse([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// A6 "Exponential Backoff": retry n waits random(0, min(initialBackoff *
// multiplier^(n-1), maxBackoff)), so a maxBackoff below initialBackoff caps
// the first retry's wait too.
func TestBackoffCappedBelowInitial(t *testing.T) {
	srv := grpctest.Start(t, failFirst(100, codes.Unavailable))
	cfg := parseConfig(t, fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"retryPolicy":{
		"maxAttempts":3,"initialBackoff":"2s","maxBackoff":"0.05s","backoffMultiplier":2,
		"retryableStatusCodes":["UNAVAILABLE"]}}]}`, grpctest.Service))
	clk := clocktest.NewAuto()
	c, err := grpcretry.New(cfg, grpcretry.WithClock(clk), grpcretry.WithRandom(clocktest.NewRand(0.99)))
	if err != nil {
		t.Fatal(err)
	}
	tc := testpb.NewTestServiceClient(srv.Dial(t, c.DialOptions()...))
	_, err = tc.UnaryCall(context.Background(), grpctest.Request("x"))
	if !errors.Is(err, rebound.ErrAttemptsExhausted) || status.Code(err) != codes.Unavailable {
		t.Fatalf("err = %v, want UNAVAILABLE after attempts exhausted", err)
	}
	if got := srv.Count(grpctest.UnaryCall); got != 3 {
		t.Fatalf("server saw %d attempts, want 3", got)
	}
	want := []time.Duration{49500 * time.Microsecond, 49500 * time.Microsecond}
	if got := clk.Sleeps(); !slices.Equal(got, want) {
		t.Fatalf("backoffs = %v, want %v (0.99 of maxBackoff)", got, want)
	}
}

// No config that Parse accepts may fail calls: a tokenRatio that truncates
// to 0.000, or one far above maxTokens, still makes a throttle.
func TestThrottleFromAnyParsedRatio(t *testing.T) {
	for _, ratio := range []string{"0.0001", "1e13", "1e300"} {
		t.Run(ratio, func(t *testing.T) {
			srv := grpctest.Start(t, failFirst(1, codes.Unavailable))
			cfg := retryConfig(t, 3, `"UNAVAILABLE"`, `,"retryThrottling":{"maxTokens":10,"tokenRatio":`+ratio+`}`)
			tc, _ := client(t, srv, cfg, grpcretry.WithServerName(t.Name()))
			if _, err := tc.UnaryCall(context.Background(), grpctest.Request("x")); err != nil {
				t.Fatalf("call failed: %v", err)
			}
			if got := srv.Count(grpctest.UnaryCall); got != 2 {
				t.Fatalf("server saw %d attempts, want 2", got)
			}
		})
	}
}

// A call cancelled while it waits between attempts ends CANCELLED, as in
// grpc-go, not with the last attempt's status; its error still counts the
// attempts.
func TestCancelledDuringBackoff(t *testing.T) {
	cfg := retryConfig(t, 4, `"UNAVAILABLE"`, "")
	for _, kind := range []string{"unary", "server stream"} {
		t.Run(kind, func(t *testing.T) {
			srv := grpctest.Start(t, grpctest.Handlers{
				Unary: failFirst(100, codes.Unavailable).Unary,
				ServerStream: func(int, *testpb.StreamingOutputCallRequest, grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
					return status.Error(codes.Unavailable, "down")
				},
			})
			clk := clocktest.New()
			c, err := grpcretry.New(cfg, grpcretry.WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			tc := testpb.NewTestServiceClient(srv.Dial(t, c.DialOptions()...))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() {
				if clk.WaitPending(1) { // the first backoff has started
					cancel()
				}
			}()
			if kind == "unary" {
				_, err = tc.UnaryCall(ctx, grpctest.Request("x"))
			} else {
				var st grpc.ServerStreamingClient[testpb.StreamingOutputCallResponse]
				if st, err = tc.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{}); err == nil {
					_, err = st.Recv()
				}
			}
			if status.Code(err) != codes.Canceled || !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want CANCELLED with context.Canceled", err)
			}
			var re *grpcretry.Error
			if !errors.As(err, &re) || re.Attempts != 1 {
				t.Fatalf("err = %#v, want a *grpcretry.Error after 1 attempt", err)
			}
		})
	}
}
