package grpcretry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/internal/grpctest"
	"github.com/rebound-go/rebound/serviceconfig"
)

// streamRec records what each attempt of a streaming handler received, as
// the server saw it.
type streamRec struct {
	mu  sync.Mutex
	got map[int][]string
}

func newStreamRec() *streamRec { return &streamRec{got: map[int][]string{}} }

func (r *streamRec) add(n int, body []byte) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got[n] = append(r.got[n], string(body))
	return len(r.got[n])
}

func (r *streamRec) of(n int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got[n])
}

func msgBodies(n int) []string {
	var b []string
	for i := range n {
		b = append(b, fmt.Sprintf("m%d", i))
	}
	return b
}

func inMsg(body string) *testpb.StreamingInputCallRequest {
	return &testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: []byte(body)}}
}

func outMsg(body string) *testpb.StreamingOutputCallRequest {
	return &testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: []byte(body)}}
}

func outReply(body string) *testpb.StreamingOutputCallResponse {
	return &testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: []byte(body)}}
}

// recvAll receives until RecvMsg fails and returns the bodies and the error.
func recvBodies(st grpc.ClientStream) ([]string, error) {
	var got []string
	for {
		var r testpb.StreamingOutputCallResponse
		if err := st.RecvMsg(&r); err != nil {
			return got, err
		}
		got = append(got, string(r.GetPayload().GetBody()))
	}
}

// hedgeConfig is a service config with a hedging policy on the test service.
func streamHedgeConfig(t testing.TB, maxAttempts int, delay, codes, extra string) *serviceconfig.Config {
	t.Helper()
	js := fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"hedgingPolicy":{
		"maxAttempts":%d,"hedgingDelay":%q,"nonFatalStatusCodes":[%s]}}]%s}`, grpctest.Service, maxAttempts, delay, codes, extra)
	cfg, err := serviceconfig.Parse([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// clientWith dials srv through a rebound Client with the given clock.
func streamClient(t testing.TB, srv *grpctest.Server, cfg *serviceconfig.Config, clk rebound.Clock, opts ...grpcretry.Option) (testpb.TestServiceClient, *grpcretry.Client) {
	t.Helper()
	c, err := grpcretry.New(cfg, append([]grpcretry.Option{grpcretry.WithClock(clk), grpcretry.WithRandom(clocktest.NewRand(0.5))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return testpb.NewTestServiceClient(srv.Dial(t, c.DialOptions()...)), c
}

// wantGaveUp checks that err is an *Error with the code, attempts and
// reason given.
func wantGaveUp(t *testing.T, err error, code codes.Code, attempts int, reason error) {
	t.Helper()
	var ge *rebound.Error
	if !errors.As(err, &ge) || status.Code(err) != code || ge.Attempts != attempts || !errors.Is(err, reason) {
		t.Fatalf("err %v: want *rebound.Error with code %v, %d attempts, reason %v", err, code, attempts, reason)
	}
}

func TestServerStreamRetriedBeforeResponse(t *testing.T) {
	srv := grpctest.Start(t, grpctest.Handlers{ServerStream: func(n int, _ *testpb.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
		if n <= 2 {
			return status.Errorf(codes.Unavailable, "attempt %d fails", n)
		}
		for _, b := range msgBodies(3) {
			if err := s.Send(outReply(b)); err != nil {
				return err
			}
		}
		return nil
	}})
	c, clk := client(t, srv, retryConfig(t, 4, `"UNAVAILABLE"`, ""))
	var n int
	st, err := c.StreamingOutputCall(context.Background(), outMsg("req"), grpcretry.CountAttempts(&n))
	if err != nil {
		t.Fatal(err)
	}
	got, err := recvBodies(st)
	if err != io.EOF || !slices.Equal(got, msgBodies(3)) {
		t.Fatalf("streamRec %v, %v; want %v, io.EOF", got, err, msgBodies(3))
	}
	attempts := srv.Attempts(grpctest.StreamingOutputCall)
	if p := previous(attempts); !slices.Equal(p, []int{-1, 1, 2}) {
		t.Fatalf("server saw grpc-previous-rpc-attempts %v, want [absent 1 2]", p)
	}
	for _, a := range attempts {
		if a.Payload != "req" {
			t.Fatalf("attempt %d carried %q, want the request replayed", a.N, a.Payload)
		}
	}
	if n != 3 {
		t.Fatalf("Attempts reported %d, want 3", n)
	}
	if got := clk.Sleeps(); !slices.Equal(got, []time.Duration{50 * time.Millisecond, 100 * time.Millisecond}) {
		t.Fatalf("backoff %v, want [50ms 100ms]", got)
	}
}

func TestServerStreamNotRetriedAfterMessage(t *testing.T) {
	srv := grpctest.Start(t, grpctest.Handlers{ServerStream: func(_ int, _ *testpb.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
		if err := s.Send(outReply("first")); err != nil {
			return err
		}
		return status.Error(codes.Unavailable, "after a message")
	}})
	c, _ := client(t, srv, retryConfig(t, 4, `"UNAVAILABLE"`, ""))
	var n int
	st, err := c.StreamingOutputCall(context.Background(), outMsg("req"), grpcretry.CountAttempts(&n))
	if err != nil {
		t.Fatal(err)
	}
	got, err := recvBodies(st)
	if !slices.Equal(got, []string{"first"}) {
		t.Fatalf("streamRec %v, want [first]", got)
	}
	wantGaveUp(t, err, codes.Unavailable, 1, rebound.ErrCommitted)
	if srv.Count(grpctest.StreamingOutputCall) != 1 || n != 1 {
		t.Fatalf("%d attempts on the server, %d reported; want 1", srv.Count(grpctest.StreamingOutputCall), n)
	}
	// The stream is done: RecvMsg keeps saying so.
	if err2 := st.RecvMsg(new(testpb.StreamingOutputCallResponse)); status.Code(err2) != codes.Unavailable {
		t.Fatalf("second RecvMsg: %v", err2)
	}
}

func TestServerStreamNotRetriedAfterHeaders(t *testing.T) {
	srv := grpctest.Start(t, grpctest.Handlers{ServerStream: func(_ int, _ *testpb.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
		if err := s.SendHeader(metadata.Pairs("k", "v")); err != nil {
			return err
		}
		return status.Error(codes.Unavailable, "after headers")
	}})
	c, _ := client(t, srv, retryConfig(t, 4, `"UNAVAILABLE"`, ""))
	st, err := c.StreamingOutputCall(context.Background(), outMsg("req"))
	if err != nil {
		t.Fatal(err)
	}
	md, err := st.Header()
	if err != nil || !slices.Equal(md.Get("k"), []string{"v"}) {
		t.Fatalf("Header() = %v, %v; want k=v", md, err)
	}
	_, err = recvBodies(st)
	wantGaveUp(t, err, codes.Unavailable, 1, rebound.ErrCommitted)
	if srv.Count(grpctest.StreamingOutputCall) != 1 {
		t.Fatalf("%d attempts, want 1", srv.Count(grpctest.StreamingOutputCall))
	}
}

// TestClientStreamReplaysSameMessages fails attempt 1 while the client is
// still sending and attempt 2 after it has sent everything; attempt 3 must
// see exactly what was sent, although the application reuses one message
// value for every Send.
func TestClientStreamReplaysSameMessages(t *testing.T) {
	rec := newStreamRec()
	srv := grpctest.Start(t, grpctest.Handlers{ClientStream: func(n int, s grpc.ClientStreamingServer[testpb.StreamingInputCallRequest, testpb.StreamingInputCallResponse]) error {
		for {
			req, err := s.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				return err
			}
			if rec.add(n, req.GetPayload().GetBody()) == 2 && n == 1 {
				return status.Error(codes.Unavailable, "fails after two messages")
			}
		}
		if n == 2 {
			return status.Error(codes.Unavailable, "fails after the last message")
		}
		return s.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: int32(len(rec.of(n)))})
	}})
	c, _ := client(t, srv, retryConfig(t, 4, `"UNAVAILABLE"`, ""))
	var n int
	st, err := c.StreamingInputCall(context.Background(), grpcretry.CountAttempts(&n))
	if err != nil {
		t.Fatal(err)
	}
	req := inMsg("")
	for _, b := range msgBodies(5) {
		req.Payload.Body = []byte(b) // grpc-go allows reuse once Send returns
		if err := st.Send(req); err != nil {
			t.Fatalf("Send(%s): %v", b, err)
		}
	}
	resp, err := st.CloseAndRecv()
	if err != nil || resp.GetAggregatedPayloadSize() != 5 {
		t.Fatalf("CloseAndRecv = %v, %v; want 5 messages streamRec", resp, err)
	}
	if got := rec.of(1); !slices.Equal(got, msgBodies(2)) {
		t.Fatalf("attempt 1 streamRec %v, want %v", got, msgBodies(2))
	}
	for a := 2; a <= 3; a++ {
		if got := rec.of(a); !slices.Equal(got, msgBodies(5)) {
			t.Fatalf("attempt %d streamRec %v, want %v", a, got, msgBodies(5))
		}
	}
	if n != 3 {
		t.Fatalf("Attempts reported %d, want 3", n)
	}
}

// TestBidiReplayWithConcurrentSendRecv sends from one goroutine and
// receives from another while attempt 1 fails and attempt 2 echoes.
func TestBidiReplayWithConcurrentSendRecv(t *testing.T) {
	rec := newStreamRec()
	srv := grpctest.Start(t, grpctest.Handlers{Bidi: func(n int, s grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
		for {
			req, err := s.Recv()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			if k := rec.add(n, req.GetPayload().GetBody()); n == 1 {
				if k == 3 {
					return status.Error(codes.Unavailable, "fails after three messages, before answering")
				}
				continue
			}
			if err := s.Send(outReply(string(req.GetPayload().GetBody()))); err != nil {
				return err
			}
		}
	}})
	c, _ := client(t, srv, retryConfig(t, 4, `"UNAVAILABLE"`, ""))
	st, err := c.FullDuplexCall(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sendErr := make(chan error, 1)
	go func() {
		for _, b := range msgBodies(6) {
			if err := st.Send(outMsg(b)); err != nil {
				sendErr <- err
				return
			}
		}
		sendErr <- st.CloseSend()
	}()
	got, err := recvBodies(st)
	if err != io.EOF || !slices.Equal(got, msgBodies(6)) {
		t.Fatalf("streamRec %v, %v; want %v, io.EOF", got, err, msgBodies(6))
	}
	if err := <-sendErr; err != nil {
		t.Fatal(err)
	}
	if got := rec.of(1); !slices.Equal(got, msgBodies(3)) {
		t.Fatalf("attempt 1 streamRec %v, want %v", got, msgBodies(3))
	}
	if got := rec.of(2); !slices.Equal(got, msgBodies(6)) {
		t.Fatalf("attempt 2 streamRec %v, want %v", got, msgBodies(6))
	}
	if p := previous(srv.Attempts(grpctest.FullDuplexCall)); !slices.Equal(p, []int{-1, 1}) {
		t.Fatalf("grpc-previous-rpc-attempts %v, want [absent 1]", p)
	}
}

func TestBidiNotRetriedAfterMessage(t *testing.T) {
	srv := grpctest.Start(t, grpctest.Handlers{Bidi: func(_ int, s grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
		req, err := s.Recv()
		if err != nil {
			return err
		}
		if err := s.Send(outReply(string(req.GetPayload().GetBody()))); err != nil {
			return err
		}
		return status.Error(codes.Unavailable, "after the echo")
	}})
	c, _ := client(t, srv, retryConfig(t, 4, `"UNAVAILABLE"`, ""))
	st, err := c.FullDuplexCall(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(outMsg("m0")); err != nil {
		t.Fatal(err)
	}
	got, err := recvBodies(st)
	if !slices.Equal(got, []string{"m0"}) {
		t.Fatalf("streamRec %v, want [m0]", got)
	}
	wantGaveUp(t, err, codes.Unavailable, 1, rebound.ErrCommitted)
	if srv.Count(grpctest.FullDuplexCall) != 1 {
		t.Fatalf("%d attempts, want 1", srv.Count(grpctest.FullDuplexCall))
	}
	// A failed stream takes no more messages, as with grpc-go.
	if err := st.Send(outMsg("m1")); err != io.EOF {
		t.Fatalf("Send after the end: %v, want io.EOF", err)
	}
}

// readAllThenFail reads a client stream to its end and fails the first
// attempts with UNAVAILABLE; the last one answers with the count.
func readAllThenFail(rec *streamRec, failing int) func(int, grpc.ClientStreamingServer[testpb.StreamingInputCallRequest, testpb.StreamingInputCallResponse]) error {
	return func(n int, s grpc.ClientStreamingServer[testpb.StreamingInputCallRequest, testpb.StreamingInputCallResponse]) error {
		for {
			req, err := s.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				return err
			}
			rec.add(n, req.GetPayload().GetBody())
		}
		if n <= failing {
			return status.Error(codes.Unavailable, "read everything, then failed")
		}
		return s.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: int32(len(rec.of(n)))})
	}
}

func TestBufferOverflowCommits(t *testing.T) {
	big := string(make([]byte, 1024))
	for _, tc := range []struct {
		messages int
		attempts int
		reason   error
	}{
		{3, 2, nil},                    // 3 KiB and change fit in 4 KiB: retried
		{8, 1, rebound.ErrCommitted},   // the 4th message overflows: committed
		{100, 1, rebound.ErrCommitted}, // and memory stays bounded
	} {
		t.Run(fmt.Sprint(tc.messages), func(t *testing.T) {
			rec := newStreamRec()
			srv := grpctest.Start(t, grpctest.Handlers{ClientStream: readAllThenFail(rec, 1)})
			c, rc := streamClient(t, srv, retryConfig(t, 4, `"UNAVAILABLE"`, ""), clocktest.NewAuto(), grpcretry.WithBufferLimits(1<<20, 4<<10))
			var n int
			st, err := c.StreamingInputCall(context.Background(), grpcretry.CountAttempts(&n))
			if err != nil {
				t.Fatal(err)
			}
			for i := range tc.messages {
				if err := st.Send(inMsg(big)); err != nil {
					t.Fatalf("Send %d: %v", i, err)
				}
				if b := grpcretry.BufferedBytes(rc); b > 4<<10 {
					t.Fatalf("after message %d, %d bytes kept, over the 4 KiB limit", i, b)
				}
			}
			_, err = st.CloseAndRecv()
			if tc.reason == nil {
				if err != nil {
					t.Fatal(err)
				}
			} else {
				wantGaveUp(t, err, codes.Unavailable, 1, tc.reason)
			}
			if n != tc.attempts || srv.Count(grpctest.StreamingInputCall) != tc.attempts {
				t.Fatalf("attempts: %d reported, %d on the server; want %d", n, srv.Count(grpctest.StreamingInputCall), tc.attempts)
			}
			if got := len(rec.of(tc.attempts)); got != tc.messages {
				t.Fatalf("last attempt streamRec %d messages, want %d", got, tc.messages)
			}
			if b := grpcretry.BufferedBytes(rc); b != 0 {
				t.Fatalf("%d bytes still kept after the call", b)
			}
		})
	}
}

// TestTotalBufferLimitCommits fills most of the client's total buffer with
// one stream; the next stream's first message does not fit, so that
// stream is committed and not retried.
func TestTotalBufferLimitCommits(t *testing.T) {
	big := string(make([]byte, 1024))
	cost := grpcretry.Cost(inMsg(big))
	holding, release := make(chan struct{}), make(chan struct{})
	rec := newStreamRec()
	srv := grpctest.Start(t, grpctest.Handlers{ClientStream: func(n int, s grpc.ClientStreamingServer[testpb.StreamingInputCallRequest, testpb.StreamingInputCallResponse]) error {
		if n == 1 { // stream A
			for range 2 {
				if _, err := s.Recv(); err != nil {
					return err
				}
			}
			close(holding)
			<-release
			return s.SendAndClose(&testpb.StreamingInputCallResponse{})
		}
		return readAllThenFail(rec, 100)(n, s) // stream B
	}})
	c, rc := streamClient(t, srv, retryConfig(t, 4, `"UNAVAILABLE"`, ""), clocktest.NewAuto(), grpcretry.WithBufferLimits(3*cost-1, 3*cost-1))
	ctx := context.Background()
	a, err := c.StreamingInputCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := a.Send(inMsg(big)); err != nil {
			t.Fatal(err)
		}
	}
	<-holding
	if b := grpcretry.BufferedBytes(rc); b != int64(2*cost) {
		t.Fatalf("stream A keeps %d bytes, want %d", b, 2*cost)
	}
	b, err := c.StreamingInputCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Send(inMsg(big)); err != nil {
		t.Fatal(err)
	}
	_, err = b.CloseAndRecv()
	wantGaveUp(t, err, codes.Unavailable, 1, rebound.ErrCommitted)
	close(release)
	if _, err := a.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
	if got := srv.Count(grpctest.StreamingInputCall); got != 2 {
		t.Fatalf("%d attempts on the server, want 2 (no retry of stream B)", got)
	}
	if b := grpcretry.BufferedBytes(rc); b != 0 {
		t.Fatalf("%d bytes still kept", b)
	}
}

func TestStreamPushbackAndThrottling(t *testing.T) {
	pushback := func(values ...string) grpctest.Handlers {
		return grpctest.Handlers{ServerStream: func(n int, _ *testpb.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
			if n <= len(values) && values[n-1] != "" {
				s.SetTrailer(metadata.Pairs("grpc-retry-pushback-ms", values[n-1]))
			}
			return status.Error(codes.Unavailable, "busy")
		}}
	}
	for _, tc := range []struct {
		name     string
		h        grpctest.Handlers
		extra    string
		attempts int
		sleeps   []time.Duration
		reason   error
	}{
		{"pushback delay", pushback("", "250"), "", 3, []time.Duration{50 * time.Millisecond, 250 * time.Millisecond}, rebound.ErrAttemptsExhausted},
		{"pushback stop", pushback("-1"), "", 1, nil, rebound.ErrPushback},
		// Tokens 4, threshold 2: 4→3 retry, 3→2 refused.
		{"throttled", pushback(), `,"retryThrottling":{"maxTokens":4,"tokenRatio":0.1}`, 2, []time.Duration{50 * time.Millisecond}, rebound.ErrThrottled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := grpctest.Start(t, tc.h)
			clk := clocktest.NewAuto()
			// A throttle is kept per server name, process-wide: a fresh name
			// gives every run a full one.
			c, _ := streamClient(t, srv, retryConfig(t, 3, `"UNAVAILABLE"`, tc.extra), clk, grpcretry.WithServerName(fmt.Sprintf("%s-%p", t.Name(), srv)))
			st, err := c.StreamingOutputCall(context.Background(), outMsg("req"))
			if err != nil {
				t.Fatal(err)
			}
			_, err = recvBodies(st)
			wantGaveUp(t, err, codes.Unavailable, tc.attempts, tc.reason)
			if got := clk.Sleeps(); !slices.Equal(got, tc.sleeps) {
				t.Fatalf("sleeps %v, want %v", got, tc.sleeps)
			}
		})
	}
}

// A stream whose first attempt succeeds refills the throttle as a retried
// one does (A6: every successful RPC adds tokenRatio), though it makes no
// token of its own.
func TestStreamSuccessRefillsThrottle(t *testing.T) {
	var failing atomic.Bool
	failing.Store(true)
	srv := grpctest.Start(t, grpctest.Handlers{ServerStream: func(int, *testpb.StreamingOutputCallRequest, grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
		if failing.Load() {
			return status.Error(codes.Unavailable, "busy")
		}
		return nil
	}})
	cfg := retryConfig(t, 3, `"UNAVAILABLE"`, `,"retryThrottling":{"maxTokens":4,"tokenRatio":1}`)
	c, _ := streamClient(t, srv, cfg, clocktest.NewAuto(), grpcretry.WithServerName(fmt.Sprintf("%s-%p", t.Name(), srv)))
	call := func() error {
		st, err := c.StreamingOutputCall(context.Background(), outMsg("req"))
		if err != nil {
			return err
		}
		if _, err = recvBodies(st); err == io.EOF {
			return nil
		}
		return err
	}
	// Tokens 4, threshold 2: 4→3 retry, 3→2 refused.
	wantGaveUp(t, call(), codes.Unavailable, 2, rebound.ErrThrottled)
	failing.Store(false)
	for range 2 { // 2→4
		if err := call(); err != nil {
			t.Fatal(err)
		}
	}
	failing.Store(true)
	// Refilled: 4→3 retry, 3→2 refused again. Without the successes'
	// tokens the first failure would be refused at once.
	wantGaveUp(t, call(), codes.Unavailable, 2, rebound.ErrThrottled)
}

func TestStreamBackoffPastDeadline(t *testing.T) {
	srv := grpctest.Start(t, grpctest.Handlers{ServerStream: func(int, *testpb.StreamingOutputCallRequest, grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
		return status.Error(codes.Unavailable, "down")
	}})
	clk := clocktest.NewAuto()
	c, err := grpcretry.New(backoffConfig(t, 5, "600s", `"UNAVAILABLE"`, ""), grpcretry.WithClock(clk), grpcretry.WithRandom(clocktest.NewRand(0.9)))
	if err != nil {
		t.Fatal(err)
	}
	tc := testpb.NewTestServiceClient(srv.Dial(t, c.DialOptions()...))
	// The backoff would be 9 minutes; the deadline is closer, and far
	// enough for the first attempt to fail first on a busy machine.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := tc.StreamingOutputCall(ctx, outMsg("req"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = recvBodies(st)
	wantGaveUp(t, err, codes.Unavailable, 1, rebound.ErrDeadline)
	if len(clk.Sleeps()) != 0 {
		t.Fatalf("slept %v", clk.Sleeps())
	}
}

// TestStreamCallOptionsAndMetadata checks what the application reads of a
// retried stream: Header, Trailer, Context and the grpc.Header,
// grpc.Trailer, grpc.Peer and grpc.OnFinish call options, all from the
// attempt that succeeded, OnFinish once.
func TestStreamCallOptionsAndMetadata(t *testing.T) {
	srv := grpctest.Start(t, grpctest.Handlers{ServerStream: func(n int, _ *testpb.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
		s.SetTrailer(metadata.Pairs("t", fmt.Sprint(n)))
		if n == 1 {
			return status.Error(codes.Unavailable, "first attempt")
		}
		if err := s.SendHeader(metadata.Pairs("h", fmt.Sprint(n))); err != nil {
			return err
		}
		return s.Send(outReply("only"))
	}})
	c, _ := client(t, srv, retryConfig(t, 3, `"UNAVAILABLE"`, ""))
	var hdr, trl metadata.MD
	var p peer.Peer
	var finished []error
	st, err := c.StreamingOutputCall(context.Background(), outMsg("req"),
		grpc.Header(&hdr), grpc.Trailer(&trl), grpc.Peer(&p), grpc.OnFinish(func(err error) { finished = append(finished, err) }))
	if err != nil {
		t.Fatal(err)
	}
	md, err := st.Header()
	if err != nil || !slices.Equal(md.Get("h"), []string{"2"}) {
		t.Fatalf("Header() = %v, %v; want h=2", md, err)
	}
	if pr, ok := peer.FromContext(st.Context()); !ok || pr.Addr.String() != srv.Addr {
		t.Fatalf("Context() peer %v, want %s", pr, srv.Addr)
	}
	if got, err := recvBodies(st); err != io.EOF || !slices.Equal(got, []string{"only"}) {
		t.Fatalf("streamRec %v, %v", got, err)
	}
	if got := st.Trailer().Get("t"); !slices.Equal(got, []string{"2"}) {
		t.Fatalf("Trailer() t=%v, want [2]", got)
	}
	if !slices.Equal(hdr.Get("h"), []string{"2"}) || !slices.Equal(trl.Get("t"), []string{"2"}) || p.Addr == nil {
		t.Fatalf("call options: header %v, trailer %v, peer %v", hdr, trl, p.Addr)
	}
	if len(finished) != 1 || finished[0] != nil {
		t.Fatalf("OnFinish called with %v, want once with nil", finished)
	}
}

func TestStreamCallerCancelEndsAttempts(t *testing.T) {
	started, ended := make(chan struct{}), make(chan error, 1)
	srv := grpctest.Start(t, grpctest.Handlers{Bidi: func(n int, s grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
		close(started)
		<-s.Context().Done()
		ended <- s.Context().Err()
		return s.Context().Err()
	}})
	c, _ := client(t, srv, retryConfig(t, 4, `"UNAVAILABLE","CANCELLED"`, ""))
	ctx, cancel := context.WithCancel(context.Background())
	var n int
	st, err := c.FullDuplexCall(ctx, grpcretry.CountAttempts(&n))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(outMsg("m0")); err != nil {
		t.Fatal(err)
	}
	<-started
	cancel()
	_, err = recvBodies(st)
	wantGaveUp(t, err, codes.Canceled, 1, context.Canceled)
	if n != 1 || srv.Count(grpctest.FullDuplexCall) != 1 {
		t.Fatalf("attempts %d, server %d; want 1", n, srv.Count(grpctest.FullDuplexCall))
	}
	if err := <-ended; err != context.Canceled {
		t.Fatalf("server saw %v, want context.Canceled", err)
	}
}

// TestStreamAbandonedAfterError leaves a stream the moment SendMsg fails:
// nothing of it may outlive the test (goleak checks in TestMain).
func TestStreamAbandonedAfterError(t *testing.T) {
	srv := grpctest.Start(t, grpctest.Handlers{ClientStream: func(int, grpc.ClientStreamingServer[testpb.StreamingInputCallRequest, testpb.StreamingInputCallResponse]) error {
		return status.Error(codes.InvalidArgument, "no")
	}})
	c, _ := client(t, srv, retryConfig(t, 4, `"UNAVAILABLE"`, ""))
	st, err := c.StreamingInputCall(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for {
		if err := st.Send(inMsg("x")); err != nil {
			if err != io.EOF {
				t.Fatalf("Send: %v, want io.EOF", err)
			}
			return
		}
	}
}

// rawCodec encodes []byte as is and proto messages as proto does: a
// client whose messages rebound cannot keep.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	if b, ok := v.(*[]byte); ok {
		return *b, nil
	}
	return proto.Marshal(v.(proto.Message))
}

func (rawCodec) Unmarshal(data []byte, v any) error { return proto.Unmarshal(data, v.(proto.Message)) }

func (rawCodec) Name() string { return "proto" }

func TestStreamNonProtoMessageCommits(t *testing.T) {
	rec := newStreamRec()
	oddFail := readAllThenFail(rec, 1<<30)
	srv := grpctest.Start(t, grpctest.Handlers{ClientStream: func(n int, s grpc.ClientStreamingServer[testpb.StreamingInputCallRequest, testpb.StreamingInputCallResponse]) error {
		if n%2 == 1 {
			return oddFail(n, s)
		}
		return readAllThenFail(rec, 0)(n, s)
	}})
	c, err := grpcretry.New(retryConfig(t, 4, `"UNAVAILABLE"`, ""), grpcretry.WithClock(clocktest.NewAuto()))
	if err != nil {
		t.Fatal(err)
	}
	cc := srv.Dial(t, c.DialOptions()...)
	desc := &grpc.StreamDesc{ClientStreams: true}
	raw, _ := proto.Marshal(inMsg("raw"))
	for _, tc := range []struct {
		msg      any
		attempts int
	}{
		{inMsg("raw"), 2}, // kept: retried
		{&raw, 1},         // cannot be kept: committed
	} {
		before := srv.Count(grpctest.StreamingInputCall)
		st, err := cc.NewStream(context.Background(), desc, grpctest.StreamingInputCall, grpc.ForceCodec(rawCodec{}))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.SendMsg(tc.msg); err != nil {
			t.Fatal(err)
		}
		if err := st.CloseSend(); err != nil {
			t.Fatal(err)
		}
		err = st.RecvMsg(new(testpb.StreamingInputCallResponse))
		if got := srv.Count(grpctest.StreamingInputCall) - before; got != tc.attempts {
			t.Fatalf("%T: %d attempts (err %v), want %d", tc.msg, got, err, tc.attempts)
		}
		if tc.attempts == 1 {
			wantGaveUp(t, err, codes.Unavailable, 1, rebound.ErrCommitted)
		} else if err != nil {
			t.Fatal(err)
		}
		if got := rec.of(before + tc.attempts); !slices.Equal(got, []string{"raw"}) {
			t.Fatalf("%T: last attempt streamRec %q", tc.msg, got)
		}
	}
}

func TestStreamCreationRetried(t *testing.T) {
	// Nothing listens: opening the stream fails fast with UNAVAILABLE,
	// and the retries wait on the fake clock.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis.Close()
	clk := clocktest.NewAuto()
	rc, err := grpcretry.New(retryConfig(t, 3, `"UNAVAILABLE"`, ""), grpcretry.WithClock(clk), grpcretry.WithRandom(clocktest.NewRand(0.5)))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(lis.Addr().String(), append(rc.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	var n int
	_, err = testpb.NewTestServiceClient(cc).StreamingOutputCall(context.Background(), outMsg("req"), grpcretry.CountAttempts(&n))
	wantGaveUp(t, err, codes.Unavailable, 3, rebound.ErrAttemptsExhausted)
	if n != 3 || len(clk.Sleeps()) != 2 {
		t.Fatalf("Attempts %d, sleeps %v; want 3 attempts, 2 sleeps", n, clk.Sleeps())
	}
}

// TestStreamSendAfterCloseSend: a message sent after CloseSend is an
// INTERNAL error, as in grpc-go, which ends the call and its attempt in
// flight: the server sees the stream cancelled, though the attempt (a
// retried call's first) has no context of its own.
func TestStreamSendAfterCloseSend(t *testing.T) {
	ended := make(chan error, 1)
	srv := grpctest.Start(t, grpctest.Handlers{Bidi: func(_ int, s grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
		for {
			if _, err := s.Recv(); err != nil {
				break
			}
		}
		<-s.Context().Done()
		ended <- s.Context().Err()
		return nil
	}})
	c, _ := client(t, srv, retryConfig(t, 4, `"UNAVAILABLE"`, ""))
	st, err := c.FullDuplexCall(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(outMsg("m0")); err != nil {
		t.Fatal(err)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if err := st.Send(outMsg("m1")); status.Code(err) != codes.Internal {
		t.Fatalf("Send after CloseSend: %v, want INTERNAL", err)
	}
	if _, err := st.Recv(); status.Code(err) != codes.Internal {
		t.Fatalf("Recv: %v, want INTERNAL", err)
	}
	select {
	case err := <-ended:
		if err != context.Canceled {
			t.Fatalf("the server's stream ended with %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the attempt is still open on the server")
	}
	if got := srv.Count(grpctest.FullDuplexCall); got != 1 {
		t.Fatalf("%d attempts, want 1", got)
	}
}

// TestStreamHeaderRetries: the application's first call is Header, which
// learns that attempt 1 failed before any response, retries, and returns
// the headers of attempt 2.
func TestStreamHeaderRetries(t *testing.T) {
	srv := grpctest.Start(t, grpctest.Handlers{ServerStream: func(n int, _ *testpb.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
		if n == 1 {
			return status.Error(codes.Unavailable, "busy")
		}
		if err := s.SendHeader(metadata.Pairs("attempt", fmt.Sprint(n))); err != nil {
			return err
		}
		return s.Send(outReply("r"))
	}})
	c, _ := client(t, srv, retryConfig(t, 4, `"UNAVAILABLE"`, ""))
	var n int
	st, err := c.StreamingOutputCall(context.Background(), outMsg("req"), grpcretry.CountAttempts(&n))
	if err != nil {
		t.Fatal(err)
	}
	md, err := st.Header()
	if err != nil || !slices.Equal(md.Get("attempt"), []string{"2"}) {
		t.Fatalf("Header() = %v, %v; want attempt=2", md, err)
	}
	got, err := recvBodies(st)
	if err != io.EOF || !slices.Equal(got, []string{"r"}) {
		t.Fatalf("received %v, then %v; want [r], then io.EOF", got, err)
	}
	if n != 2 || srv.Count(grpctest.StreamingOutputCall) != 2 {
		t.Fatalf("Attempts %d, server saw %d; want 2", n, srv.Count(grpctest.StreamingOutputCall))
	}
}
