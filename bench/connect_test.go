package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	connectv1 "connectrpc.com/connect"
	connectv2 "connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"connectrpc.com/connect/v2/connectinprocess"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	retryv1 "github.com/rebound-go/rebound/connectretry"
	retryv2 "github.com/rebound-go/rebound/connectretry/v2"
	"github.com/rebound-go/rebound/serviceconfig"
)

// connectConfig retries UnaryCall on UNAVAILABLE, with retryThrottling,
// for both connect majors: the success path of a call under a policy.
func connectConfig(tb testing.TB) *serviceconfig.Config {
	cfg, err := serviceconfig.Parse([]byte(retryServiceConfig(true)))
	if err != nil {
		tb.Fatal(err)
	}
	return cfg
}

// connectV2Spec is UnaryCall's Spec, as generated v2 code would have it.
var connectV2Spec = connectv2.Spec{Procedure: connectProcedure, StreamType: connectv2.StreamTypeUnary}

// connectServers serve UnaryCall, answering at once, with a connect v1
// handler and with a connect v2 server, each over HTTP/1.1 and h2c; the
// v2 server is also called in process.
type connectServers struct {
	v1, v2     *httptest.Server // HTTP/1.1 and h2c both: the server accepts either
	v2Local    *connectv2.Server
	http1, h2c *http.Client
}

func startConnectServers(tb testing.TB) *connectServers {
	tb.Helper()
	reply := &testpb.SimpleResponse{}
	mux1 := http.NewServeMux()
	mux1.Handle(connectProcedure, connectv1.NewUnaryHandler(connectProcedure,
		func(context.Context, *connectv1.Request[testpb.SimpleRequest]) (*connectv1.Response[testpb.SimpleResponse], error) {
			return connectv1.NewResponse(reply), nil
		}))
	local := connectv2.NewServer()
	local.Register(connectv2.Method{Spec: connectV2Spec, Handler: func(_ context.Context, _ connectv2.Spec, st connectv2.ServerStream) error {
		var req testpb.SimpleRequest
		if err := st.Receive(&req); err != nil {
			return err
		}
		return st.Send(reply)
	}})
	mux2 := http.NewServeMux()
	connecthttp.Mount(mux2, local)
	s := &connectServers{v2Local: local}
	for i, mux := range []http.Handler{mux1, mux2} {
		hs := httptest.NewUnstartedServer(mux)
		hs.Config.Protocols = new(http.Protocols)
		hs.Config.Protocols.SetHTTP1(true)
		hs.Config.Protocols.SetUnencryptedHTTP2(true)
		hs.Start()
		tb.Cleanup(hs.Close)
		if i == 0 {
			s.v1 = hs
		} else {
			s.v2 = hs
		}
	}
	h1 := &http.Transport{}
	h2 := &http.Transport{Protocols: new(http.Protocols)}
	h2.Protocols.SetUnencryptedHTTP2(true)
	tb.Cleanup(h1.CloseIdleConnections)
	tb.Cleanup(h2.CloseIdleConnections)
	s.http1, s.h2c = &http.Client{Transport: h1}, &http.Client{Transport: h2}
	return s
}

// BenchmarkConnect is the success path of one unary call through
// connectretry (connect v1) and connectretry/v2 (connect v2) with a retry
// policy and retryThrottling, beside the bare client of the same major,
// against a handler of that major on 127.0.0.1 that answers at once: the
// Connect protocol over HTTP/1.1 and gRPC over h2c, and for v2 also in
// process (connectinprocess), where the interceptor's share is largest.
func BenchmarkConnect(b *testing.B) {
	s := startConnectServers(b)
	type row struct {
		name string
		call func(b *testing.B) func() error
	}
	v1 := func(client *http.Client, grpc, retry bool) func(b *testing.B) func() error {
		return func(b *testing.B) func() error {
			var opts []connectv1.ClientOption
			if grpc {
				opts = append(opts, connectv1.WithGRPC())
			}
			if retry {
				opts = append(opts, connectv1.WithInterceptors(retryv1.NewInterceptor(connectConfig(b))))
			}
			c := connectv1.NewClient[testpb.SimpleRequest, testpb.SimpleResponse](client, s.v1.URL+connectProcedure, opts...)
			ctx := context.Background()
			return func() error {
				_, err := c.CallUnary(ctx, connectv1.NewRequest(&testpb.SimpleRequest{}))
				return err
			}
		}
	}
	v2 := func(t func() connectv2.Transport, retry bool) func(b *testing.B) func() error {
		return func(b *testing.B) func() error {
			var ics []connectv2.ClientInterceptor
			if retry {
				ics = append(ics, retryv2.NewInterceptor(connectConfig(b)).WrapClient)
			}
			c := connectv2.NewClient(t(), ics...)
			ctx := context.Background()
			return func() error {
				var res testpb.SimpleResponse
				return c.CallUnary(ctx, connectV2Spec, &testpb.SimpleRequest{}, &res)
			}
		}
	}
	http1v2 := func() connectv2.Transport { return connecthttp.NewTransport(s.http1, s.v2.URL) }
	grpcv2 := func() connectv2.Transport { return connecthttp.NewTransport(s.h2c, s.v2.URL, connecthttp.WithGRPC()) }
	local := func() connectv2.Transport { return connectinprocess.New(s.v2Local) }
	for _, r := range []row{
		{"v1/connect/bare", v1(s.http1, false, false)},
		{"v1/connect/rebound", v1(s.http1, false, true)},
		{"v1/grpc/bare", v1(s.h2c, true, false)},
		{"v1/grpc/rebound", v1(s.h2c, true, true)},
		{"v2/connect/bare", v2(http1v2, false)},
		{"v2/connect/rebound", v2(http1v2, true)},
		{"v2/grpc/bare", v2(grpcv2, false)},
		{"v2/grpc/rebound", v2(grpcv2, true)},
		{"v2/inprocess/bare", v2(local, false)},
		{"v2/inprocess/rebound", v2(local, true)},
	} {
		b.Run(r.name, func(b *testing.B) {
			call := r.call(b)
			if err := call(); err != nil { // connect
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if err := call(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
