package grpcretry_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/grpctest"
)

// TestAdaptiveDelayFollowsLatency: the configured hedgingDelay holds until
// MinSamples calls have succeeded; then the delay is their quantile.
func TestAdaptiveDelayFollowsLatency(t *testing.T) {
	s := newScript(t)
	srv := grpctest.Start(t, s.handlers())
	adaptive := grpcretry.AdaptiveHedgingConfig{MaxExtraLoad: 0.1, Window: 6400 * time.Millisecond, MinSamples: 10, Burst: 5}
	cc, clk := hedgeClient(t, srv, hedgeConfig(t, 2, "1s", ""), nil, grpcretry.WithAdaptiveHedging(adaptive))
	for i := range 10 {
		p := start(t, context.Background(), cc, new(testpb.SimpleResponse))
		s.expect("start 1")
		clk.WaitCreated(i + 1)
		clk.Advance(10 * time.Millisecond) // the call's latency
		s.answer(1, verdict{body: "fast"})
		p.check(codes.OK, nil, 1)
	}
	for i, d := range clk.Sleeps() {
		if d != time.Second {
			t.Fatalf("call %d hedged after %v, want the configured 1s", i+1, d)
		}
	}
	clk.Advance(100 * time.Millisecond) // Window/64: the delay is recomputed
	p := start(t, context.Background(), cc, new(testpb.SimpleResponse))
	s.expect("start 1")
	clk.WaitCreated(11)
	// The 91st percentile of ten 10ms calls, rounded up to its bucket.
	if d := clk.Sleeps()[10]; d != 10240*time.Microsecond {
		t.Fatalf("adaptive delay %v, want 10.24ms", d)
	}
	clk.Advance(10240 * time.Microsecond)
	s.expect("start 2")
	s.answer(2, verdict{body: "hedge"})
	s.expect("cancel 1")
	p.check(codes.OK, nil, 2)
	if string(p.reply.GetPayload().GetBody()) != "hedge" {
		t.Fatalf("reply %v, want the hedge's", p.reply)
	}
}

// TestAdaptiveCap: each call earns MaxExtraLoad of a hedge; hedges beyond
// the savings are not sent, even with hedgingDelay 0.
func TestAdaptiveCap(t *testing.T) {
	srv := grpctest.Start(t, failFirst(1000, codes.Unavailable))
	adaptive := grpcretry.AdaptiveHedgingConfig{MaxExtraLoad: 0.1, Window: time.Minute, MinSamples: 1000, Burst: 1}
	cc, _ := hedgeClient(t, srv, hedgeConfig(t, 2, "0s", ""), nil, grpcretry.WithAdaptiveHedging(adaptive))
	tc := testpb.NewTestServiceClient(cc)
	var got []int
	for range 21 {
		var n int
		_, err := tc.UnaryCall(context.Background(), grpctest.Request("x"), grpcretry.CountAttempts(&n))
		if n == 1 && !errors.Is(err, rebound.ErrThrottled) {
			t.Fatalf("an unhedged call ended with %v, want ErrThrottled", err)
		}
		got = append(got, n)
	}
	// The first call spends the burst; every tenth call has saved one.
	for i, n := range got {
		want := 1
		if i%10 == 0 {
			want = 2
		}
		if n != want {
			t.Fatalf("attempts per call %v; call %d made %d, want %d", got, i+1, n, want)
		}
	}
	if srv.Count(grpctest.UnaryCall) != 24 {
		t.Fatalf("server saw %d attempts, want 24", srv.Count(grpctest.UnaryCall))
	}
	// A hedge the cap refuses counts as throttled, as one the throttle
	// refuses does.
	if s := grpcretry.StatsOf(cc)[grpctest.UnaryCall]; s.Throttled != 18 || s.Calls != 21 {
		t.Fatalf("stats: %d calls, %d throttled; want 21, 18", s.Calls, s.Throttled)
	}
}

// TestAdaptiveSpendsBudget: under an adaptive hedging delay a hedge needs
// WithBudget's leave too, beside the method's cap, and the calls count for
// a ratio budget: a bucket of two hedges' cost lets two calls hedge.
func TestAdaptiveSpendsBudget(t *testing.T) {
	srv := grpctest.Start(t, failFirst(1000, codes.Unavailable))
	bucket, _ := rebound.NewTokenBucket(rebound.TokenBucketConfig{Capacity: 10, RetryCost: 5, TimeoutCost: 10})
	// No floor: a hedge needs its call counted.
	ratio, _ := rebound.NewRatioBudget(rebound.RatioBudgetConfig{Ratio: 1, TTL: time.Minute})
	adaptive := grpcretry.AdaptiveHedgingConfig{MaxExtraLoad: 0.5, Window: time.Minute, MinSamples: 1000, Burst: 100}
	cc, _ := hedgeClient(t, srv, hedgeConfig(t, 2, "0s", ""), nil, grpcretry.WithAdaptiveHedging(adaptive),
		grpcretry.WithBudget(rebound.AllBudgets(bucket, ratio)))
	tc := testpb.NewTestServiceClient(cc)
	var got []int
	for range 5 {
		var n int
		_, _ = tc.UnaryCall(context.Background(), grpctest.Request("x"), grpcretry.CountAttempts(&n))
		got = append(got, n)
	}
	if want := []int{2, 2, 1, 1, 1}; !slices.Equal(got, want) {
		t.Fatalf("attempts per call %v, want %v: the bucket pays for two hedges", got, want)
	}
	if calls, hedges := ratio.Counts(); calls != 5 || hedges != 2 || bucket.Tokens() != 0 {
		t.Fatalf("ratio budget counted %d calls %d hedges, bucket holds %d; want 5 2 0", calls, hedges, bucket.Tokens())
	}
}

func TestAdaptiveInvalidOptions(t *testing.T) {
	d := grpcretry.DefaultAdaptiveHedging()
	for _, tc := range []struct {
		field  string
		mutate func(*grpcretry.AdaptiveHedgingConfig)
	}{
		{"MaxExtraLoad", func(a *grpcretry.AdaptiveHedgingConfig) { a.MaxExtraLoad = 0 }},
		{"MaxExtraLoad", func(a *grpcretry.AdaptiveHedgingConfig) { a.MaxExtraLoad = 1 }},
		{"Window", func(a *grpcretry.AdaptiveHedgingConfig) { a.Window = time.Microsecond }},
		{"MinSamples", func(a *grpcretry.AdaptiveHedgingConfig) { a.MinSamples = 0 }},
		{"Burst", func(a *grpcretry.AdaptiveHedgingConfig) { a.Burst = 0 }},
		{"Burst", func(a *grpcretry.AdaptiveHedgingConfig) { a.Burst = 2e6 }},
	} {
		a := d
		tc.mutate(&a)
		_, err := grpcretry.New(nil, grpcretry.WithAdaptiveHedging(a))
		if err == nil || !strings.Contains(err.Error(), "WithAdaptiveHedging: AdaptiveHedgingConfig."+tc.field) {
			t.Errorf("%+v: New = %v, want an error naming %s", a, err, tc.field)
		}
	}
	if _, err := grpcretry.New(nil, grpcretry.WithAdaptiveHedging(d)); err != nil {
		t.Fatalf("the default is invalid: %v", err)
	}
}
