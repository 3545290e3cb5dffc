package grpcretry_test

import (
	"context"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/serviceconfig"
)

// flakyServer fails the first two calls with UNAVAILABLE.
type flakyServer struct {
	testpb.UnimplementedTestServiceServer
	calls int
}

func (s *flakyServer) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	s.calls++
	if s.calls <= 2 {
		return nil, status.Error(codes.Unavailable, "warming up")
	}
	return &testpb.SimpleResponse{}, nil
}

func ExampleDialOptions() {
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	srv := grpc.NewServer()
	testpb.RegisterTestServiceServer(srv, &flakyServer{})
	go srv.Serve(lis)
	defer srv.Stop()

	cfg, err := serviceconfig.Parse([]byte(`{
	  "methodConfig": [{
	    "name": [{"service": "grpc.testing.TestService"}],
	    "retryPolicy": {
	      "maxAttempts": 4,
	      "initialBackoff": "0.01s",
	      "maxBackoff": "0.1s",
	      "backoffMultiplier": 2,
	      "retryableStatusCodes": ["unavailable"]
	    }
	  }],
	  "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}
	}`))
	if err != nil {
		panic(err)
	}
	// The one line: rebound's interceptors, with grpc-go's retries off.
	conn, err := grpc.NewClient(lis.Addr().String(),
		append(grpcretry.DialOptions(cfg), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		panic(err)
	}
	defer conn.Close()

	var attempts int
	_, err = testpb.NewTestServiceClient(conn).UnaryCall(context.Background(), &testpb.SimpleRequest{}, grpcretry.CountAttempts(&attempts))
	fmt.Println(err, attempts)
	// Output: <nil> 3
}
