package shed_test

import (
	"context"
	"fmt"
	"log"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/serviceconfig"
	"github.com/rebound-go/rebound/shed"
)

type echo struct {
	testpb.UnimplementedTestServiceServer
}

func (echo) UnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{}, nil
}

// A server that sheds what it cannot serve and says when to come back,
// and a client whose retries obey it, behind an adaptive throttle.
func ExampleNew() {
	shedder, err := shed.New(shed.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(shedder.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(shedder.StreamServerInterceptor()),
	)
	testpb.RegisterTestServiceServer(srv, echo{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()
	target := lis.Addr().String()

	cfg, err := serviceconfig.Parse([]byte(`{"methodConfig": [{
	  "name": [{"service": "grpc.testing.TestService"}],
	  "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s",
	    "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`))
	if err != nil {
		log.Fatal(err)
	}
	conn, err := grpc.NewClient(target, append(grpcretry.DialOptions(cfg,
		grpcretry.WithAdaptiveThrottle(rebound.AdaptiveThrottleConfig{})),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	_, err = testpb.NewTestServiceClient(conn).UnaryCall(context.Background(), &testpb.SimpleRequest{})
	fmt.Println(status.Code(err), "; admitted:", shedder.Stats().Admitted)
	// Output: OK ; admitted: 1
}
