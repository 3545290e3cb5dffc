package grpcretry_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/grpctest"
)

// withRetryInfo returns a status error of code carrying a RetryInfo
// whose retry_delay is d (nil for none).
func withRetryInfo(t testing.TB, code codes.Code, d *durationpb.Duration) error {
	t.Helper()
	st, err := status.New(code, "try later").WithDetails(&errdetails.RetryInfo{RetryDelay: d})
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

// hinting fails the first attempt with fail (after setting the pushback
// trailer, when not empty), then answers OK.
func hinting(fail error, pushback string) grpctest.Handlers {
	return grpctest.Handlers{Unary: func(ctx context.Context, n int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		if n > 1 {
			return &testpb.SimpleResponse{}, nil
		}
		if pushback != "" {
			grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", pushback))
		}
		return nil, fail
	}}
}

func TestRetryInfo(t *testing.T) {
	// The backoff before the first retry is random(0, 100ms) at 0.5:
	// 50ms.
	for _, tc := range []struct {
		name     string
		delay    *durationpb.Duration
		pushback string
		opts     []grpcretry.Option
		attempts int
		sleeps   []time.Duration
		reason   error
	}{
		{name: "honoured", delay: durationpb.New(3 * time.Second), attempts: 2, sleeps: []time.Duration{3 * time.Second}},
		{name: "minimum, not exact", delay: durationpb.New(10 * time.Millisecond), attempts: 2, sleeps: []time.Duration{50 * time.Millisecond}},
		{name: "beyond the default cap", delay: durationpb.New(61 * time.Second), attempts: 1, reason: rebound.ErrRetryDelayTooLong},
		{name: "within a raised cap", delay: durationpb.New(2 * time.Minute), opts: []grpcretry.Option{grpcretry.WithRetryDelayCap(5 * time.Minute)},
			attempts: 2, sleeps: []time.Duration{2 * time.Minute}},
		{name: "beyond a lowered cap", delay: durationpb.New(2 * time.Second), opts: []grpcretry.Option{grpcretry.WithRetryDelayCap(time.Second)},
			attempts: 1, reason: rebound.ErrRetryDelayTooLong},
		{name: "pushback wins", delay: durationpb.New(3 * time.Second), pushback: "200", attempts: 2, sleeps: []time.Duration{200 * time.Millisecond}},
		{name: "pushback stop wins", delay: durationpb.New(3 * time.Second), pushback: "-1", attempts: 1, reason: rebound.ErrPushback},
		{name: "negative ignored", delay: durationpb.New(-3 * time.Second), attempts: 2, sleeps: []time.Duration{50 * time.Millisecond}},
		{name: "malformed ignored", delay: &durationpb.Duration{Seconds: 1, Nanos: -5}, attempts: 2, sleeps: []time.Duration{50 * time.Millisecond}},
		{name: "no delay ignored", attempts: 2, sleeps: []time.Duration{50 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := grpctest.Start(t, hinting(withRetryInfo(t, codes.Unavailable, tc.delay), tc.pushback))
			tc2, clk := client(t, srv, retryConfig(t, 3, `"UNAVAILABLE"`, ""), tc.opts...)
			_, err := tc2.UnaryCall(context.Background(), grpctest.Request("x"))
			if got := srv.Count(grpctest.UnaryCall); got != tc.attempts {
				t.Fatalf("server saw %d attempts, want %d (err %v)", got, tc.attempts, err)
			}
			if tc.reason == nil && err != nil {
				t.Fatalf("call failed: %v", err)
			}
			if tc.reason != nil && (!errors.Is(err, tc.reason) || status.Code(err) != codes.Unavailable) {
				t.Fatalf("err %v, want UNAVAILABLE with reason %v", err, tc.reason)
			}
			if got := clk.Sleeps(); !slices.Equal(got, tc.sleeps) {
				t.Fatalf("waited %v, want %v", got, tc.sleeps)
			}
		})
	}
}

// TestRetryInfoBeyondDeadline: a retry_delay that would pass the call's
// deadline ends the call at once, with a reason that says so.
func TestRetryInfoBeyondDeadline(t *testing.T) {
	srv := grpctest.Start(t, hinting(withRetryInfo(t, codes.Unavailable, durationpb.New(30*time.Second)), ""))
	tc, clk := client(t, srv, retryConfig(t, 3, `"UNAVAILABLE"`, ""))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := tc.UnaryCall(ctx, grpctest.Request("x"))
	if !errors.Is(err, rebound.ErrDeadline) || srv.Count(grpctest.UnaryCall) != 1 || len(clk.Sleeps()) != 0 {
		t.Fatalf("err %v after %d attempts and waits %v, want ErrDeadline after 1, no wait", err, srv.Count(grpctest.UnaryCall), clk.Sleeps())
	}
}

// TestRetryInfoRequired: RESOURCE_EXHAUSTED is retried only with a
// RetryInfo, whether or not the policy lists it; other codes are as the
// policy says.
func TestRetryInfoRequired(t *testing.T) {
	exhausted := status.Error(codes.ResourceExhausted, "quota")
	for _, tc := range []struct {
		name     string
		codes    string
		fail     error
		attempts int
		reason   error
	}{
		{"with RetryInfo", `"UNAVAILABLE"`, withRetryInfo(t, codes.ResourceExhausted, durationpb.New(time.Second)), 2, nil},
		{"without", `"UNAVAILABLE"`, exhausted, 1, rebound.ErrNotRetryable},
		{"without, though the policy lists it", `"UNAVAILABLE","RESOURCE_EXHAUSTED"`, exhausted, 1, rebound.ErrNotRetryable},
		{"with a malformed RetryInfo", `"UNAVAILABLE","RESOURCE_EXHAUSTED"`, withRetryInfo(t, codes.ResourceExhausted, nil), 1, rebound.ErrNotRetryable},
		{"another code", `"UNAVAILABLE"`, status.Error(codes.Unavailable, "down"), 2, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := grpctest.Start(t, hinting(tc.fail, ""))
			c, _ := client(t, srv, retryConfig(t, 3, tc.codes, ""), grpcretry.WithRetryInfoRequired(codes.ResourceExhausted))
			_, err := c.UnaryCall(context.Background(), grpctest.Request("x"))
			if got := srv.Count(grpctest.UnaryCall); got != tc.attempts || (tc.reason == nil) != (err == nil) || (tc.reason != nil && !errors.Is(err, tc.reason)) {
				t.Fatalf("%d attempts, err %v; want %d attempts, reason %v", got, err, tc.attempts, tc.reason)
			}
		})
	}
}

// TestRetryInfoDelaysHedge: a non-fatal failure with RetryInfo sends the
// next hedge after retry_delay instead of at once.
func TestRetryInfoDelaysHedge(t *testing.T) {
	srv := grpctest.Start(t, hinting(withRetryInfo(t, codes.Unavailable, durationpb.New(3*time.Second)), ""))
	cc, clk := hedgeClient(t, srv, hedgeConfig(t, 2, "10s", ""), nil)
	p := start(t, context.Background(), cc, &testpb.SimpleResponse{})
	// The hedging delay's timer, then the RetryInfo's in its place.
	if !clk.WaitCreated(2) || !clk.WaitPending(1) {
		t.Fatal("no timer for the next hedge")
	}
	if got := srv.Count(grpctest.UnaryCall); got != 1 {
		t.Fatalf("%d attempts before the delay, want 1", got)
	}
	clk.Advance(3 * time.Second)
	if err := p.wait(); err != nil {
		t.Fatal(err)
	}
	if got, want := clk.Sleeps(), []time.Duration{10 * time.Second, 3 * time.Second}; !slices.Equal(got, want) || srv.Count(grpctest.UnaryCall) != 2 {
		t.Fatalf("timers %v and %d attempts, want %v and 2", got, srv.Count(grpctest.UnaryCall), want)
	}
}

func TestRetryInfoOptionsRejected(t *testing.T) {
	for _, o := range []grpcretry.Option{
		grpcretry.WithRetryDelayCap(0),
		grpcretry.WithRetryInfoRequired(codes.OK),
		grpcretry.WithRetryInfoRequired(codes.Code(17)),
	} {
		if _, err := grpcretry.New(nil, o); err == nil {
			t.Errorf("option accepted")
		}
	}
}
