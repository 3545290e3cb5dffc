package grpcretry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/internal/grpctest"
	"github.com/rebound-go/rebound/serviceconfig"
)

// attemptTimeout is short, so that hung attempts end quickly; tests
// assert counts and codes, never how long anything took.
const attemptTimeout = 100 * time.Millisecond

// hangFirst makes the first n unary attempts hang until the server ends
// them, and answers the others. deadlines receives, for each attempt, how
// long the server had left on its deadline (-1 when it had none).
func hangFirst(n int, deadlines chan<- time.Duration) grpctest.Handlers {
	return grpctest.Handlers{Unary: func(ctx context.Context, i int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		if deadlines != nil {
			left := time.Duration(-1)
			if dl, ok := ctx.Deadline(); ok {
				left = time.Until(dl)
			}
			deadlines <- left
		}
		if i <= n {
			<-ctx.Done()
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return &testpb.SimpleResponse{}, nil
	}}
}

func TestPerAttemptTimeoutUnaryRetries(t *testing.T) {
	deadlines := make(chan time.Duration, 2)
	srv := grpctest.Start(t, hangFirst(1, deadlines))
	// DEADLINE_EXCEEDED is not retryable: the timed-out attempt is
	// retried anyway.
	c, err := grpcretry.New(retryConfig(t, 3, `"UNAVAILABLE"`, ""), grpcretry.WithPerAttemptTimeout(attemptTimeout))
	if err != nil {
		t.Fatal(err)
	}
	tc := testpb.NewTestServiceClient(srv.Dial(t, c.DialOptions()...))
	var n int
	if _, err := tc.UnaryCall(context.Background(), grpctest.Request("x"), grpcretry.CountAttempts(&n)); err != nil {
		t.Fatal(err)
	}
	if n != 2 || srv.Count(grpctest.UnaryCall) != 2 {
		t.Fatalf("%d attempts, server saw %d; want 2", n, srv.Count(grpctest.UnaryCall))
	}
	// The server sees the per-attempt deadline (grpc-timeout), though the
	// call has none.
	for i := range 2 {
		if left := <-deadlines; left < 0 || left > attemptTimeout {
			t.Fatalf("attempt %d: server deadline %v away, want within %v", i+1, left, attemptTimeout)
		}
	}
	st := c.Stats()[grpctest.UnaryCall]
	if st.AttemptTimeouts != 1 || st.Retries.Attempts != 1 {
		t.Fatalf("stats %+v, want 1 attempt timeout and 1 retry", st)
	}
}

func TestPerAttemptTimeoutUnaryEveryAttemptHangs(t *testing.T) {
	srv := grpctest.Start(t, hangFirst(1<<30, nil))
	tc, _ := client(t, srv, retryConfig(t, 3, `"UNAVAILABLE"`, ""), grpcretry.WithPerAttemptTimeout(attemptTimeout))
	_, err := tc.UnaryCall(context.Background(), grpctest.Request("x"))
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("err %v, want DEADLINE_EXCEEDED", err)
	}
	if !errors.Is(err, rebound.ErrAttemptTimeout) || !errors.Is(err, rebound.ErrAttemptsExhausted) {
		t.Fatalf("err %v: want it to wrap ErrAttemptTimeout and ErrAttemptsExhausted", err)
	}
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "per-attempt timeout (100ms)") {
		t.Fatalf("status message %q does not name the per-attempt timeout", msg)
	}
	if got := srv.Count(grpctest.UnaryCall); got != 3 {
		t.Fatalf("server saw %d attempts, want 3", got)
	}
}

// TestPerAttemptTimeoutCallDeadlineFirst: when the call's deadline comes
// before the per-attempt one, the call's deadline is what ends it.
func TestPerAttemptTimeoutCallDeadlineFirst(t *testing.T) {
	srv := grpctest.Start(t, hangFirst(1<<30, nil))
	tc, _ := client(t, srv, retryConfig(t, 3, `"UNAVAILABLE"`, ""), grpcretry.WithPerAttemptTimeout(time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), attemptTimeout)
	defer cancel()
	_, err := tc.UnaryCall(ctx, grpctest.Request("x"))
	if status.Code(err) != codes.DeadlineExceeded || errors.Is(err, rebound.ErrAttemptTimeout) {
		t.Fatalf("err %v, want the call's DEADLINE_EXCEEDED, not the per-attempt timeout", err)
	}
	if got := srv.Count(grpctest.UnaryCall); got != 1 {
		t.Fatalf("server saw %d attempts, want 1", got)
	}
}

// TestPerAttemptTimeoutCountsAgainstThrottle: each timed-out attempt takes
// a token; once the throttle is at half, the next timeout is not retried.
func TestPerAttemptTimeoutCountsAgainstThrottle(t *testing.T) {
	srv := grpctest.Start(t, hangFirst(1<<30, nil))
	cfg := retryConfig(t, 2, `"UNAVAILABLE"`, `,"retryThrottling":{"maxTokens":4,"tokenRatio":0.1}`)
	tc, _ := client(t, srv, cfg, grpcretry.WithPerAttemptTimeout(attemptTimeout), grpcretry.WithServerName(fmt.Sprintf("%s-%p", t.Name(), t)))
	// 4 tokens: the first call's two timeouts leave 2, the threshold.
	if _, err := tc.UnaryCall(context.Background(), grpctest.Request("1")); !errors.Is(err, rebound.ErrAttemptsExhausted) {
		t.Fatalf("first call: %v, want attempts exhausted", err)
	}
	_, err := tc.UnaryCall(context.Background(), grpctest.Request("2"))
	if !errors.Is(err, rebound.ErrThrottled) || !errors.Is(err, rebound.ErrAttemptTimeout) || status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("second call: %v, want DEADLINE_EXCEEDED by the per-attempt timeout, throttled", err)
	}
	if got := srv.Count(grpctest.UnaryCall); got != 3 {
		t.Fatalf("server saw %d attempts, want 3", got)
	}
}

func TestPerAttemptTimeoutServerStream(t *testing.T) {
	deadlines := make(chan bool, 2)
	srv := grpctest.Start(t, grpctest.Handlers{ServerStream: func(n int, _ *testpb.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
		_, ok := s.Context().Deadline()
		deadlines <- ok
		if n == 1 {
			<-s.Context().Done() // hangs without headers
			return s.Context().Err()
		}
		for i := range 3 {
			if err := s.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: []byte(fmt.Sprint(i))}}); err != nil {
				return err
			}
		}
		return nil
	}})
	c, err := grpcretry.New(retryConfig(t, 3, `"UNAVAILABLE"`, ""), grpcretry.WithPerAttemptTimeout(attemptTimeout))
	if err != nil {
		t.Fatal(err)
	}
	tc := testpb.NewTestServiceClient(srv.Dial(t, c.DialOptions()...))
	var n int
	st, err := tc.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{}, grpcretry.CountAttempts(&n))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		m, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(m.GetPayload().GetBody()))
	}
	if strings.Join(got, ",") != "0,1,2" || n != 2 || srv.Count(grpctest.StreamingOutputCall) != 2 {
		t.Fatalf("got %v after %d attempts (server saw %d), want 0,1,2 after 2", got, n, srv.Count(grpctest.StreamingOutputCall))
	}
	// A stream keeps the call's deadline on the wire: here, none.
	for range 2 {
		if <-deadlines {
			t.Fatal("the server saw a deadline on a stream whose call has none")
		}
	}
	if s := c.Stats()[grpctest.StreamingOutputCall]; s.AttemptTimeouts != 1 {
		t.Fatalf("stats %+v, want 1 attempt timeout", s)
	}
}

func TestPerAttemptTimeoutBidi(t *testing.T) {
	srv := grpctest.Start(t, grpctest.Handlers{Bidi: func(n int, s grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
		m, err := s.Recv()
		if err != nil {
			return err
		}
		if n == 1 {
			<-s.Context().Done() // read the request, never answers
			return s.Context().Err()
		}
		return s.Send(&testpb.StreamingOutputCallResponse{Payload: m.GetPayload()})
	}})
	tc, _ := client(t, srv, retryConfig(t, 3, `"UNAVAILABLE"`, ""), grpcretry.WithPerAttemptTimeout(attemptTimeout))
	st, err := tc.FullDuplexCall(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: []byte("ping")}}); err != nil {
		t.Fatal(err)
	}
	m, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if string(m.GetPayload().GetBody()) != "ping" || srv.Count(grpctest.FullDuplexCall) != 2 {
		t.Fatalf("got %q, server saw %d attempts; want the replayed ping answered by attempt 2", m.GetPayload().GetBody(), srv.Count(grpctest.FullDuplexCall))
	}
	_ = st.CloseSend()
	if _, err := st.Recv(); err != io.EOF {
		t.Fatalf("end of stream: %v", err)
	}
}

// TestPerAttemptTimeoutNeverCutsCommittedStream: a stream that sends
// headers and then goes quiet for several timeouts is not cut.
func TestPerAttemptTimeoutNeverCutsCommittedStream(t *testing.T) {
	srv := grpctest.Start(t, grpctest.Handlers{Bidi: func(n int, s grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
		if err := s.SendHeader(metadata.Pairs("x", "y")); err != nil {
			return err
		}
		select {
		case <-time.After(5 * attemptTimeout): // slow, past the timeout
		case <-s.Context().Done():
			return s.Context().Err()
		}
		return s.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: []byte("late")}})
	}})
	tc, _ := client(t, srv, retryConfig(t, 3, `"UNAVAILABLE"`, ""), grpcretry.WithPerAttemptTimeout(attemptTimeout))
	st, err := tc.FullDuplexCall(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.Recv()
	if err != nil {
		t.Fatalf("committed stream cut: %v", err)
	}
	if string(m.GetPayload().GetBody()) != "late" || srv.Count(grpctest.FullDuplexCall) != 1 {
		t.Fatalf("got %q after %d attempts, want late after 1", m.GetPayload().GetBody(), srv.Count(grpctest.FullDuplexCall))
	}
	if _, err := st.Recv(); err != io.EOF {
		t.Fatalf("end of stream: %v", err)
	}
}

func TestPerAttemptTimeoutStreamEveryAttemptHangs(t *testing.T) {
	srv := grpctest.Start(t, grpctest.Handlers{ServerStream: func(n int, _ *testpb.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
		<-s.Context().Done()
		return s.Context().Err()
	}})
	tc, _ := client(t, srv, retryConfig(t, 2, `"UNAVAILABLE"`, ""), grpcretry.WithPerAttemptTimeout(attemptTimeout))
	st, err := tc.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{})
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.DeadlineExceeded || !errors.Is(err, rebound.ErrAttemptTimeout) {
		t.Fatalf("err %v, want DEADLINE_EXCEEDED from the per-attempt timeout", err)
	}
	if got := srv.Count(grpctest.StreamingOutputCall); got != 2 {
		t.Fatalf("server saw %d attempts, want 2", got)
	}
}

// TestPerAttemptTimeoutStartsAfterBackoff: the timer of a retry starts
// when it is handed to grpc-go, not when the retry is scheduled: a backoff
// three times the timeout, on the real clock, does not eat the retry's
// time, for a unary call and a stream alike.
func TestPerAttemptTimeoutStartsAfterBackoff(t *testing.T) {
	h := hangFirst(1, nil)
	h.ServerStream = func(n int, _ *testpb.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
		if n == 1 {
			<-s.Context().Done()
			return s.Context().Err()
		}
		return s.Send(&testpb.StreamingOutputCallResponse{})
	}
	srv := grpctest.Start(t, h)
	cfg, err := serviceconfig.Parse(fmt.Appendf(nil, `{"methodConfig":[{"name":[{"service":%q}],"retryPolicy":{
		"maxAttempts":2,"initialBackoff":"0.3s","maxBackoff":"0.3s","backoffMultiplier":1,"retryableStatusCodes":["UNAVAILABLE"]}}]}`, grpctest.Service))
	if err != nil {
		t.Fatal(err)
	}
	// Jitter 0.99: the retry waits about 297ms, three timeouts.
	c, err := grpcretry.New(cfg, grpcretry.WithPerAttemptTimeout(attemptTimeout), grpcretry.WithRandom(clocktest.NewRand(0.99)))
	if err != nil {
		t.Fatal(err)
	}
	tc := testpb.NewTestServiceClient(srv.Dial(t, c.DialOptions()...))
	var n int
	if _, err := tc.UnaryCall(context.Background(), grpctest.Request("x"), grpcretry.CountAttempts(&n)); err != nil || n != 2 {
		t.Fatalf("unary: %v after %d attempts, want success after 2", err, n)
	}
	var sn int
	st, err := tc.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{}, grpcretry.CountAttempts(&sn))
	if err == nil {
		_, err = st.Recv()
	}
	if err != nil {
		t.Fatalf("stream: %v, want the second attempt's message", err)
	}
	if _, err := st.Recv(); err != io.EOF || sn != 2 {
		t.Fatalf("stream end: %v after %d attempts, want io.EOF after 2", err, sn)
	}
	for _, m := range []string{grpctest.UnaryCall, grpctest.StreamingOutputCall} {
		if got := c.Stats()[m].AttemptTimeouts; got != 1 {
			t.Errorf("%s: %d attempt timeouts, want 1 (the first attempt's)", m, got)
		}
	}
}

// TestPerAttemptTimeoutObserved: cut attempts count in the metric
// counter and the decision log, as in Stats.
func TestPerAttemptTimeoutObserved(t *testing.T) {
	srv := grpctest.Start(t, hangFirst(2, nil))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	var logs syncBuffer
	tc, _ := client(t, srv, retryConfig(t, 3, `"UNAVAILABLE"`, ""), grpcretry.WithPerAttemptTimeout(attemptTimeout),
		grpcretry.WithMeterProvider(mp), grpcretry.WithLogger(debugLogger(&logs)))
	if _, err := tc.UnaryCall(context.Background(), grpctest.Request("x")); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var cut int64 = -1
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if s, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "rebound.client.call.attempt_timeouts" && len(s.DataPoints) == 1 {
				cut = s.DataPoints[0].Value
			}
		}
	}
	if cut != 2 {
		t.Fatalf("rebound.client.call.attempt_timeouts = %d, want 2", cut)
	}
	if n := strings.Count(logs.String(), "rebound: per-attempt timeout, retry scheduled"); n != 2 {
		t.Fatalf("%d records of a cut attempt retried, want 2:\n%s", n, logs.String())
	}
}

func TestWithPerAttemptTimeoutInvalid(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		_, err := grpcretry.New(nil, grpcretry.WithPerAttemptTimeout(d))
		if err == nil || !strings.Contains(err.Error(), "WithPerAttemptTimeout") {
			t.Errorf("WithPerAttemptTimeout(%v): %v, want an error naming it", d, err)
		}
	}
}

// TestPerAttemptRecvTimeoutConfig: the service config's
// perAttemptRecvTimeout works as the option does, and with both the
// smaller applies. retryableStatusCodes may then be empty.
func TestPerAttemptRecvTimeoutConfig(t *testing.T) {
	for _, tc := range []struct {
		name, config string
		opts         []grpcretry.Option
	}{
		{"config", "0.1s", nil},
		{"option smaller", "3600s", []grpcretry.Option{grpcretry.WithPerAttemptTimeout(attemptTimeout)}},
		{"config smaller", "0.1s", []grpcretry.Option{grpcretry.WithPerAttemptTimeout(time.Hour)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := grpctest.Start(t, hangFirst(1, nil))
			cfg, err := serviceconfig.Parse(fmt.Appendf(nil, `{"methodConfig":[{"name":[{"service":%q}],"retryPolicy":{
				"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,
				"retryableStatusCodes":[],"perAttemptRecvTimeout":%q}}]}`, grpctest.Service, tc.config))
			if err != nil {
				t.Fatal(err)
			}
			tcl, _ := client(t, srv, cfg, tc.opts...)
			var n int
			if _, err := tcl.UnaryCall(context.Background(), grpctest.Request("x"), grpcretry.CountAttempts(&n)); err != nil || n != 2 {
				t.Fatalf("err %v after %d attempts, want success after 2", err, n)
			}
		})
	}
}

// TestPerAttemptTimeoutHeadersAtTheInstant: a first attempt that answers
// just before, at, or just after its per-attempt timeout either commits
// (its answer came in time) or is retried (its timer fired first); never
// does a call commit to an attempt whose timer has cut it, which would
// end the stream with an error that no retry follows. The server's delay
// walks across the timeout to meet the timer at the same instant.
func TestPerAttemptTimeoutHeadersAtTheInstant(t *testing.T) {
	const timeout = 20 * time.Millisecond
	srv := grpctest.Start(t, grpctest.Handlers{ServerStream: func(_ int, r *testpb.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
		md, _ := metadata.FromIncomingContext(s.Context())
		if len(md.Get("grpc-previous-rpc-attempts")) == 0 {
			// The first attempt answers after the delay the call asks for.
			select {
			case <-time.After(time.Duration(r.GetResponseParameters()[0].GetIntervalUs()) * time.Microsecond):
			case <-s.Context().Done():
				return s.Context().Err()
			}
		}
		return s.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: []byte("ok")}})
	}})
	// Retries answer at once, but a loaded machine may still take a
	// timeout over one: five attempts.
	tc, _ := client(t, srv, retryConfig(t, 5, `"UNAVAILABLE"`, ""), grpcretry.WithPerAttemptTimeout(timeout))
	for i := range 120 {
		delay := timeout - 3*time.Millisecond + time.Duration(i%60)*100*time.Microsecond
		req := &testpb.StreamingOutputCallRequest{ResponseParameters: []*testpb.ResponseParameters{{IntervalUs: int32(delay / time.Microsecond)}}}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := tc.StreamingOutputCall(ctx, req)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		m, err := st.Recv()
		if err != nil || string(m.GetPayload().GetBody()) != "ok" {
			cancel()
			t.Fatalf("call %d (first answer after %v): %q, %v; want ok from one attempt or the other", i, delay, m.GetPayload().GetBody(), err)
		}
		if _, err := st.Recv(); err != io.EOF {
			cancel()
			t.Fatalf("call %d: end of stream: %v", i, err)
		}
		cancel()
	}
}

// TestPerAttemptTimeoutUnaryServerAnswersFirst: a server, or a proxy that
// keeps a margin, that ends each attempt a little (a fortieth of the
// timeout) before the deadline the attempt carried, with a code of its
// own, ends an attempt that its timeout cut: it is retried, and the call
// ends DEADLINE_EXCEEDED with ErrAttemptTimeout after maxAttempts,
// whatever the code.
func TestPerAttemptTimeoutUnaryServerAnswersFirst(t *testing.T) {
	// Long enough that each attempt reaches the server on a loaded
	// machine, under -race, before the client's timer; the subtests run
	// in parallel.
	const timeout = time.Second
	const maxAttempts = 3
	for _, code := range []codes.Code{codes.Canceled, codes.Unavailable, codes.DeadlineExceeded} {
		t.Run(code.String(), func(t *testing.T) {
			t.Parallel()
			srv := grpctest.Start(t, grpctest.Handlers{Unary: func(ctx context.Context, _ int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
				dl, ok := ctx.Deadline()
				if !ok {
					return nil, status.Error(codes.Internal, "no deadline")
				}
				select {
				case <-time.After(time.Until(dl) - timeout/40):
				case <-ctx.Done():
				}
				return nil, status.Error(code, "deadline")
			}})
			tc, _ := client(t, srv, retryConfig(t, maxAttempts, `"RESOURCE_EXHAUSTED"`, ""), grpcretry.WithPerAttemptTimeout(timeout))
			// The connection is made before the attempts that count.
			if _, err := tc.EmptyCall(context.Background(), &testpb.Empty{}); status.Code(err) != codes.Unimplemented {
				t.Fatalf("EmptyCall: %v, want UNIMPLEMENTED", err)
			}
			var n int
			_, err := tc.UnaryCall(context.Background(), grpctest.Request("x"), grpcretry.CountAttempts(&n))
			if status.Code(err) != codes.DeadlineExceeded || !errors.Is(err, rebound.ErrAttemptTimeout) || !errors.Is(err, rebound.ErrAttemptsExhausted) {
				t.Fatalf("err %v, want DEADLINE_EXCEEDED from the per-attempt timeout, attempts exhausted", err)
			}
			if n != maxAttempts || srv.Count(grpctest.UnaryCall) != maxAttempts {
				t.Fatalf("%d attempts, server saw %d; want %d", n, srv.Count(grpctest.UnaryCall), maxAttempts)
			}
		})
	}
}
