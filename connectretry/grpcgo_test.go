package connectretry_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/connectretry"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/internal/grpctest"
)

// grpcGoClient calls grpc-go's test server with connect's gRPC protocol
// over cleartext HTTP/2, through an interceptor for a retry policy.
func grpcGoClient(t *testing.T, srv *grpctest.Server) (*connect.Client[testpb.SimpleRequest, testpb.SimpleResponse], *clocktest.Clock) {
	t.Helper()
	cfg := parse(t, `{"methodConfig":[{"name":[{"service":"`+grpctest.Service+`"}],"retryPolicy":{
		"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`)
	clk := clocktest.NewAuto()
	i, err := connectretry.New(cfg, connectretry.WithClock(clk), connectretry.WithRandom(clocktest.NewRand(0.5)))
	if err != nil {
		t.Fatal(err)
	}
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &protocols}
	t.Cleanup(tr.CloseIdleConnections)
	c := connect.NewClient[testpb.SimpleRequest, testpb.SimpleResponse](&http.Client{Transport: tr},
		"http://"+srv.Addr+grpctest.UnaryCall, connect.WithGRPC(), connect.WithInterceptors(i))
	return c, clk
}

// TestGRPCGoServer checks the metadata of A6 against grpc-go: the
// pushback arrives in HTTP trailers after response headers, and grpc-go
// reads the attempts header.
func TestGRPCGoServer(t *testing.T) {
	srv := grpctest.Start(t, grpctest.Handlers{Unary: func(ctx context.Context, n int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		switch n {
		case 1:
			// Headers, then the status in trailers: not a trailers-only
			// response. connect returns nothing of it to the application
			// before the call ends, so the attempt is replaced.
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
	c, clk := grpcGoClient(t, srv)
	_, err := c.CallUnary(context.Background(), connect.NewRequest(grpctest.Request("x")))
	if connect.CodeOf(err) != connect.CodeUnavailable || !errors.Is(err, rebound.ErrPushback) {
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
}
