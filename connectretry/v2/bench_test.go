package connectretry_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"connectrpc.com/connect/v2/connectinprocess"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	connectretry "github.com/rebound-go/rebound/connectretry/v2"
	"github.com/rebound-go/rebound/serviceconfig"
)

// benchConfig retries the greeter, with retryThrottling, as the v1 bench
// does.
func benchConfig(b *testing.B) *serviceconfig.Config {
	cfg, err := serviceconfig.Parse([]byte(`{"methodConfig":[{"name":[{"service":"acme.greet.v1.GreetService"}],"retryPolicy":{
		"maxAttempts":4,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}],
		"retryThrottling":{"maxTokens":10,"tokenRatio":0.1}}`))
	if err != nil {
		b.Fatal(err)
	}
	return cfg
}

// BenchmarkUnary compares the success path of one unary call, bare and
// through the interceptor with a retry policy, against the same server: in
// process, and the Connect protocol over HTTP/1.1.
func BenchmarkUnary(b *testing.B) {
	server := greeter(0)
	mux := http.NewServeMux()
	connecthttp.Mount(mux, server)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, tr := range []struct {
		name string
		t    connect.Transport
	}{
		{"inprocess", connectinprocess.New(server)},
		{"connect", connecthttp.NewTransport(srv.Client(), srv.URL)},
	} {
		for _, bc := range []struct {
			name         string
			interceptors []connect.ClientInterceptor
		}{
			{"bare", nil},
			{"rebound", []connect.ClientInterceptor{connectretry.NewInterceptor(benchConfig(b)).WrapClient}},
		} {
			b.Run(tr.name+"/"+bc.name, func(b *testing.B) {
				c := connect.NewClient(tr.t, bc.interceptors...)
				ctx := context.Background()
				req := wrapperspb.String("ping")
				var res wrapperspb.StringValue
				b.ReportAllocs()
				for b.Loop() {
					if err := c.CallUnary(ctx, greet, req, &res); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkOverhead measures what the interceptor adds to a successful
// call, without a server: a transport whose streams answer at once.
func BenchmarkOverhead(b *testing.B) {
	for _, bc := range []struct {
		name         string
		interceptors []connect.ClientInterceptor
	}{
		{"bare", nil},
		{"rebound", []connect.ClientInterceptor{connectretry.NewInterceptor(benchConfig(b)).WrapClient}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := connect.NewClient(stubTransport{}, bc.interceptors...)
			ctx := context.Background()
			req := wrapperspb.String("ping")
			var res wrapperspb.StringValue
			b.ReportAllocs()
			for b.Loop() {
				if err := c.CallUnary(ctx, greet, req, &res); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// stubTransport answers every call at once with an empty message.
type stubTransport struct{}

func (stubTransport) NewClientStream(context.Context, connect.Spec) (connect.ClientStream, error) {
	return &stubStream{}, nil
}

type stubStream struct{ done bool }

func (*stubStream) SendHeaders() error { return nil }
func (*stubStream) Send(any) error     { return nil }
func (*stubStream) CloseSend() error   { return nil }
func (*stubStream) Close() error       { return nil }

func (s *stubStream) Receive(m any) error {
	if s.done {
		return io.EOF
	}
	s.done = true
	proto.Reset(m.(proto.Message))
	return nil
}
