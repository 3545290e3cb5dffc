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
	call(10 * time.Second)      // the throttle: the limit starts at 10 calls/s
	call(10 * time.Millisecond) // its turn is 100ms away
	call(10 * time.Second)      // waits for its turn
	fmt.Println(srv.calls.Load(), "calls reached the server")
	// Output:
	// ResourceExhausted
	// ResourceExhausted not sent: its turn would come after its deadline
	// OK
	// 2 calls reached the server
}

// spentServer answers OK, publishing in its response metadata that its
// quota is spent until a reset 30 seconds away.
type spentServer struct {
	testpb.UnimplementedTestServiceServer
	calls atomic.Int32
}

func (s *spentServer) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	s.calls.Add(1)
	grpc.SetHeader(ctx, metadata.Pairs("ratelimit", `"default";r=0;t=30`, "ratelimit-policy", `"default";q=100;w=60`))
	return &testpb.SimpleResponse{}, nil
}

// Calling a service that publishes its quota in its response metadata:
// the first answer says nothing is left until a reset 30s away, so the
// next call, whose deadline is sooner, is not sent, before the server has
// refused anything.
func ExampleWithRateLimitQuota() {
	srv := &spentServer{}
	target, stop := serve(srv)
	defer stop()
	conn, err := grpc.NewClient(target, append(grpcretry.DialOptions(nil,
		grpcretry.WithRateLimitQuota()),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := testpb.NewTestServiceClient(conn)
	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := client.UnaryCall(ctx, &testpb.SimpleRequest{})
		cancel()
		if errors.Is(err, rebound.ErrRateLimited) {
			fmt.Println(status.Code(err), "not sent: the quota is spent until after its deadline")
			continue
		}
		fmt.Println(status.Code(err))
	}
	fmt.Println(srv.calls.Load(), "call reached the server")
	// Output:
	// OK
	// ResourceExhausted not sent: the quota is spent until after its deadline
	// 1 call reached the server
}
