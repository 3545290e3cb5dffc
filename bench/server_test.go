package bench

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
)

// testService is the full name of grpc-go's interop TestService.
const testService = "grpc.testing.TestService"

// flakyServer is a grpc-go TestService on 127.0.0.1 whose UnaryCall fails
// the first attempt of a chosen share of the calls with UNAVAILABLE, and
// answers their retries OK. The peers send no attempt header in common, so
// a call is told by its number, which the client puts in the request's
// response_size (see nextCall): every library resends the same request on
// each attempt. The server counts attempts with one atomic and answers with
// a shared reply, so that it costs every library the same and as little as
// possible. It is safe for concurrent use; change its mode (reset) only
// while no call is in flight.
type flakyServer struct {
	testpb.UnimplementedTestServiceServer

	addr string
	// attempts counts the UnaryCall attempts received since the last reset.
	attempts atomic.Int64
	// calls numbers the calls since the last reset, from 1.
	calls atomic.Int32
	// failEvery k > 0 fails the first attempt of calls k, 2k, 3k, …
	failEvery atomic.Int32
	// failAll fails every attempt.
	failAll atomic.Bool
	// failed remembers the number of the last call failed in each slot,
	// so that its retry is told from its first attempt; calls share a
	// slot only 1024 failures apart.
	failed [1024]atomic.Int32
}

var (
	okReply     = &testpb.SimpleResponse{}
	unavailable = status.Error(codes.Unavailable, "bench: flaky")
)

// startFlakyServer serves on a free 127.0.0.1 port until tb ends.
func startFlakyServer(tb testing.TB) *flakyServer {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s := &flakyServer{addr: lis.Addr().String()}
	srv := grpc.NewServer()
	testpb.RegisterTestServiceServer(srv, s)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	tb.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return s
}

// reset sets the mode: fail the first attempt of every failEvery-th call
// (none when 0), or with failAll every attempt; and restarts the counts.
func (s *flakyServer) reset(failEvery int32, failAll bool) {
	s.failEvery.Store(failEvery)
	s.failAll.Store(failAll)
	s.attempts.Store(0)
	s.calls.Store(0)
	for i := range s.failed {
		s.failed[i].Store(0)
	}
}

// nextCall numbers req as the next call.
func (s *flakyServer) nextCall(req *testpb.SimpleRequest) {
	req.ResponseSize = s.calls.Add(1)
}

func (s *flakyServer) UnaryCall(_ context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	s.attempts.Add(1)
	if s.failAll.Load() {
		return nil, unavailable
	}
	if k, n := s.failEvery.Load(), req.GetResponseSize(); k > 0 && n > 0 && n%k == 0 {
		if s.failed[(n/k)%int32(len(s.failed))].Swap(n) != n {
			return nil, unavailable
		}
	}
	return okReply, nil
}

// dial returns a client of s with opts, closed when tb ends.
func (s *flakyServer) dial(tb testing.TB, opts ...grpc.DialOption) testpb.TestServiceClient {
	tb.Helper()
	cc, err := grpc.NewClient(s.addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cc.Close() })
	return testpb.NewTestServiceClient(cc)
}
