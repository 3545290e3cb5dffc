package bench

import (
	"context"
	"errors"
	"io"
	"testing"

	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

var okStreamReply = &testpb.StreamingOutputCallResponse{}

// StreamingOutputCall answers a server stream with one message.
func (s *flakyServer) StreamingOutputCall(_ *testpb.StreamingOutputCallRequest, st grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	s.attempts.Add(1)
	return st.Send(okStreamReply)
}

// FullDuplexCall answers each message of a bidi stream with one.
func (s *flakyServer) FullDuplexCall(st grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
	s.attempts.Add(1)
	for {
		if _, err := st.Recv(); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		if err := st.Send(okStreamReply); err != nil {
			return err
		}
	}
}

// streamLibs are the contenders of BenchmarkStream: bare grpc-go, and
// rebound under the retry and the hedging policy of BenchmarkUnary.
var streamLibs = []grpcLib{
	{"rebound", func(tb testing.TB, c unaryCase) ([]grpc.DialOption, bool) {
		return reboundClient(tb, c).DialOptions(), true
	}},
	{"rebound-hedge", func(tb testing.TB, _ unaryCase) ([]grpc.DialOption, bool) {
		return reboundHedgeClient(tb).DialOptions(), true
	}},
	{"bare", func(testing.TB, unaryCase) ([]grpc.DialOption, bool) {
		return []grpc.DialOption{grpc.WithDisableRetry()}, true
	}},
	// bare-stats is bare grpc-go with a stats handler that does nothing:
	// the floor of a hedged stream, whose conn has rebound's handler
	// (grpc-go builds its stats events for every call once a conn has one).
	{"bare-stats", func(testing.TB, unaryCase) ([]grpc.DialOption, bool) {
		return []grpc.DialOption{grpc.WithDisableRetry(), grpc.WithStatsHandler(noopStats{})}, true
	}},
}

// BenchmarkStream is the success path of a stream against the server of
// BenchmarkUnary: a server stream (one request, one response, then the
// status) and a bidi stream (one message each way, then the status), bare
// and through rebound's retry and hedging policies, none of which has to
// act. Each op is one whole stream.
func BenchmarkStream(b *testing.B) {
	srv := startFlakyServer(b)
	for _, kind := range []string{"server", "bidi"} {
		for _, lib := range streamLibs {
			b.Run("kind="+kind+"/lib="+lib.name, func(b *testing.B) {
				opts, _ := lib.options(b, unaryCases[0])
				tc := srv.dial(b, opts...)
				call := serverStream
				if kind == "bidi" {
					call = bidiStream
				}
				ctx := context.Background()
				if err := call(ctx, tc); err != nil { // connect
					b.Fatal(err)
				}
				srv.reset(0, false)
				b.ReportAllocs()
				for b.Loop() {
					if err := call(ctx, tc); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				if got := srv.attempts.Load(); got != int64(b.N) {
					b.Fatalf("%d attempts for %d streams", got, b.N)
				}
			})
		}
	}
}

func serverStream(ctx context.Context, tc testpb.TestServiceClient) error {
	st, err := tc.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{})
	if err != nil {
		return err
	}
	if _, err := st.Recv(); err != nil {
		return err
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

func bidiStream(ctx context.Context, tc testpb.TestServiceClient) error {
	st, err := tc.FullDuplexCall(ctx)
	if err != nil {
		return err
	}
	if err := st.Send(&testpb.StreamingOutputCallRequest{}); err != nil {
		return err
	}
	if _, err := st.Recv(); err != nil {
		return err
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}
