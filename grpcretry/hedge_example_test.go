package grpcretry_test

import (
	"context"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/serviceconfig"
)

// stallingServer stalls the first call until the client gives up on it.
type stallingServer struct {
	testpb.UnimplementedTestServiceServer
	first chan struct{}
}

func (s *stallingServer) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	select {
	case <-s.first:
		<-ctx.Done() // stalled: the hedge wins and this attempt is cancelled
		return nil, ctx.Err()
	default:
		return &testpb.SimpleResponse{Username: "from the hedge"}, nil
	}
}

func Example_hedging() {
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	srv := grpc.NewServer()
	first := make(chan struct{}, 1)
	first <- struct{}{}
	testpb.RegisterTestServiceServer(srv, &stallingServer{first: first})
	go srv.Serve(lis)
	defer srv.Stop()

	// Send the call a second time if no answer came within 10ms; the
	// rebound_distinct balancer sends the hedge to a backend not used yet,
	// when there is one.
	cfg, err := serviceconfig.Parse([]byte(`{
	  "loadBalancingConfig": [{"rebound_distinct": {}}],
	  "methodConfig": [{
	    "name": [{"service": "grpc.testing.TestService"}],
	    "hedgingPolicy": {
	      "maxAttempts": 2,
	      "hedgingDelay": "0.01s",
	      "nonFatalStatusCodes": ["UNAVAILABLE"]
	    }
	  }]
	}`))
	if err != nil {
		panic(err)
	}
	conn, err := grpc.NewClient(lis.Addr().String(), append(grpcretry.DialOptions(cfg),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		panic(err)
	}
	defer conn.Close()

	var attempts int
	resp, err := testpb.NewTestServiceClient(conn).UnaryCall(context.Background(), &testpb.SimpleRequest{}, grpcretry.CountAttempts(&attempts))
	fmt.Println(resp.GetUsername(), err, attempts)
	// Output: from the hedge <nil> 2
}
