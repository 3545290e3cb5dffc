package grpcretry_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/serviceconfig"
)

// stuckServer hangs the calls it numbers in stuck until the client gives
// up on them, as a backend stuck on a lock would.
type stuckServer struct {
	testpb.UnimplementedTestServiceServer
	stuck map[int32]bool
	calls atomic.Int32
}

func (s *stuckServer) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	if s.stuck[s.calls.Add(1)] {
		<-ctx.Done() // the per-attempt deadline came as grpc-timeout
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return &testpb.SimpleResponse{}, nil
}

// A hung attempt is cut after the per-attempt timeout and retried within
// the call's deadline, and one call can narrow its policy: here, to a
// single attempt.
func ExampleWithPerAttemptTimeout() {
	srv := &stuckServer{stuck: map[int32]bool{1: true, 3: true}}
	target, stop := serve(srv)
	defer stop()

	cfg, err := serviceconfig.Parse([]byte(serviceConfigJSON))
	if err != nil {
		log.Fatal(err)
	}
	c, err := grpcretry.New(cfg, grpcretry.WithPerAttemptTimeout(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	conn, err := grpc.NewClient(target, append(c.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := testpb.NewTestServiceClient(conn)

	// The first attempt hangs; the retry answers.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int
	_, err = client.UnaryCall(ctx, &testpb.SimpleRequest{}, grpcretry.CountAttempts(&n))
	fmt.Printf("first call: %v after %d attempts\n", status.Code(err), n)

	// This call may make one attempt only, and it hangs.
	_, err = client.UnaryCall(ctx, &testpb.SimpleRequest{}, grpcretry.Override(rebound.Override{MaxAttempts: 1}), grpcretry.CountAttempts(&n))
	fmt.Printf("second call: %v after %d attempt, per-attempt timeout: %v\n", status.Code(err), n, errors.Is(err, rebound.ErrAttemptTimeout))
	fmt.Println("attempts cut:", c.Stats()["/grpc.testing.TestService/UnaryCall"].AttemptTimeouts)
	// Output:
	// first call: OK after 2 attempts
	// second call: DeadlineExceeded after 1 attempt, per-attempt timeout: true
	// attempts cut: 2
}
