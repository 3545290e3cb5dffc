package connectretry_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rebound-go/rebound/connectretry"
	"github.com/rebound-go/rebound/internal/clocktest"
)

// BenchmarkTracing is the interceptor's cost with tracing off and on, for
// a call that succeeds at once and one whose first attempt fails: the
// difference between the two, less the untraced difference, is the cost
// of one more attempt's span. An innermost stub interceptor answers every
// attempt, so nothing is sent, and backoff does not wait (an instant
// clock). "on" is the OpenTelemetry SDK sampling every span, with no
// exporter.
func BenchmarkTracing(b *testing.B) {
	unavailable := connect.NewError(connect.CodeUnavailable, errors.New("busy"))
	for _, tc := range []struct {
		name  string
		fails bool
	}{
		{"success", false},
		{"retried", true},
	} {
		for _, traced := range []bool{false, true} {
			name := tc.name + "/off"
			opts := []connectretry.Option{connectretry.WithClock(clocktest.Instant())}
			if traced {
				name = tc.name + "/on"
				tp := sdktrace.NewTracerProvider()
				b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
				opts = append(opts, connectretry.WithTracerProvider(tp))
			}
			b.Run(name, func(b *testing.B) {
				i, err := connectretry.New(retryConfig(b, 4, `"UNAVAILABLE"`, ""), opts...)
				if err != nil {
					b.Fatal(err)
				}
				failNext := tc.fails
				stub := connect.UnaryInterceptorFunc(func(connect.UnaryFunc) connect.UnaryFunc {
					return func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) {
						if failNext {
							failNext = false
							return nil, unavailable
						}
						failNext = tc.fails
						return connect.NewResponse(&msg{}), nil
					}
				})
				c := connect.NewClient[msg, msg](http.DefaultClient, "http://127.0.0.1:1"+unary, connect.WithInterceptors(i, stub))
				ctx := context.Background()
				req := connect.NewRequest(wrapperspb.String("ping"))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := c.CallUnary(ctx, req); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
