package grpcretry_test

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/grpctest"
)

// BenchmarkUnary compares the success path of one unary call: bare grpc-go,
// grpc-go's own A6 retry, and rebound, against the same server.
func BenchmarkUnary(b *testing.B) {
	srv := grpctest.Start(b, grpctest.Handlers{})
	policy := fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"retryPolicy":{
		"maxAttempts":4,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,
		"retryableStatusCodes":["UNAVAILABLE"]}}]}`, grpctest.Service)
	cfg := retryConfig(b, 4, `"UNAVAILABLE"`, "")
	for _, bc := range []struct {
		name string
		opts []grpc.DialOption
	}{
		{"bare", []grpc.DialOption{grpc.WithDisableRetry()}},
		{"grpc-retry", []grpc.DialOption{grpc.WithDefaultServiceConfig(policy)}},
		{"rebound", grpcretry.DialOptions(cfg)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			tc := testpb.NewTestServiceClient(srv.Dial(b, bc.opts...))
			ctx := context.Background()
			req := grpctest.Request("ping")
			if _, err := tc.UnaryCall(ctx, req); err != nil { // connect
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := tc.UnaryCall(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
