package grpcretry_test

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"testing"

	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/grpctest"
)

// BenchmarkStream measures streaming throughput in 1 KiB messages through
// bare grpc-go, grpc-go's own A6 retries and rebound, against the same
// server, on one ClientConn each:
//
//   - ClientStream: one long client stream; rebound keeps the first MiB,
//     then commits on the overflow and passes messages straight through.
//   - ServerStream: one long server stream; its first message commits.
//   - Bidi: one long stream, sending from one goroutine and receiving the
//     echoes on another; the first echo commits.
//   - ClientStream64: client streams of 64 messages, each kept whole until
//     the response: the cost of keeping messages for replay.
//
// b.N counts messages; MB/s counts the payload of one direction; cpu-ns/op
// is the CPU time of client and server per message, which other loads on
// the machine disturb less than ns/op.
func BenchmarkStream(b *testing.B) {
	payload := make([]byte, 1024)
	in := &testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: payload}}
	out := &testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: payload}}
	srv := grpctest.Start(b, grpctest.Handlers{
		ClientStream: func(_ int, s grpc.ClientStreamingServer[testpb.StreamingInputCallRequest, testpb.StreamingInputCallResponse]) error {
			var n int32
			for {
				if _, err := s.Recv(); err == io.EOF {
					return s.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: n})
				} else if err != nil {
					return err
				}
				n++
			}
		},
		// The request's payload is the number of messages to send.
		ServerStream: func(_ int, req *testpb.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
			n, err := strconv.Atoi(string(req.GetPayload().GetBody()))
			if err != nil {
				return err
			}
			for range n {
				if err := s.Send(out); err != nil {
					return err
				}
			}
			return nil
		},
		Bidi: func(_ int, s grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
			for {
				if _, err := s.Recv(); err == io.EOF {
					return nil
				} else if err != nil {
					return err
				}
				if err := s.Send(out); err != nil {
					return err
				}
			}
		},
	})
	policy := fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"retryPolicy":{
		"maxAttempts":4,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,
		"retryableStatusCodes":["UNAVAILABLE"]}}]}`, grpctest.Service)
	clients := []struct {
		name string
		tc   testpb.TestServiceClient
	}{
		{"bare", testpb.NewTestServiceClient(srv.Dial(b, grpc.WithDisableRetry()))},
		{"grpc-retry", testpb.NewTestServiceClient(srv.Dial(b, grpc.WithDefaultServiceConfig(policy)))},
		{"rebound", testpb.NewTestServiceClient(srv.Dial(b, grpcretry.DialOptions(retryConfig(b, 4, `"UNAVAILABLE"`, ""))...))},
	}
	ctx := context.Background()
	for _, cl := range clients {
		if _, err := cl.tc.UnaryCall(ctx, grpctest.Request("connect")); err != nil {
			b.Fatal(err)
		}
	}
	// clientStreams sends b.N messages in streams of per messages.
	clientStreams := func(b *testing.B, tc testpb.TestServiceClient, per int) {
		for sent := 0; sent < b.N; {
			st, err := tc.StreamingInputCall(ctx)
			if err != nil {
				b.Fatal(err)
			}
			n := min(per, b.N-sent)
			for range n {
				if err := st.Send(in); err != nil {
					b.Fatal(err)
				}
			}
			if resp, err := st.CloseAndRecv(); err != nil || int(resp.GetAggregatedPayloadSize()) != n {
				b.Fatalf("CloseAndRecv = %v, %v", resp, err)
			}
			sent += n
		}
	}
	kinds := []struct {
		name string
		run  func(*testing.B, testpb.TestServiceClient)
	}{
		{"ClientStream", func(b *testing.B, tc testpb.TestServiceClient) { clientStreams(b, tc, b.N) }},
		{"ServerStream", func(b *testing.B, tc testpb.TestServiceClient) {
			st, err := tc.StreamingOutputCall(ctx, outMsg(strconv.Itoa(b.N)))
			if err != nil {
				b.Fatal(err)
			}
			var m testpb.StreamingOutputCallResponse
			for range b.N {
				if err := st.RecvMsg(&m); err != nil {
					b.Fatal(err)
				}
			}
			if err := st.RecvMsg(&m); err != io.EOF {
				b.Fatal(err)
			}
		}},
		{"Bidi", func(b *testing.B, tc testpb.TestServiceClient) {
			st, err := tc.FullDuplexCall(ctx)
			if err != nil {
				b.Fatal(err)
			}
			sent := make(chan error, 1)
			go func() {
				req := &testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: payload}}
				for range b.N {
					if err := st.Send(req); err != nil {
						sent <- err
						return
					}
				}
				sent <- st.CloseSend()
			}()
			var m testpb.StreamingOutputCallResponse
			for range b.N {
				if err := st.RecvMsg(&m); err != nil {
					b.Fatal(err)
				}
			}
			if err := st.RecvMsg(&m); err != io.EOF {
				b.Fatal(err)
			}
			if err := <-sent; err != nil {
				b.Fatal(err)
			}
		}},
		{"ClientStream64", func(b *testing.B, tc testpb.TestServiceClient) { clientStreams(b, tc, 64) }},
	}
	for _, k := range kinds {
		for _, cl := range clients {
			b.Run(k.name+"/"+cl.name, func(b *testing.B) {
				b.SetBytes(int64(len(payload)))
				b.ReportAllocs()
				cpu := cpuTime()
				k.run(b, cl.tc)
				if cpu > 0 {
					// Client and server together: both run in this process.
					b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
				}
			})
		}
	}
}

// answeredStream is a client stream that answers at once: one message,
// then the end. It stands in for grpc-go in BenchmarkStreamInterceptorSuccess.
type answeredStream struct {
	ctx context.Context
	n   int
}

func (f *answeredStream) Header() (metadata.MD, error) { return metadata.MD{}, nil }
func (f *answeredStream) Trailer() metadata.MD         { return nil }
func (f *answeredStream) CloseSend() error             { return nil }
func (f *answeredStream) Context() context.Context     { return f.ctx }
func (f *answeredStream) SendMsg(any) error            { return nil }
func (f *answeredStream) RecvMsg(any) error {
	f.n++
	if f.n == 1 {
		return nil
	}
	return io.EOF
}

// BenchmarkStreamInterceptorSuccess is the stream interceptor's own cost
// on the success path of a server stream under a retry policy (one
// request, one response, the end): the streamer answers at once, with no
// network in between, so the figures are free of the round trip's noise.
func BenchmarkStreamInterceptorSuccess(b *testing.B) {
	c, err := grpcretry.New(retryConfig(b, 4, `"UNAVAILABLE"`, ""))
	if err != nil {
		b.Fatal(err)
	}
	si := c.StreamClientInterceptor()
	desc := &grpc.StreamDesc{ServerStreams: true}
	streamer := func(ctx context.Context, _ *grpc.StreamDesc, _ *grpc.ClientConn, _ string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
		return &answeredStream{ctx: ctx}, nil
	}
	ctx := context.Background()
	req, resp := grpctest.Request("x"), new(testpb.StreamingOutputCallResponse)
	b.ReportAllocs()
	for b.Loop() {
		cs, err := si(ctx, desc, nil, grpctest.StreamingOutputCall, streamer)
		if err != nil {
			b.Fatal(err)
		}
		if err := cs.SendMsg(req); err != nil {
			b.Fatal(err)
		}
		cs.CloseSend()
		if err := cs.RecvMsg(resp); err != nil {
			b.Fatal(err)
		}
		if err := cs.RecvMsg(resp); err != io.EOF {
			b.Fatal(err)
		}
	}
}
