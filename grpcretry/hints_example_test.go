package grpcretry_test

import (
	"context"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/serviceconfig"
)

// quotaServer answers its first call RESOURCE_EXHAUSTED with a
// google.rpc.RetryInfo asking for a 20ms pause, and its second INTERNAL
// with the message "retry me".
type quotaServer struct {
	testpb.UnimplementedTestServiceServer
	calls atomic.Int32
}

func (s *quotaServer) UnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	switch s.calls.Add(1) {
	case 1:
		st, _ := status.New(codes.ResourceExhausted, "quota").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(20 * time.Millisecond)})
		return nil, st.Err()
	case 2:
		return nil, status.Error(codes.Internal, "retry me")
	}
	return &testpb.SimpleResponse{}, nil
}

// A server's google.rpc.RetryInfo is a minimum wait before the next
// attempt; RESOURCE_EXHAUSTED is retried only when the server sends one.
// A classifier may retry what the policy's codes do not list (or stop
// what they do), within guardrails: it cannot undo a commit or the
// server's pushback.
func ExampleWithClassifier() {
	target, stop := serve(&quotaServer{})
	defer stop()
	cfg, err := serviceconfig.Parse([]byte(serviceConfigJSON))
	if err != nil {
		log.Fatal(err)
	}

	c, err := grpcretry.New(cfg,
		grpcretry.WithRetryInfoRequired(codes.ResourceExhausted),
		grpcretry.WithRetryDelayCap(10*time.Second), // a longer hint ends the call with rebound.ErrRetryDelayTooLong
		grpcretry.WithClassifier(func(f grpcretry.Failure, v rebound.RetryInfo) rebound.RetryInfo {
			if f.Status.Code() == codes.Internal && f.Status.Message() == "retry me" {
				v.Safety = rebound.SafetyYes
			}
			return v
		}),
	)
	if err != nil {
		log.Fatal(err)
	}
	conn, err := grpc.NewClient(target, append(c.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	var attempts int
	_, err = testpb.NewTestServiceClient(conn).UnaryCall(context.Background(), &testpb.SimpleRequest{}, grpcretry.CountAttempts(&attempts))
	fmt.Println(status.Code(err), "after", attempts, "attempts")
	// Output: OK after 3 attempts
}
