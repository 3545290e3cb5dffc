package distinct_test

import (
	"context"
	"fmt"
	"log"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/rebound-go/rebound/grpcretry/distinct"
)

type server struct {
	testpb.UnimplementedTestServiceServer
}

func (server) UnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{}, nil
}

// A service config selects the policy by Name, with the child policy that
// picks backends. With grpcretry, hedges and retries of a call then go to
// backends it has not used; without it, as here, every call goes to the
// child's choice.
func Example() {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer()
	testpb.RegisterTestServiceServer(srv, server{})
	go srv.Serve(lis)
	defer srv.Stop()

	config := `{"loadBalancingConfig": [{"` + distinct.Name + `": {"childPolicy": [{"round_robin": {}}]}}]}`
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithDefaultServiceConfig(config),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err) // an unknown policy would fail here
	}
	defer conn.Close()
	_, err = testpb.NewTestServiceClient(conn).UnaryCall(context.Background(), &testpb.SimpleRequest{})
	fmt.Println(err)
	// Output: <nil>
}
