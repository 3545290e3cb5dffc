package grpcretry_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/serviceconfig"
)

// uploadServer fails the first upload after reading part of it, and
// counts the bytes of the next.
type uploadServer struct {
	testpb.UnimplementedTestServiceServer
	calls atomic.Int32
}

func (s *uploadServer) StreamingInputCall(st grpc.ClientStreamingServer[testpb.StreamingInputCallRequest, testpb.StreamingInputCallResponse]) error {
	first := s.calls.Add(1) == 1
	var size int32
	for {
		req, err := st.Recv()
		if err == io.EOF {
			return st.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: size})
		}
		if err != nil {
			return err
		}
		if first {
			return status.Error(codes.Unavailable, "restarting")
		}
		size += int32(len(req.GetPayload().GetBody()))
	}
}

// A client stream whose first attempt fails is sent again, whole: rebound
// kept what the application sent.
func ExampleClient_StreamClientInterceptor() {
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	srv := grpc.NewServer()
	testpb.RegisterTestServiceServer(srv, &uploadServer{})
	go srv.Serve(lis)
	defer srv.Stop()

	cfg, err := serviceconfig.Parse([]byte(`{
	  "methodConfig": [{
	    "name": [{"service": "grpc.testing.TestService"}],
	    "retryPolicy": {
	      "maxAttempts": 3,
	      "initialBackoff": "0.01s",
	      "maxBackoff": "0.1s",
	      "backoffMultiplier": 2,
	      "retryableStatusCodes": ["UNAVAILABLE"]
	    }
	  }]
	}`))
	if err != nil {
		panic(err)
	}
	conn, err := grpc.NewClient(lis.Addr().String(),
		append(grpcretry.DialOptions(cfg), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		panic(err)
	}
	defer conn.Close()

	var attempts int
	st, err := testpb.NewTestServiceClient(conn).StreamingInputCall(context.Background(), grpcretry.CountAttempts(&attempts))
	if err != nil {
		panic(err)
	}
	for _, chunk := range []string{"to be, ", "or not ", "to be"} {
		if err := st.Send(&testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: []byte(chunk)}}); err != nil {
			panic(err)
		}
	}
	resp, err := st.CloseAndRecv()
	fmt.Println(resp.GetAggregatedPayloadSize(), err, attempts)
	// Output: 19 <nil> 2
}
