package grpcretry_test

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/internal/grpctest"
)

type inServer = grpc.ClientStreamingServer[testpb.StreamingInputCallRequest, testpb.StreamingInputCallResponse]

// TestHedgedClientStreamWinnerGetsAll starts a hedge after two messages:
// it is sent them first, then every later message with the original; it
// answers and wins, and the original, which never answers, is cancelled.
func TestHedgedClientStreamWinnerGetsAll(t *testing.T) {
	rec := newStreamRec()
	twoIn, lostErr := make(chan struct{}), make(chan error, 1)
	srv := grpctest.Start(t, grpctest.Handlers{ClientStream: func(n int, s inServer) error {
		for {
			req, err := s.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				if n == 1 {
					lostErr <- s.Context().Err()
				}
				return err
			}
			if rec.add(n, req.GetPayload().GetBody()) == 2 && n == 1 {
				close(twoIn)
			}
		}
		if n == 1 {
			<-s.Context().Done()
			lostErr <- s.Context().Err()
			return s.Context().Err()
		}
		return s.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: int32(len(rec.of(n)))})
	}})
	clk := clocktest.New()
	c, _ := streamClient(t, srv, streamHedgeConfig(t, 2, "1s", `"UNAVAILABLE"`, ""), clk)
	var n int
	st, err := c.StreamingInputCall(context.Background(), grpcretry.CountAttempts(&n))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range msgBodies(2) {
		if err := st.Send(inMsg(b)); err != nil {
			t.Fatal(err)
		}
	}
	<-twoIn
	if !clk.WaitPending(1) {
		t.Fatal("no hedging timer")
	}
	clk.Advance(time.Second)
	for _, b := range msgBodies(4)[2:] {
		if err := st.Send(inMsg(b)); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := st.CloseAndRecv()
	if err != nil || resp.GetAggregatedPayloadSize() != 4 {
		t.Fatalf("CloseAndRecv = %v, %v; want the hedge's count of 4", resp, err)
	}
	if got := rec.of(2); !slices.Equal(got, msgBodies(4)) {
		t.Fatalf("the hedge received %v, want %v", got, msgBodies(4))
	}
	if err := <-lostErr; err != context.Canceled {
		t.Fatalf("the original ended with %v on the server, want context.Canceled", err)
	}
	if got := rec.of(1); !slices.Equal(got, msgBodies(len(got))) {
		t.Fatalf("the original received %v, not a prefix of the messages", got)
	}
	if p := previous(srv.Attempts(grpctest.StreamingInputCall)); !slices.Equal(p, []int{-1, 1}) || n != 2 {
		t.Fatalf("grpc-previous-rpc-attempts %v, Attempts %d; want [absent 1], 2", p, n)
	}
}

// TestHedgedBidiFirstResponseWins runs three attempts at once; the one the
// server answers wins and is echoed to the application, which sends and
// receives from two goroutines; the others are cancelled.
func TestHedgedBidiFirstResponseWins(t *testing.T) {
	ended, all := make(chan error, 3), make(chan struct{})
	var arrived atomic.Int32
	srv := grpctest.Start(t, grpctest.Handlers{Bidi: func(n int, s grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
		if arrived.Add(1) == 3 {
			close(all)
		}
		if n != 2 {
			<-s.Context().Done()
			ended <- s.Context().Err()
			return s.Context().Err()
		}
		<-all // every attempt reaches the server before one answers
		for {
			req, err := s.Recv()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			if err := s.Send(outReply(string(req.GetPayload().GetBody()))); err != nil {
				return err
			}
		}
	}})
	c, _ := streamClient(t, srv, streamHedgeConfig(t, 3, "0s", `"UNAVAILABLE"`, ""), clocktest.New())
	var n int
	st, err := c.FullDuplexCall(context.Background(), grpcretry.CountAttempts(&n))
	if err != nil {
		t.Fatal(err)
	}
	sendErr := make(chan error, 1)
	go func() {
		for _, b := range msgBodies(5) {
			if err := st.Send(outMsg(b)); err != nil {
				sendErr <- err
				return
			}
		}
		sendErr <- st.CloseSend()
	}()
	got, err := recvBodies(st)
	if err != io.EOF || !slices.Equal(got, msgBodies(5)) {
		t.Fatalf("received %v, %v; want %v, io.EOF", got, err, msgBodies(5))
	}
	if err := <-sendErr; err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-ended; err != context.Canceled {
			t.Fatalf("a losing attempt ended with %v on the server, want context.Canceled", err)
		}
	}
	if n != 3 {
		t.Fatalf("Attempts %d, want 3", n)
	}
}

func TestHedgedStreamFailures(t *testing.T) {
	fail := func(code codes.Code, pushback string) func(*testpb.StreamingOutputCallRequest, grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
		return func(_ *testpb.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
			if pushback != "" {
				s.SetTrailer(metadata.Pairs("grpc-retry-pushback-ms", pushback))
			}
			return status.Error(code, "failed")
		}
	}
	answer := func(_ *testpb.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
		return s.Send(outReply("ok"))
	}
	for _, tc := range []struct {
		name     string
		attempts []func(*testpb.StreamingOutputCallRequest, grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error
		code     codes.Code
		made     int
		reason   error
	}{
		// A non-fatal failure sends the next hedge at once, although
		// the hedging delay has not passed.
		{"non-fatal", []func(*testpb.StreamingOutputCallRequest, grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error{fail(codes.Unavailable, ""), answer}, codes.OK, 2, nil},
		{"fatal", []func(*testpb.StreamingOutputCallRequest, grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error{fail(codes.InvalidArgument, "")}, codes.InvalidArgument, 1, rebound.ErrNotRetryable},
		{"pushback stop", []func(*testpb.StreamingOutputCallRequest, grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error{fail(codes.Unavailable, "-1")}, codes.Unavailable, 1, rebound.ErrPushback},
		{"all fail", []func(*testpb.StreamingOutputCallRequest, grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error{fail(codes.Unavailable, ""), fail(codes.Unavailable, ""), fail(codes.Unavailable, "")}, codes.Unavailable, 3, rebound.ErrAttemptsExhausted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := grpctest.Start(t, grpctest.Handlers{ServerStream: func(n int, req *testpb.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
				return tc.attempts[n-1](req, s)
			}})
			clk := clocktest.New()
			c, _ := streamClient(t, srv, streamHedgeConfig(t, 3, "10s", `"UNAVAILABLE"`, ""), clk)
			var n int
			st, err := c.StreamingOutputCall(context.Background(), outMsg("req"), grpcretry.CountAttempts(&n))
			if err != nil {
				t.Fatal(err)
			}
			got, err := recvBodies(st)
			if tc.code == codes.OK {
				if err != io.EOF || !slices.Equal(got, []string{"ok"}) {
					t.Fatalf("received %v, %v", got, err)
				}
			} else {
				wantGaveUp(t, err, tc.code, tc.made, tc.reason)
			}
			if n != tc.made || srv.Count(grpctest.StreamingOutputCall) != tc.made {
				t.Fatalf("Attempts %d, server %d; want %d", n, srv.Count(grpctest.StreamingOutputCall), tc.made)
			}
		})
	}
}

// TestHedgedStreamRefusedAfterPushback: the only attempt fails with a
// pushback delay, and when the delay is up the throttle refuses the hedge.
// Nothing runs any more, so the call ends at once.
func TestHedgedStreamRefusedAfterPushback(t *testing.T) {
	srv := grpctest.Start(t, grpctest.Handlers{ServerStream: func(_ int, _ *testpb.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
		s.SetTrailer(metadata.Pairs("grpc-retry-pushback-ms", "50"))
		return status.Error(codes.Unavailable, "later")
	}})
	clk := clocktest.New()
	// maxTokens 2, threshold 1: the failure leaves 1 token, too few.
	cfg := streamHedgeConfig(t, 3, "10s", `"UNAVAILABLE"`, `,"retryThrottling":{"maxTokens":2,"tokenRatio":1}`)
	c, _ := streamClient(t, srv, cfg, clk, grpcretry.WithServerName(fmt.Sprintf("%s-%p", t.Name(), srv)))
	// A regression would wait for the deadline: fail instead of hanging.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := c.StreamingOutputCall(ctx, outMsg("req"))
	if err != nil {
		t.Fatal(err)
	}
	// The application's Recv learns of the failure, and waits for what
	// follows.
	recvErr := make(chan error, 1)
	go func() {
		_, err := recvBodies(st)
		recvErr <- err
	}()
	if !clk.WaitCreated(2) { // the hedging delay, then the pushback delay
		t.Fatal("no pushback timer")
	}
	clk.Advance(50 * time.Millisecond)
	wantGaveUp(t, <-recvErr, codes.Unavailable, 1, rebound.ErrThrottled)
}

// TestHedgeOverflowKeepsAttemptWithMostMessages overflows the buffer of a
// hedged stream whose hedge is stuck behind flow control: the original,
// which has sent every message, goes on alone and gets them all; the hedge
// is cancelled.
func TestHedgeOverflowKeepsAttemptWithMostMessages(t *testing.T) {
	const size, perRPC, total = 16 << 10, 512 << 10, 40
	msg := func(i int) *testpb.StreamingInputCallRequest {
		b := make([]byte, size)
		copy(b, fmt.Sprintf("m%d", i))
		return &testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: b}}
	}
	fit := perRPC / grpcretry.Cost(msg(0)) // the next one overflows
	rec := newStreamRec()
	gotFit, hedgeErr := make(chan struct{}), make(chan error, 1)
	srv := grpctest.Start(t, grpctest.Handlers{ClientStream: func(n int, s inServer) error {
		if grpcretry.PreviousAttempts(s.Context()) == 1 {
			// The hedge reads nothing: flow control stops its sender.
			<-s.Context().Done()
			hedgeErr <- s.Context().Err()
			return s.Context().Err()
		}
		for {
			req, err := s.Recv()
			if err == io.EOF {
				return s.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: int32(len(rec.of(0)))})
			}
			if err != nil {
				return err
			}
			if rec.add(0, req.GetPayload().GetBody()[:4]) == fit {
				close(gotFit)
			}
		}
	}}, grpc.InitialWindowSize(64<<10), grpc.InitialConnWindowSize(4<<20))
	c, rc := streamClient(t, srv, streamHedgeConfig(t, 2, "0s", `"UNAVAILABLE"`, ""), clocktest.New(), grpcretry.WithBufferLimits(16<<20, perRPC))
	// Should the wrong attempt go on, its stalled sender would block the
	// test: the deadline turns that into a failure.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := c.StreamingInputCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range fit {
		if err := st.Send(msg(i)); err != nil {
			t.Fatal(err)
		}
	}
	<-gotFit // the original has sent all it was given; the hedge is stalled far behind
	for i := fit; i < total; i++ {
		if err := st.Send(msg(i)); err != nil {
			t.Fatal(err)
		}
		if b := grpcretry.BufferedBytes(rc); b > perRPC {
			t.Fatalf("%d bytes kept, over the per-RPC limit", b)
		}
	}
	resp, err := st.CloseAndRecv()
	if err != nil || resp.GetAggregatedPayloadSize() != total {
		t.Fatalf("CloseAndRecv = %v, %v; want all %d messages", resp, err, total)
	}
	want := msgBodies(total)
	for i := range want {
		want[i] = (want[i] + "\x00\x00\x00")[:4]
	}
	if got := rec.of(0); !slices.Equal(got, want) {
		t.Fatalf("the original received %v, want %v", got, want)
	}
	if err := <-hedgeErr; err != context.Canceled {
		t.Fatalf("the hedge ended with %v on the server, want context.Canceled", err)
	}
	if b := grpcretry.BufferedBytes(rc); b != 0 {
		t.Fatalf("%d bytes still kept", b)
	}
}

// headerSignal is a stats handler that tells when a response's headers
// have arrived at the client. Installed after rebound's own, it runs after
// it.
type headerSignal chan struct{}

func (h headerSignal) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (h headerSignal) HandleRPC(_ context.Context, s stats.RPCStats) {
	if _, ok := s.(*stats.InHeader); ok {
		select {
		case h <- struct{}{}:
		default:
		}
	}
}
func (h headerSignal) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (h headerSignal) HandleConn(context.Context, stats.ConnStats)                       {}

// TestHedgedStreamHeadersBeforeDelay: the first attempt's response headers
// arrive before the hedging delay while the application reads nothing;
// when the delay passes no hedge is sent (A6: headers commit the call),
// whether rebound hears of the headers from its stats handler or, when
// only its interceptor is installed, from a goroutine waiting for them.
func TestHedgedStreamHeadersBeforeDelay(t *testing.T) {
	for _, handler := range []bool{true, false} {
		t.Run(fmt.Sprintf("stats handler=%v", handler), func(t *testing.T) {
			release := make(chan struct{})
			srv := grpctest.Start(t, grpctest.Handlers{ServerStream: func(_ int, _ *testpb.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
				if err := s.SendHeader(metadata.Pairs("k", "v")); err != nil {
					return err
				}
				select {
				case <-release:
				case <-s.Context().Done():
					return s.Context().Err()
				}
				return s.Send(&testpb.StreamingOutputCallResponse{})
			}})
			clk := clocktest.New()
			rc, err := grpcretry.New(streamHedgeConfig(t, 3, "1s", `"UNAVAILABLE"`, ""), grpcretry.WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			arrived := make(headerSignal, 1)
			opts := []grpc.DialOption{grpc.WithStreamInterceptor(rc.StreamClientInterceptor()), grpc.WithStatsHandler(arrived)}
			if handler {
				opts = append(rc.DialOptions(), grpc.WithStatsHandler(arrived))
			}
			c := testpb.NewTestServiceClient(srv.Dial(t, opts...))
			var n int
			st, err := c.StreamingOutputCall(context.Background(), outMsg("req"), grpcretry.CountAttempts(&n))
			if err != nil {
				t.Fatal(err)
			}
			<-arrived
			if !handler && !clk.WaitPending(0) {
				// The goroutine that waited for the headers has committed
				// the call and stopped the hedging timer.
				t.Fatal("the hedging timer is still armed after the headers")
			}
			clk.Advance(time.Second)
			close(release)
			if got, err := recvBodies(st); err != io.EOF || len(got) != 1 {
				t.Fatalf("received %d messages, then %v; want 1, then io.EOF", len(got), err)
			}
			if got := srv.Count(grpctest.StreamingOutputCall); got != 1 || n != 1 {
				t.Fatalf("server saw %d attempts, Attempts %d; want 1 (no hedge after the headers)", got, n)
			}
		})
	}
}
