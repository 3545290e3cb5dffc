package connectretry_test

import (
	"context"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rebound-go/rebound/connectretry"
)

// BenchmarkUnary compares the success path of one unary call, bare and
// through the interceptor with a retry policy, against the same server:
// the Connect protocol over HTTP/1.1 and gRPC over HTTP/2.
func BenchmarkUnary(b *testing.B) {
	for _, p := range protocols[:2] {
		srv := startServer(b, handlers{}, p.http2)
		cfg := retryConfig(b, 4, `"UNAVAILABLE"`, `,"retryThrottling":{"maxTokens":10,"tokenRatio":0.1}`)
		for _, bc := range []struct {
			name string
			opts []connect.ClientOption
		}{
			{"bare", p.opts},
			{"rebound", append([]connect.ClientOption{connect.WithInterceptors(connectretry.NewInterceptor(cfg))}, p.opts...)},
		} {
			name := bc.name
			if p.name != "connect" {
				name = p.name + "/" + bc.name
			}
			b.Run(name, func(b *testing.B) {
				c := connect.NewClient[msg, msg](srv.client, srv.url+unary, bc.opts...)
				ctx := context.Background()
				if _, err := c.CallUnary(ctx, connect.NewRequest(wrapperspb.String("ping"))); err != nil { // connect
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					if _, err := c.CallUnary(ctx, connect.NewRequest(wrapperspb.String("ping"))); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkOverhead measures what the interceptor adds to a successful
// call, without network noise: an innermost stub interceptor answers every
// call, so connect's client runs but nothing is sent.
func BenchmarkOverhead(b *testing.B) {
	cfg := retryConfig(b, 4, `"UNAVAILABLE"`, `,"retryThrottling":{"maxTokens":10,"tokenRatio":0.1}`)
	stub := connect.UnaryInterceptorFunc(func(connect.UnaryFunc) connect.UnaryFunc {
		return func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) {
			return connect.NewResponse(&msg{}), nil
		}
	})
	for _, bc := range []struct {
		name         string
		interceptors []connect.Interceptor
	}{
		{"bare", []connect.Interceptor{stub}},
		{"rebound", []connect.Interceptor{connectretry.NewInterceptor(cfg), stub}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := connect.NewClient[msg, msg](http.DefaultClient, "http://127.0.0.1:1"+unary, connect.WithInterceptors(bc.interceptors...))
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
