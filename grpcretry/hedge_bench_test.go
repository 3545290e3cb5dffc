package grpcretry_test

import (
	"context"
	"math"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/grpctest"
	"github.com/rebound-go/rebound/serviceconfig"
)

// BenchmarkUnaryHedge is the success path of one unary call under a
// hedging policy whose hedge never fires (hedgingDelay 1s), next to a bare
// call and one under a retry policy, as in BenchmarkUnary. The adaptive
// case never has enough samples to leave the configured delay, so it
// measures its bookkeeping alone. Besides wall time it reports the
// process's CPU time per call (client and server), which other load on the
// machine disturbs less.
func BenchmarkUnaryHedge(b *testing.B) {
	srv := grpctest.Start(b, grpctest.Handlers{})
	never := grpcretry.AdaptiveHedgingConfig{MaxExtraLoad: 0.05, Window: 30 * time.Second, MinSamples: math.MaxInt, Burst: 10}
	hedging := hedgeConfig(b, 3, "1s", "")
	for _, bc := range []struct {
		name string
		dial []grpc.DialOption
	}{
		{"bare", []grpc.DialOption{grpc.WithDisableRetry()}},
		{"retry", dialOptions(b, retryConfig(b, 4, `"UNAVAILABLE"`, ""))},
		{"hedge", dialOptions(b, hedging)},
		{"hedge-adaptive", dialOptions(b, hedging, grpcretry.WithAdaptiveHedging(never))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			tc := testpb.NewTestServiceClient(srv.Dial(b, bc.dial...))
			ctx := context.Background()
			req := grpctest.Request("ping")
			if _, err := tc.UnaryCall(ctx, req); err != nil { // connect
				b.Fatal(err)
			}
			b.ReportAllocs()
			cpu := cpuTime()
			for b.Loop() {
				if _, err := tc.UnaryCall(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
			if used := cpuTime() - cpu; used > 0 {
				b.ReportMetric(float64(used)/float64(b.N), "cpu-ns/op")
			}
		})
	}
}

func dialOptions(b *testing.B, cfg *serviceconfig.Config, opts ...grpcretry.Option) []grpc.DialOption {
	c, err := grpcretry.New(cfg, opts...)
	if err != nil {
		b.Fatal(err)
	}
	return c.DialOptions()
}

// BenchmarkInterceptorSuccess is the interceptor's own cost on the success
// path: the invoker answers at once, with no network in between, so the
// figures are free of the round trip's noise.
func BenchmarkInterceptorSuccess(b *testing.B) {
	never := grpcretry.AdaptiveHedgingConfig{MaxExtraLoad: 0.05, Window: 30 * time.Second, MinSamples: math.MaxInt, Burst: 10}
	hedging := hedgeConfig(b, 3, "1s", "")
	invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	for _, bc := range []struct {
		name string
		cfg  *serviceconfig.Config
		opts []grpcretry.Option
	}{
		{"no-policy", nil, nil},
		{"retry", retryConfig(b, 4, `"UNAVAILABLE"`, ""), nil},
		{"hedge", hedging, nil},
		{"hedge-adaptive", hedging, []grpcretry.Option{grpcretry.WithAdaptiveHedging(never)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c, err := grpcretry.New(bc.cfg, bc.opts...)
			if err != nil {
				b.Fatal(err)
			}
			unary := c.UnaryClientInterceptor()
			ctx := context.Background()
			req, reply := grpctest.Request("ping"), new(testpb.SimpleResponse)
			b.ReportAllocs()
			for b.Loop() {
				if err := unary(ctx, grpctest.UnaryCall, req, reply, nil, invoker); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	// One Client on two conns, called by turns: each call finds its
	// conn's target in the map rather than as the latest (Client.target).
	b.Run("retry-conns-by-turns", func(b *testing.B) {
		c, err := grpcretry.New(retryConfig(b, 4, `"UNAVAILABLE"`, ""))
		if err != nil {
			b.Fatal(err)
		}
		var conns [2]*grpc.ClientConn
		for i := range conns {
			if conns[i], err = grpc.NewClient("passthrough:///unused", grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { conns[i].Close() })
		}
		unary := c.UnaryClientInterceptor()
		ctx := context.Background()
		req, reply := grpctest.Request("ping"), new(testpb.SimpleResponse)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			if err := unary(ctx, grpctest.UnaryCall, req, reply, conns[i%2], invoker); err != nil {
				b.Fatal(err)
			}
		}
	})
}
