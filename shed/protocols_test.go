package shed_test

import (
	"context"
	"io"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound/internal/grpctest"
	"github.com/rebound-go/rebound/shed"
)

// A stream holds its slot until its handler returns; a stream beyond the
// limit is refused with the pushback trailer and never reaches the
// handler.
func TestStreamInterceptor(t *testing.T) {
	s, _ := shed.New(fixed(1))
	entered, release := make(chan struct{}), make(chan struct{})
	srv := grpctest.Start(t, grpctest.Handlers{
		ServerStream: func(n int, _ *testpb.StreamingOutputCallRequest, st grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
			if n == 1 {
				close(entered)
				<-release
			}
			return st.Send(&testpb.StreamingOutputCallResponse{})
		},
	}, grpc.ChainStreamInterceptor(s.StreamServerInterceptor()))
	client := testpb.NewTestServiceClient(srv.Dial(t))
	first, err := client.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{})
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	second, err := client.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := second.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("second stream: %v, want UNAVAILABLE", err)
	}
	if got := second.Trailer()["grpc-retry-pushback-ms"]; len(got) != 1 || got[0] != "-1" {
		t.Fatalf("second stream's pushback %q, want [-1]", got)
	}
	close(release)
	if _, err := first.Recv(); err != nil {
		t.Fatalf("first stream: %v", err)
	}
	if _, err := first.Recv(); err != io.EOF {
		t.Fatalf("first stream end: %v", err)
	}
	if n := srv.Count(grpctest.StreamingOutputCall); n != 1 {
		t.Fatalf("the handler saw %d streams, want 1", n)
	}
	if st := s.Stats(); st.Admitted != 1 || st.ShedStop != 1 || st.InFlight != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// A handler that panics gives its slot back, when a recovery interceptor
// further out turns the panic into a status.
func TestPanicReleasesSlot(t *testing.T) {
	s, _ := shed.New(fixed(1))
	recoverer := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if recover() != nil {
				err = status.Error(codes.Internal, "panic")
			}
		}()
		return handler(ctx, req)
	}
	srv := grpctest.Start(t, grpctest.Handlers{Unary: func(context.Context, int, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		panic("bug")
	}}, grpc.ChainUnaryInterceptor(recoverer, s.UnaryServerInterceptor()))
	client := testpb.NewTestServiceClient(srv.Dial(t))
	for range 3 {
		if _, err := client.UnaryCall(context.Background(), grpctest.Request("x")); status.Code(err) != codes.Internal {
			t.Fatalf("err = %v, want INTERNAL from the recovered panic", err)
		}
	}
	if st := s.Stats(); st.Admitted != 3 || st.InFlight != 0 {
		t.Fatalf("stats %+v: a panicking handler kept its slot", st)
	}
}
