package suite

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	connectv1 "connectrpc.com/connect"
	connectv2 "connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound"
	retryv1 "github.com/rebound-go/rebound/connectretry"
	retryv2 "github.com/rebound-go/rebound/connectretry/v2"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/internal/grpctest"
	"github.com/rebound-go/rebound/serviceconfig"
)

// grpcGoCall calls grpc-go's test server's UnaryCall with connect's gRPC
// protocol over cleartext HTTP/2, through i, the Interceptor of major m.
func grpcGoCall(t *testing.T, m *major, srv *grpctest.Server, i interceptor) error {
	t.Helper()
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &protocols}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	if m == v1 {
		c := connectv1.NewClient[testpb.SimpleRequest, testpb.SimpleResponse](hc, "http://"+srv.Addr+grpctest.UnaryCall,
			connectv1.WithGRPC(), connectv1.WithInterceptors(i.(*retryv1.Interceptor)))
		_, err := c.CallUnary(context.Background(), connectv1.NewRequest(grpctest.Request("x")))
		return err
	}
	c := connectv2.NewClient(connecthttp.NewTransport(hc, "http://"+srv.Addr, connecthttp.WithGRPC()), i.(*retryv2.Interceptor).WrapClient)
	var res testpb.SimpleResponse
	return c.CallUnary(context.Background(), connectv2.Spec{Procedure: grpctest.UnaryCall, StreamType: connectv2.StreamTypeUnary}, grpctest.Request("x"), &res)
}

// TestGRPCGoServer checks the metadata of A6 against grpc-go: the pushback
// arrives in HTTP trailers after response headers, and grpc-go reads the
// attempts header.
func TestGRPCGoServer(t *testing.T) {
	for _, m := range majors {
		t.Run(m.name, func(t *testing.T) {
			srv := grpctest.Start(t, grpctest.Handlers{Unary: func(ctx context.Context, n int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
				switch n {
				case 1:
					// Headers, then the status in trailers: not a
					// trailers-only response. connect returns nothing of
					// it to the application before the call ends, so the
					// attempt is replaced.
					if err := grpc.SendHeader(ctx, metadata.Pairs("k", "v")); err != nil {
						return nil, err
					}
					if err := grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", "250")); err != nil {
						return nil, err
					}
					return nil, status.Error(codes.Unavailable, "busy")
				case 2:
					// Trailers-only, with pushback "stop".
					if err := grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", "-1")); err != nil {
						return nil, err
					}
					return nil, status.Error(codes.Unavailable, "go away")
				}
				return &testpb.SimpleResponse{}, nil
			}})
			cfg := parse(t, `{"methodConfig":[{"name":[{"service":"`+grpctest.Service+`"}],"retryPolicy":{
				"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`)
			clk := clocktest.NewAuto()
			i, err := m.newInterceptor(cfg, withClock(clk), withRandom(clocktest.NewRand(0.5)))
			if err != nil {
				t.Fatal(err)
			}
			err = grpcGoCall(t, m, srv, i)
			if m.codeOf(err) != serviceconfig.Unavailable || !errors.Is(err, rebound.ErrPushback) {
				t.Fatalf("err %v, want unavailable, pushback", err)
			}
			if got := clk.Sleeps(); !slices.Equal(got, []time.Duration{250 * time.Millisecond}) {
				t.Fatalf("sleeps %v, want the trailer's 250ms", got)
			}
			var prev []int
			for _, a := range srv.Attempts(grpctest.UnaryCall) {
				prev = append(prev, a.Previous)
			}
			if !slices.Equal(prev, []int{-1, 1}) {
				t.Fatalf("grpc-go saw grpc-previous-rpc-attempts %v, want [absent 1]", prev)
			}
		})
	}
}
