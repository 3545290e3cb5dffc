package grpcretry_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/grpcretry"
)

// limitedServer refuses its first call with RESOURCE_EXHAUSTED and a
// pushback of one second.
type limitedServer struct {
	testpb.UnimplementedTestServiceServer
	calls atomic.Int32
}

func (s *limitedServer) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	if s.calls.Add(1) == 1 {
		grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", "1000"))
		return nil, status.Error(codes.ResourceExhausted, "quota exceeded")
	}
	return &testpb.SimpleResponse{}, nil
}

// Calling a rate-limited service: its first RESOURCE_EXHAUSTED starts the
// limit; from then on every call waits for its turn, and one that could
// not get it before its deadline fails at once, without reaching the
// server, with RESOURCE_EXHAUSTED.
func ExampleWithAdaptiveRateLimit() {
	srv := &limitedServer{}
	target, stop := serve(srv)
	defer stop()
	conn, err := grpc.NewClient(target, append(grpcretry.DialOptions(nil,
		grpcretry.WithAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{MinRate: 10})),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := testpb.NewTestServiceClient(conn)
	call := func(timeout time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		_, err := client.UnaryCall(ctx, &testpb.SimpleRequest{})
		if errors.Is(err, rebound.ErrRateLimited) {
			fmt.Println(status.Code(err), "not sent: its turn would come after its deadline")
			return
		}
		fmt.Println(status.Code(err))
	}
	call(time.Second)           // the throttle: the limit starts at 10 calls/s
	call(10 * time.Millisecond) // its turn is 100ms away
	call(time.Second)           // waits for its turn
	fmt.Println(srv.calls.Load(), "calls reached the server")
	// Output:
	// ResourceExhausted
	// ResourceExhausted not sent: its turn would come after its deadline
	// OK
	// 2 calls reached the server
}
