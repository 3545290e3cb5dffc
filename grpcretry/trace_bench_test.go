package grpcretry_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/internal/grpctest"
)

// BenchmarkTracing is the interceptor's cost with tracing off and on, for
// a call that succeeds at once and one whose first attempt fails: the
// difference between the two, less the untraced difference, is the cost
// of one more attempt's span. The invoker answers at once and backoff does
// not wait (an instant clock), so the figures are the interceptor's own.
// "on" is the OpenTelemetry SDK sampling every span, with no exporter.
func BenchmarkTracing(b *testing.B) {
	unavailable := status.Error(codes.Unavailable, "busy")
	for _, tc := range []struct {
		name  string
		fails int // the first attempt fails every fails-th call; 0 never
	}{
		{"success", 0},
		{"retried", 1},
	} {
		for _, traced := range []bool{false, true} {
			name := tc.name + "/off"
			opts := []grpcretry.Option{grpcretry.WithClock(clocktest.Instant())}
			if traced {
				name = tc.name + "/on"
				tp := sdktrace.NewTracerProvider()
				b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
				opts = append(opts, grpcretry.WithTracerProvider(tp))
			}
			b.Run(name, func(b *testing.B) {
				c, err := grpcretry.New(retryConfig(b, 4, `"UNAVAILABLE"`, ""), opts...)
				if err != nil {
					b.Fatal(err)
				}
				failNext := tc.fails > 0
				invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
					if failNext {
						failNext = false
						return unavailable
					}
					failNext = tc.fails > 0
					return nil
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
	}
}
