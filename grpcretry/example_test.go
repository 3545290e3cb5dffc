package grpcretry_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/loopback"
	"github.com/rebound-go/rebound/serviceconfig"
)

// flakyServer fails the first `failures` calls with UNAVAILABLE.
type flakyServer struct {
	testpb.UnimplementedTestServiceServer
	failures int32
	calls    atomic.Int32
}

func (s *flakyServer) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	if s.calls.Add(1) <= s.failures {
		return nil, status.Error(codes.Unavailable, "warming up")
	}
	return &testpb.SimpleResponse{}, nil
}

// serve starts a test server on 127.0.0.1 and returns its address and a
// function that stops it. The examples' A6 throttles are process-wide per
// server name, here the server's address: an example on an earlier one's
// port would find that example's tokens spent (ExampleNew on
// ExampleOverride's port gave up "throttled" on its first failure), so
// every server gets an address no earlier one had.
func serve(impl testpb.TestServiceServer) (target string, stop func()) {
	lis := loopback.Listen()
	srv := grpc.NewServer()
	testpb.RegisterTestServiceServer(srv, impl)
	go srv.Serve(lis)
	return lis.Addr().String(), srv.Stop
}

// serviceConfigJSON is the A6 service config of the examples: retry the
// test service's calls on UNAVAILABLE, up to 4 attempts, and throttle
// retries when many calls fail.
const serviceConfigJSON = `{
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
}`

// The one line that installs rebound on a grpc-go ClientConn, how to
// count a call's attempts, and where the statistics are.
func ExampleDialOptions() {
	target, stop := serve(&flakyServer{failures: 2})
	defer stop()
	creds := grpc.WithTransportCredentials(insecure.NewCredentials())

	cfg, err := serviceconfig.Parse([]byte(serviceConfigJSON))
	if err != nil {
		log.Fatal(err) // every problem, each named by its JSON path
	}
	conn, err := grpc.NewClient(target, append(grpcretry.DialOptions(cfg), creds)...) // your target and credentials
	if err != nil {
		log.Fatal(err) // an invalid option, or a load-balancing policy grpc-go does not know
	}
	defer conn.Close()
	client := testpb.NewTestServiceClient(conn) // grpc-go's interop test service, in place of your client

	var attempts int
	_, err = client.UnaryCall(context.Background(), &testpb.SimpleRequest{}, grpcretry.CountAttempts(&attempts))
	fmt.Println(err, "after", attempts, "attempts")

	stats := grpcretry.StatsOf(conn)["/grpc.testing.TestService/UnaryCall"]
	fmt.Println(stats.Calls, "call,", stats.Retries.Attempts, "retries,", stats.Retries.Failed, "failed")
	// Output:
	// <nil> after 3 attempts
	// 1 call, 2 retries, 1 failed
}

// A call that fails returns the last attempt's status, and says why
// retrying stopped.
func ExampleNew() {
	target, stop := serve(&flakyServer{failures: 10})
	defer stop()
	creds := grpc.WithTransportCredentials(insecure.NewCredentials())
	cfg, err := serviceconfig.Parse([]byte(serviceConfigJSON))
	if err != nil {
		log.Fatal(err)
	}

	retries, err := grpcretry.New(cfg, grpcretry.WithMaxAttemptsCap(3))
	if err != nil {
		log.Fatal(err) // the first invalid option, by name
	}
	conn, err := grpc.NewClient(target, append(retries.DialOptions(), creds)...)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	_, err = testpb.NewTestServiceClient(conn).UnaryCall(context.Background(), &testpb.SimpleRequest{})
	fmt.Println(status.Code(err)) // the last attempt's status
	var gaveUp *rebound.Error
	if errors.As(err, &gaveUp) {
		fmt.Println(gaveUp.Attempts, "attempts:", gaveUp.Reason)
	}
	fmt.Println(errors.Is(err, rebound.ErrAttemptsExhausted))
	fmt.Println(retries.Stats()["/grpc.testing.TestService/UnaryCall"].Retries.Failed, "retries failed")
	// Output:
	// Unavailable
	// 3 attempts: rebound: attempts exhausted
	// true
	// 2 retries failed
}
