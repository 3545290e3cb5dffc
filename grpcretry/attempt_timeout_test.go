package grpcretry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
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
	"github.com/rebound-go/rebound/internal/stretch"
	"github.com/rebound-go/rebound/serviceconfig"
)

// attemptTimeout is short, so that hung attempts end quickly; tests
// assert counts and codes, never how long anything took. An attempt that
// is to answer must do so within it, which a busy machine may not: the
// tests that need it stretch it (see package stretch), up to
// maxAttemptTimeout, and tell that outcome (tooSlow) from any other.
const (
	attemptTimeout    = 100 * time.Millisecond
	maxAttemptTimeout = 7 * time.Second
)

// tooSlow is a stretch scenario's outcome that only a slow machine
// explains: of a call that was to end after want attempts, n were made and
// cut of them were cut by their timers, every one past want among them,
// or the server saw fewer attempts than the client made because some
// were cut on the way.
func tooSlow(what string, n, want int, cut uint64) error {
	return fmt.Errorf("%s: %d attempts, %d cut by their timers, where %d were to be made", what, n, cut, want)
}

// allCut reports whether a call's n attempts are accounted for when only
// their timers cut them: all but the last when the call succeeded, all of
// them when it failed (with ErrAttemptTimeout, before it committed: a
// timer never cuts a committed attempt, however slow the machine).
func allCut(err error, n int, cut uint64) bool {
	if err == nil {
		return cut == uint64(n-1)
	}
	return errors.Is(err, rebound.ErrAttemptTimeout) && !errors.Is(err, rebound.ErrCommitted) && cut == uint64(n)
}

// serverDeadline is the deadline a handler saw: whether it had one, and
// how long it had left.
type serverDeadline struct {
	set  bool
	left time.Duration
}

// hangFirst makes the first n unary attempts hang until the server ends
// them, and answers the others. deadlines, if not nil, receives the
// deadline of each attempt as the server saw it.
func hangFirst(n int, deadlines chan<- serverDeadline) grpctest.Handlers {
	return grpctest.Handlers{Unary: func(ctx context.Context, i int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		if deadlines != nil {
			var d serverDeadline
			if dl, ok := ctx.Deadline(); ok {
				d = serverDeadline{true, time.Until(dl)}
			}
			deadlines <- d
		}
		if i <= n {
			<-ctx.Done()
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return &testpb.SimpleResponse{}, nil
	}}
}

func TestPerAttemptTimeoutUnaryRetries(t *testing.T) {
	t.Parallel()
	stretch.Run(t, attemptTimeout, maxAttemptTimeout, func(d time.Duration) error {
		deadlines := make(chan serverDeadline, 3)
		srv := grpctest.Start(t, hangFirst(1, deadlines))
		// DEADLINE_EXCEEDED is not retryable: the timed-out attempt is
		// retried anyway.
		c, err := grpcretry.New(retryConfig(t, 3, `"UNAVAILABLE"`, ""), grpcretry.WithPerAttemptTimeout(d))
		if err != nil {
			t.Fatal(err)
		}
		tc := testpb.NewTestServiceClient(srv.Dial(t, c.DialOptions()...))
		var n int
		_, err = tc.UnaryCall(context.Background(), grpctest.Request("x"), grpcretry.CountAttempts(&n))
		st := c.Stats()[grpctest.UnaryCall]
		if !allCut(err, n, st.AttemptTimeouts) {
			t.Fatalf("%v after %d attempts, %d cut: every attempt but one that answered must have been cut", err, n, st.AttemptTimeouts)
		}
		if err != nil || n > 2 {
			return tooSlow(fmt.Sprint(err), n, 2, st.AttemptTimeouts)
		}
		if n != 2 || srv.Count(grpctest.UnaryCall) != 2 {
			t.Fatalf("%d attempts, server saw %d; want 2", n, srv.Count(grpctest.UnaryCall))
		}
		// The server sees the per-attempt deadline (grpc-timeout), though
		// the call has none.
		for i := range 2 {
			if sd := <-deadlines; !sd.set || sd.left > d {
				t.Fatalf("attempt %d: server deadline %+v, want one within %v", i+1, sd, d)
			}
		}
		if st.Retries.Attempts != 1 {
			t.Fatalf("stats %+v, want 1 attempt timeout and 1 retry", st)
		}
		return nil
	})
}

// A unary attempt is bounded as a whole: one that sent its headers and
// then hung is cut by its timer all the same, and, nothing of it having
// reached the application, retried (it used to end the call, committed,
// with an error that said the response had not started).
func TestPerAttemptTimeoutUnaryHeadersThenHang(t *testing.T) {
	t.Parallel()
	stretch.Run(t, attemptTimeout, maxAttemptTimeout, func(d time.Duration) error {
		srv := grpctest.Start(t, grpctest.Handlers{Unary: func(ctx context.Context, i int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
			if i == 1 {
				if err := grpc.SendHeader(ctx, metadata.Pairs("attempt", "1")); err != nil {
					return nil, err
				}
				<-ctx.Done()
				return nil, status.FromContextError(ctx.Err()).Err()
			}
			return &testpb.SimpleResponse{}, nil
		}})
		c, err := grpcretry.New(retryConfig(t, 3, `"UNAVAILABLE"`, ""), grpcretry.WithPerAttemptTimeout(d))
		if err != nil {
			t.Fatal(err)
		}
		tc := testpb.NewTestServiceClient(srv.Dial(t, c.DialOptions()...))
		var n int
		var header metadata.MD
		_, err = tc.UnaryCall(context.Background(), grpctest.Request("x"), grpcretry.CountAttempts(&n), grpc.Header(&header))
		st := c.Stats()[grpctest.UnaryCall]
		if errors.Is(err, rebound.ErrCommitted) {
			t.Fatalf("%v after %d attempts: the cut attempt committed the call", err, n)
		}
		if !allCut(err, n, st.AttemptTimeouts) {
			t.Fatalf("%v after %d attempts, %d cut: every attempt but one that answered must have been cut", err, n, st.AttemptTimeouts)
		}
		if err != nil || n > 2 {
			return tooSlow(fmt.Sprint(err), n, 2, st.AttemptTimeouts)
		}
		if srv.Count(grpctest.UnaryCall) != 2 || len(header.Get("attempt")) != 0 {
			t.Fatalf("server saw %d attempts, header %v; want 2, and the second attempt's header", srv.Count(grpctest.UnaryCall), header)
		}
		return nil
	})
}

func TestPerAttemptTimeoutUnaryEveryAttemptHangs(t *testing.T) {
	t.Parallel()
	stretch.Run(t, attemptTimeout, maxAttemptTimeout, func(d time.Duration) error {
		srv := grpctest.Start(t, hangFirst(1<<30, nil))
		tc, _ := client(t, srv, retryConfig(t, 3, `"UNAVAILABLE"`, ""), grpcretry.WithPerAttemptTimeout(d))
		var n int
		_, err := tc.UnaryCall(context.Background(), grpctest.Request("x"), grpcretry.CountAttempts(&n))
		if status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("err %v, want DEADLINE_EXCEEDED", err)
		}
		if !errors.Is(err, rebound.ErrAttemptTimeout) || !errors.Is(err, rebound.ErrAttemptsExhausted) || n != 3 {
			t.Fatalf("err %v after %d attempts: want it to wrap ErrAttemptTimeout and ErrAttemptsExhausted after 3", err, n)
		}
		if msg := status.Convert(err).Message(); !strings.Contains(msg, fmt.Sprintf("per-attempt timeout (%v)", d)) {
			t.Fatalf("status message %q does not name the per-attempt timeout", msg)
		}
		switch got := srv.Count(grpctest.UnaryCall); {
		case got < 3:
			return tooSlow("the server saw "+fmt.Sprint(got), 3, 3, 3)
		case got > 3:
			t.Fatalf("server saw %d attempts, want 3", got)
		}
		return nil
	})
}

// TestPerAttemptTimeoutCallDeadlineFirst: when the call's deadline comes
// before the per-attempt one, the call's deadline is what ends it.
func TestPerAttemptTimeoutCallDeadlineFirst(t *testing.T) {
	t.Parallel()
	// The call's deadline must pass while the attempt is at the server.
	stretch.Run(t, attemptTimeout, maxAttemptTimeout, func(d time.Duration) error {
		srv := grpctest.Start(t, hangFirst(1<<30, nil))
		tc, _ := client(t, srv, retryConfig(t, 3, `"UNAVAILABLE"`, ""), grpcretry.WithPerAttemptTimeout(time.Hour))
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		_, err := tc.UnaryCall(ctx, grpctest.Request("x"))
		if status.Code(err) != codes.DeadlineExceeded || errors.Is(err, rebound.ErrAttemptTimeout) {
			t.Fatalf("err %v, want the call's DEADLINE_EXCEEDED, not the per-attempt timeout", err)
		}
		switch got := srv.Count(grpctest.UnaryCall); {
		case got == 0:
			return errors.New("the attempt did not reach the server before the call's deadline")
		case got > 1:
			t.Fatalf("server saw %d attempts, want 1", got)
		}
		return nil
	})
}

// TestPerAttemptTimeoutCountsAgainstThrottle: each timed-out attempt takes
// a token; once the throttle is at half, the next timeout is not retried.
func TestPerAttemptTimeoutCountsAgainstThrottle(t *testing.T) {
	t.Parallel()
	stretch.Run(t, attemptTimeout, maxAttemptTimeout, func(d time.Duration) error {
		srv := grpctest.Start(t, hangFirst(1<<30, nil))
		cfg := retryConfig(t, 2, `"UNAVAILABLE"`, `,"retryThrottling":{"maxTokens":4,"tokenRatio":0.1}`)
		// A throttle of its own: every client of the process with the
		// same server name shares one.
		tc, _ := client(t, srv, cfg, grpcretry.WithPerAttemptTimeout(d), grpcretry.WithServerName(fmt.Sprintf("%s-%p-%v", t.Name(), t, d)))
		// 4 tokens: the first call's two timeouts leave 2, the threshold.
		if _, err := tc.UnaryCall(context.Background(), grpctest.Request("1")); !errors.Is(err, rebound.ErrAttemptsExhausted) {
			t.Fatalf("first call: %v, want attempts exhausted", err)
		}
		_, err := tc.UnaryCall(context.Background(), grpctest.Request("2"))
		if !errors.Is(err, rebound.ErrThrottled) || !errors.Is(err, rebound.ErrAttemptTimeout) || status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("second call: %v, want DEADLINE_EXCEEDED by the per-attempt timeout, throttled", err)
		}
		switch got := srv.Count(grpctest.UnaryCall); {
		case got < 3:
			return tooSlow("the server saw "+fmt.Sprint(got), 3, 3, 3)
		case got > 3:
			t.Fatalf("server saw %d attempts, want 3", got)
		}
		return nil
	})
}

func TestPerAttemptTimeoutServerStream(t *testing.T) {
	t.Parallel()
	stretch.Run(t, attemptTimeout, maxAttemptTimeout, func(d time.Duration) error {
		deadlines := make(chan bool, 3)
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
		c, err := grpcretry.New(retryConfig(t, 3, `"UNAVAILABLE"`, ""), grpcretry.WithPerAttemptTimeout(d))
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
			m, rerr := st.Recv()
			if rerr == io.EOF {
				break
			}
			if rerr != nil {
				err = rerr
				break
			}
			got = append(got, string(m.GetPayload().GetBody()))
		}
		cut := c.Stats()[grpctest.StreamingOutputCall].AttemptTimeouts
		if !allCut(err, n, cut) {
			t.Fatalf("%v after %d attempts, %d cut: every attempt but one that answered must have been cut", err, n, cut)
		}
		if err != nil || n > 2 {
			return tooSlow(fmt.Sprint(err), n, 2, cut)
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
		return nil
	})
}

func TestPerAttemptTimeoutBidi(t *testing.T) {
	t.Parallel()
	stretch.Run(t, attemptTimeout, maxAttemptTimeout, func(d time.Duration) error {
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
		c, err := grpcretry.New(retryConfig(t, 3, `"UNAVAILABLE"`, ""), grpcretry.WithPerAttemptTimeout(d))
		if err != nil {
			t.Fatal(err)
		}
		tc := testpb.NewTestServiceClient(srv.Dial(t, c.DialOptions()...))
		var n int
		st, err := tc.FullDuplexCall(context.Background(), grpcretry.CountAttempts(&n))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: []byte("ping")}}); err != nil {
			t.Fatal(err)
		}
		m, err := st.Recv()
		cut := c.Stats()[grpctest.FullDuplexCall].AttemptTimeouts
		if err != nil {
			if !allCut(err, n, cut) {
				t.Fatal(err)
			}
			return tooSlow(err.Error(), n, 2, cut)
		}
		if string(m.GetPayload().GetBody()) != "ping" {
			t.Fatalf("got %q, want the replayed ping", m.GetPayload().GetBody())
		}
		_ = st.CloseSend()
		if _, err := st.Recv(); err != io.EOF {
			t.Fatalf("end of stream: %v", err)
		}
		if cut = c.Stats()[grpctest.FullDuplexCall].AttemptTimeouts; !allCut(nil, n, cut) {
			t.Fatalf("%d attempts, %d cut: every attempt but the one that answered must have been cut", n, cut)
		}
		if n > 2 {
			return tooSlow("answered", n, 2, cut)
		}
		if n != 2 || srv.Count(grpctest.FullDuplexCall) != 2 {
			t.Fatalf("%d attempts, server saw %d; want the replayed ping answered by attempt 2", n, srv.Count(grpctest.FullDuplexCall))
		}
		return nil
	})
}

// TestPerAttemptTimeoutNeverCutsCommittedStream: a stream that sends
// headers and then goes quiet for several timeouts is not cut.
func TestPerAttemptTimeoutNeverCutsCommittedStream(t *testing.T) {
	t.Parallel()
	// The headers must come within the timeout for the stream to commit;
	// on a busy machine they may not, and the attempt is cut before it
	// commits, as it should be.
	stretch.Run(t, attemptTimeout, maxAttemptTimeout, func(d time.Duration) error {
		srv := grpctest.Start(t, grpctest.Handlers{Bidi: func(n int, s grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
			if err := s.SendHeader(metadata.Pairs("x", "y")); err != nil {
				return err
			}
			select {
			case <-time.After(5 * d): // slow, past the timeout
			case <-s.Context().Done():
				return s.Context().Err()
			}
			return s.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: []byte("late")}})
		}})
		c, err := grpcretry.New(retryConfig(t, 3, `"UNAVAILABLE"`, ""), grpcretry.WithPerAttemptTimeout(d))
		if err != nil {
			t.Fatal(err)
		}
		tc := testpb.NewTestServiceClient(srv.Dial(t, c.DialOptions()...))
		var n int
		st, err := tc.FullDuplexCall(context.Background(), grpcretry.CountAttempts(&n))
		if err != nil {
			t.Fatal(err)
		}
		m, err := st.Recv()
		cut := c.Stats()[grpctest.FullDuplexCall].AttemptTimeouts
		if err != nil {
			if allCut(err, n, cut) {
				return tooSlow(err.Error(), n, 1, cut) // no headers came within any timeout
			}
			t.Fatalf("committed stream cut: %v", err)
		}
		if _, err := st.Recv(); err != io.EOF {
			t.Fatalf("end of stream: %v", err)
		}
		// The attempts are counted once the stream has ended.
		cut = c.Stats()[grpctest.FullDuplexCall].AttemptTimeouts
		if string(m.GetPayload().GetBody()) != "late" || !allCut(nil, n, cut) {
			t.Fatalf("got %q after %d attempts, %d cut; want late, and every attempt but the last cut before it committed", m.GetPayload().GetBody(), n, cut)
		}
		if n > 1 {
			return tooSlow("late", n, 1, cut)
		}
		if got := srv.Count(grpctest.FullDuplexCall); got != 1 {
			t.Fatalf("server saw %d attempts, want 1", got)
		}
		return nil
	})
}

func TestPerAttemptTimeoutStreamEveryAttemptHangs(t *testing.T) {
	t.Parallel()
	stretch.Run(t, attemptTimeout, maxAttemptTimeout, func(d time.Duration) error {
		srv := grpctest.Start(t, grpctest.Handlers{ServerStream: func(n int, _ *testpb.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
			<-s.Context().Done()
			return s.Context().Err()
		}})
		tc, _ := client(t, srv, retryConfig(t, 2, `"UNAVAILABLE"`, ""), grpcretry.WithPerAttemptTimeout(d))
		var n int
		st, err := tc.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{}, grpcretry.CountAttempts(&n))
		if err == nil {
			_, err = st.Recv()
		}
		if status.Code(err) != codes.DeadlineExceeded || !errors.Is(err, rebound.ErrAttemptTimeout) || n != 2 {
			t.Fatalf("err %v after %d attempts, want DEADLINE_EXCEEDED from the per-attempt timeout after 2", err, n)
		}
		switch got := srv.Count(grpctest.StreamingOutputCall); {
		case got < 2:
			return tooSlow("the server saw "+fmt.Sprint(got), 2, 2, 2)
		case got > 2:
			t.Fatalf("server saw %d attempts, want 2", got)
		}
		return nil
	})
}

// TestPerAttemptTimeoutStartsAfterBackoff: the timer of a retry starts
// when it is handed to grpc-go, not when the retry is scheduled: a backoff
// three times the timeout, on the real clock, does not eat the retry's
// time, for a unary call and a stream alike.
func TestPerAttemptTimeoutStartsAfterBackoff(t *testing.T) {
	t.Parallel()
	// A timer started at scheduling would cut the retry whatever the
	// timeout, so a run that fails at every timeout is the bug, not a
	// slow machine.
	stretch.Run(t, attemptTimeout, maxAttemptTimeout, func(d time.Duration) error {
		h := hangFirst(1, nil)
		h.ServerStream = func(n int, _ *testpb.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
			if n == 1 {
				<-s.Context().Done()
				return s.Context().Err()
			}
			return s.Send(&testpb.StreamingOutputCallResponse{})
		}
		srv := grpctest.Start(t, h)
		backoff := fmt.Sprintf("%gs", (3 * d).Seconds())
		cfg, err := serviceconfig.Parse(fmt.Appendf(nil, `{"methodConfig":[{"name":[{"service":%q}],"retryPolicy":{
			"maxAttempts":2,"initialBackoff":%q,"maxBackoff":%q,"backoffMultiplier":1,"retryableStatusCodes":["UNAVAILABLE"]}}]}`, grpctest.Service, backoff, backoff))
		if err != nil {
			t.Fatal(err)
		}
		// Jitter 0.99: the retry waits about three timeouts.
		c, err := grpcretry.New(cfg, grpcretry.WithPerAttemptTimeout(d), grpcretry.WithRandom(clocktest.NewRand(0.99)))
		if err != nil {
			t.Fatal(err)
		}
		tc := testpb.NewTestServiceClient(srv.Dial(t, c.DialOptions()...))
		var n int
		if _, err := tc.UnaryCall(context.Background(), grpctest.Request("x"), grpcretry.CountAttempts(&n)); err != nil || n != 2 {
			if cut := c.Stats()[grpctest.UnaryCall].AttemptTimeouts; allCut(err, n, cut) {
				return tooSlow("unary: "+fmt.Sprint(err), n, 2, cut)
			}
			t.Fatalf("unary: %v after %d attempts, want success after 2", err, n)
		}
		var sn int
		st, err := tc.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{}, grpcretry.CountAttempts(&sn))
		if err == nil {
			_, err = st.Recv()
		}
		if err != nil {
			if cut := c.Stats()[grpctest.StreamingOutputCall].AttemptTimeouts; allCut(err, sn, cut) {
				return tooSlow("stream: "+err.Error(), sn, 2, cut)
			}
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
		return nil
	})
}

// TestPerAttemptTimeoutObserved: cut attempts count in the metric
// counter and the decision log, as in Stats.
func TestPerAttemptTimeoutObserved(t *testing.T) {
	t.Parallel()
	stretch.Run(t, attemptTimeout, maxAttemptTimeout, func(d time.Duration) error {
		srv := grpctest.Start(t, hangFirst(2, nil))
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		defer mp.Shutdown(context.Background())
		var logs syncBuffer
		tc, _ := client(t, srv, retryConfig(t, 3, `"UNAVAILABLE"`, ""), grpcretry.WithPerAttemptTimeout(d),
			grpcretry.WithMeterProvider(mp), grpcretry.WithLogger(debugLogger(&logs)))
		var n int
		_, err := tc.UnaryCall(context.Background(), grpctest.Request("x"), grpcretry.CountAttempts(&n))
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
		if err != nil {
			if cut >= 0 && allCut(err, n, uint64(cut)) {
				return tooSlow(err.Error(), n, 3, uint64(cut)) // the third attempt, which answers, was cut too
			}
			t.Fatal(err)
		}
		if cut != 2 {
			t.Fatalf("rebound.client.call.attempt_timeouts = %d, want 2", cut)
		}
		if n := strings.Count(logs.String(), "rebound: per-attempt timeout, retry scheduled"); n != 2 {
			t.Fatalf("%d records of a cut attempt retried, want 2:\n%s", n, logs.String())
		}
		return nil
	})
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
	t.Parallel()
	// d stands for the timeout the test gives the attempts.
	for _, tc := range []struct{ name, config, option string }{
		{"config", "d", ""},
		{"option smaller", "3600s", "d"},
		{"config smaller", "d", "1h"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stretch.Run(t, attemptTimeout, maxAttemptTimeout, func(d time.Duration) error {
				config := tc.config
				if config == "d" {
					config = fmt.Sprintf("%gs", d.Seconds())
				}
				var opts []grpcretry.Option
				switch tc.option {
				case "d":
					opts = append(opts, grpcretry.WithPerAttemptTimeout(d))
				case "1h":
					opts = append(opts, grpcretry.WithPerAttemptTimeout(time.Hour))
				}
				srv := grpctest.Start(t, hangFirst(1, nil))
				cfg, err := serviceconfig.Parse(fmt.Appendf(nil, `{"methodConfig":[{"name":[{"service":%q}],"retryPolicy":{
					"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,
					"retryableStatusCodes":[],"perAttemptRecvTimeout":%q}}]}`, grpctest.Service, config))
				if err != nil {
					t.Fatal(err)
				}
				c, err := grpcretry.New(cfg, opts...)
				if err != nil {
					t.Fatal(err)
				}
				tcl := testpb.NewTestServiceClient(srv.Dial(t, c.DialOptions()...))
				var n int
				_, err = tcl.UnaryCall(context.Background(), grpctest.Request("x"), grpcretry.CountAttempts(&n))
				if cut := c.Stats()[grpctest.UnaryCall].AttemptTimeouts; (err != nil || n > 2) && allCut(err, n, cut) {
					return tooSlow(fmt.Sprint(err), n, 2, cut)
				}
				if err != nil || n != 2 {
					t.Fatalf("err %v after %d attempts, want success after 2", err, n)
				}
				return nil
			})
		})
	}
}

// TestPerAttemptTimeoutHeadersAtTheInstant: a first attempt that answers
// just before, at, or just after its per-attempt timeout either commits
// (its answer came in time) or is retried (its timer fired first); never
// does a call commit to an attempt whose timer has cut it, which would
// end the stream with an error that no retry follows. The server's delay
// walks across the timeout to meet the timer at the same instant, in
// steps of 0.1ms, twice (with -short, once). It runs alone: its retries
// have 20ms to answer, which tests running beside it on a loaded machine
// took from them; a call whose retries all took longer is made again with
// a longer timeout.
func TestPerAttemptTimeoutHeadersAtTheInstant(t *testing.T) {
	const (
		timeout  = 20 * time.Millisecond
		attempts = 5
	)
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
	// The clients, one per timeout, made when a call first needs it.
	type timed struct {
		tc testpb.TestServiceClient
		c  *grpcretry.Client
	}
	clients := map[time.Duration]timed{}
	calls := 120
	if testing.Short() {
		calls = 60
	}
	for i := range calls {
		// Retries answer at once, yet a loaded machine may take over the
		// timeout to answer every one of them too (all four retries of a
		// call did, in 1 of 10 runs with 8 CPU-bound processes on 2
		// CPUs): such a call is made again with twice the timeout, its
		// first answer as near the new one (see package stretch). That
		// every attempt was cut, not just the first, is what only a slow
		// machine explains; a call that committed to a cut attempt ends
		// after fewer, and fails the test.
		stretch.Run(t, timeout, maxAttemptTimeout, func(d time.Duration) error {
			cl, ok := clients[d]
			if !ok {
				// The client's clock is a fake one that each backoff moves
				// on, calls after calls, past the real time that the
				// calls' deadlines are set on: with backoffs of at most
				// 0.5+1+2+4ms a call, 120 calls move it less than a
				// second, whatever the load.
				cfg := backoffConfig(t, attempts, "0.001s", `"UNAVAILABLE"`, "")
				tc, c, _ := statsClient(t, srv, cfg, grpcretry.WithPerAttemptTimeout(d))
				cl = timed{tc, c}
				clients[d] = cl
			}
			delay := d - 3*time.Millisecond + time.Duration(i%60)*100*time.Microsecond
			req := &testpb.StreamingOutputCallRequest{ResponseParameters: []*testpb.ResponseParameters{{IntervalUs: int32(delay / time.Microsecond)}}}
			// Long enough for every attempt to be cut by its timer, so that
			// no attempt is left without one.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second+attempts*d)
			defer cancel()
			before := cl.c.Stats()[grpctest.StreamingOutputCall].AttemptTimeouts
			var n int
			st, err := cl.tc.StreamingOutputCall(ctx, req, grpcretry.CountAttempts(&n))
			if err != nil {
				t.Fatal(err)
			}
			m, err := st.Recv()
			cut := cl.c.Stats()[grpctest.StreamingOutputCall].AttemptTimeouts - before
			if err != nil {
				if n == attempts && allCut(err, n, cut) {
					return tooSlow(fmt.Sprintf("call %d (first answer after %v): %v", i, delay, err), n, 2, cut)
				}
				t.Fatalf("call %d (first answer after %v): %v after %d attempts, %d cut by their timers; want ok from one attempt or the other", i, delay, err, n, cut)
			}
			if string(m.GetPayload().GetBody()) != "ok" {
				t.Fatalf("call %d: got %q, want ok", i, m.GetPayload().GetBody())
			}
			if _, err := st.Recv(); err != io.EOF {
				t.Fatalf("call %d: end of stream: %v", i, err)
			}
			if cut = cl.c.Stats()[grpctest.StreamingOutputCall].AttemptTimeouts - before; !allCut(nil, n, cut) {
				t.Fatalf("call %d: %d attempts, %d cut: every attempt but the one that answered must have been cut", i, n, cut)
			}
			return nil
		})
	}
}

// lateHeaders is the first attempt's stream of
// TestPerAttemptTimeoutMessageAsTimerFires: its headers reach rebound only
// after its timer has fired and the application has read from it twice,
// and its message reaches the application only after the timer has fired,
// so that the message is read while the cut attempt is not yet judged, as
// on a busy machine it may be.
type lateHeaders struct {
	grpc.ClientStream
	ctx    context.Context
	reads  atomic.Int32
	second chan struct{} // closed on the second read
}

func (s *lateHeaders) Header() (metadata.MD, error) {
	<-s.ctx.Done()
	<-s.second
	return s.ClientStream.Header()
}

func (s *lateHeaders) RecvMsg(m any) error {
	<-s.ctx.Done() // grpc-go gives what it has buffered before the cut
	if s.reads.Add(1) == 2 {
		close(s.second)
	}
	return s.ClientStream.RecvMsg(m)
}

// TestPerAttemptTimeoutMessageAsTimerFires: a message that the
// application reads from an attempt whose timer has fired, before the cut
// attempt is judged, does not commit the call to it: the message is
// dropped, unseen, and the retry's is read, never the cut attempt's
// DEADLINE_EXCEEDED after it.
func TestPerAttemptTimeoutMessageAsTimerFires(t *testing.T) {
	srv := grpctest.Start(t, grpctest.Handlers{ServerStream: func(n int, _ *testpb.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
		if err := s.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: []byte(fmt.Sprint(n))}}); err != nil {
			return err
		}
		if n == 1 {
			<-s.Context().Done() // a long stream, until the client cuts it
			return s.Context().Err()
		}
		return nil
	}})
	var attempts atomic.Int32
	late := grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil || attempts.Add(1) > 1 {
			return cs, err
		}
		return &lateHeaders{ClientStream: cs, ctx: ctx, second: make(chan struct{})}, nil
	})
	c, err := grpcretry.New(retryConfig(t, 3, `"UNAVAILABLE"`, ""), grpcretry.WithPerAttemptTimeout(attemptTimeout))
	if err != nil {
		t.Fatal(err)
	}
	tc := testpb.NewTestServiceClient(srv.Dial(t, append(c.DialOptions(), late)...))
	var n int
	st, err := tc.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{}, grpcretry.CountAttempts(&n))
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.Recv()
	if err != nil {
		t.Fatalf("first message: %v, want the retry's", err)
	}
	if _, err := st.Recv(); err != io.EOF {
		t.Fatalf("end of stream after message %q: %v, want io.EOF", m.GetPayload().GetBody(), err)
	}
	if got := string(m.GetPayload().GetBody()); got != "2" || n != 2 {
		t.Fatalf("message %q after %d attempts, want the second attempt's after 2", got, n)
	}
	if cut := c.Stats()[grpctest.StreamingOutputCall].AttemptTimeouts; cut != 1 {
		t.Fatalf("%d attempts cut, want 1", cut)
	}
}

// TestPerAttemptTimeoutUnaryServerAnswersFirst: a server, or a proxy that
// keeps a margin, that ends each attempt a little (a fortieth of the
// timeout) before the deadline the attempt carried, with a code of its
// own, ends an attempt that its timeout cut: it is retried, and the call
// ends DEADLINE_EXCEEDED with ErrAttemptTimeout after maxAttempts,
// whatever the code.
func TestPerAttemptTimeoutUnaryServerAnswersFirst(t *testing.T) {
	t.Parallel()
	const maxAttempts = 3
	for _, code := range []codes.Code{codes.Canceled, codes.Unavailable, codes.DeadlineExceeded} {
		t.Run(code.String(), func(t *testing.T) {
			t.Parallel()
			// Long enough that each attempt reaches the server before the
			// client's timer, under -race, as the subtests run in parallel;
			// a machine too busy for that is given twice as long.
			stretch.Run(t, time.Second, 8*time.Second, func(timeout time.Duration) error {
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
					if errors.Is(err, rebound.ErrAttemptTimeout) {
						return fmt.Errorf("EmptyCall: %v", err)
					}
					t.Fatalf("EmptyCall: %v, want UNIMPLEMENTED", err)
				}
				var n int
				_, err := tc.UnaryCall(context.Background(), grpctest.Request("x"), grpcretry.CountAttempts(&n))
				if status.Code(err) != codes.DeadlineExceeded || !errors.Is(err, rebound.ErrAttemptTimeout) || !errors.Is(err, rebound.ErrAttemptsExhausted) {
					t.Fatalf("err %v, want DEADLINE_EXCEEDED from the per-attempt timeout, attempts exhausted", err)
				}
				seen := srv.Count(grpctest.UnaryCall)
				if n == maxAttempts && seen < maxAttempts {
					// An attempt the client's timer cut before it reached
					// the server: the machine's doing.
					return fmt.Errorf("%d attempts, server saw %d", n, seen)
				}
				if n != maxAttempts || seen != maxAttempts {
					t.Fatalf("%d attempts, server saw %d; want %d", n, seen, maxAttempts)
				}
				return nil
			})
		})
	}
}

// A server stream's only attempt answers at about the instant its timer
// fires, call after call. Whichever comes first, the call either delivers
// the message or fails as timed out: when the timer wins as the headers
// come, the attempt is cut and its message dropped unseen, and with no
// retry to follow (the next would pass the call's deadline) the call must
// fail, never end with io.EOF and no message, as if the server had sent
// none.
func TestPerAttemptTimeoutCutAnswerIsNotSuccess(t *testing.T) {
	t.Parallel()
	const d = 20 * time.Millisecond
	h := grpctest.Handlers{ServerStream: func(n int, _ *testpb.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
		// Answers swept from d-4ms to d+1ms, 20µs apart: the time to
		// send and read them puts the instant of the timer inside.
		time.Sleep(d - 4*time.Millisecond + time.Duration(n%250)*20*time.Microsecond)
		return s.Send(&testpb.StreamingOutputCallResponse{})
	}}
	srv := grpctest.Start(t, h)
	// Backoffs of a minute: no retry fits in a call's 30s.
	c, err := grpcretry.New(backoffConfig(t, 2, "60s", `"UNAVAILABLE"`, ""), grpcretry.WithPerAttemptTimeout(d),
		grpcretry.WithRandom(clocktest.NewRand(0.99)))
	if err != nil {
		t.Fatal(err)
	}
	tc := testpb.NewTestServiceClient(srv.Dial(t, c.DialOptions()...))
	var wg sync.WaitGroup
	var got, cut atomic.Int32
	for range 30 {
		wg.Go(func() {
			for range 30 {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				var n int
				st, err := tc.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{}, grpcretry.CountAttempts(&n))
				if err == nil {
					_, err = st.Recv()
				}
				cancel()
				switch {
				case err == nil:
					got.Add(1)
				case status.Code(err) == codes.DeadlineExceeded && errors.Is(err, rebound.ErrAttemptTimeout) && n == 1:
					cut.Add(1)
				default:
					t.Errorf("%v (%s) after %d attempts; want the message, or DEADLINE_EXCEEDED with ErrAttemptTimeout after 1", err, status.Code(err), n)
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d calls delivered the message, %d were cut", got.Load(), cut.Load())
}
