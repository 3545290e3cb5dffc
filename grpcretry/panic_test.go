package grpcretry_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/grpctest"
)

var errBoom = errors.New("boom from a classifier")

// raised runs f and returns what it panicked with on this goroutine.
func raised(f func()) (v any) {
	defer func() { v = recover() }()
	f()
	return nil
}

// carried checks that v is the panic of a callback carried from another
// goroutine: an error that keeps the original value (errors.Is finds
// errBoom) and whose message holds it and the stack where it happened,
// down to fn.
func carried(t *testing.T, v any, fn string) {
	t.Helper()
	err, ok := v.(error)
	if !ok || !errors.Is(err, errBoom) {
		t.Fatalf("recovered %#v, want a panic carrying errBoom", v)
	}
	if msg := err.Error(); !strings.Contains(msg, errBoom.Error()) || !strings.Contains(msg, fn) {
		t.Fatalf("panic message %q lacks the value or the frame %s", msg, fn)
	}
}

// panickyClassifier panics at its nth call, and only then: the attempts
// cancelled after it are judged quietly.
func panickyClassifier(n int32) grpcretry.Option {
	var calls atomic.Int32
	return grpcretry.WithClassifier(func(_ grpcretry.Failure, info rebound.RetryInfo) rebound.RetryInfo {
		if calls.Add(1) == n {
			panicInGRPCClassifier()
		}
		return info
	})
}

func panicInGRPCClassifier() { panic(errBoom) }

// previousAttempts is the grpc-previous-rpc-attempts of an incoming call,
// 0 when absent.
func previousAttempts(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("grpc-previous-rpc-attempts"); len(v) == 1 {
		return v[0]
	}
	return "0"
}

// awaitCancelled waits until every attempt the server saw but the one
// that failed has seen its context end, and fails the test if that does
// not happen within ten seconds. The server sees 1 to 3 attempts: the
// others may be cancelled before they reach it (on a loaded machine,
// while their connections are made).
func awaitCancelled(t *testing.T, cancelled *atomic.Int32, seen func() int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		n := seen()
		if n >= 1 && n <= 3 && int(cancelled.Load()) == n-1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("server saw %d attempts, %d of them cancelled; want 1 to 3, all but the failed one cancelled", n, cancelled.Load())
		}
	}
}

// TestPanicInClassifierJudgingHedge: a classifier that panics while
// judging a hedge, off the caller's goroutine, does not end the process:
// the call panics on the caller's goroutine with it, and the other
// attempts are cancelled (the server sees their contexts end).
func TestPanicInClassifierJudgingHedge(t *testing.T) {
	var cancelled atomic.Int32
	srv := grpctest.Start(t, grpctest.Handlers{Unary: func(ctx context.Context, _ int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		if previousAttempts(ctx) == "1" {
			return nil, status.Error(codes.Unavailable, "hedge 2 fails")
		}
		<-ctx.Done()
		cancelled.Add(1)
		return nil, status.FromContextError(ctx.Err()).Err()
	}})
	tc, _ := client(t, srv, hedgeConfig(t, 3, "0s", ""), panickyClassifier(1))
	v := raised(func() { _, _ = tc.UnaryCall(context.Background(), grpctest.Request("x")) })
	carried(t, v, "panicInGRPCClassifier")
	awaitCancelled(t, &cancelled, func() int { return srv.Count(grpctest.UnaryCall) })
}

// TestPanicInClassifierJudgingStreamHedge: the same for a hedged server
// stream, whose hedges the stream's own machinery judges.
func TestPanicInClassifierJudgingStreamHedge(t *testing.T) {
	var cancelled atomic.Int32
	srv := grpctest.Start(t, grpctest.Handlers{ServerStream: func(_ int, _ *testpb.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
		if previousAttempts(s.Context()) == "1" {
			return status.Error(codes.Unavailable, "hedge 2 fails")
		}
		<-s.Context().Done()
		cancelled.Add(1)
		return s.Context().Err()
	}})
	tc, _ := client(t, srv, hedgeConfig(t, 3, "0s", ""), panickyClassifier(1))
	v := raised(func() {
		st, err := tc.StreamingOutputCall(context.Background(), outMsg("x"))
		if err != nil {
			t.Errorf("StreamingOutputCall: %v", err)
			return
		}
		for err == nil {
			_, err = st.Recv()
		}
		t.Errorf("Recv ended with %v, no panic", err)
	})
	carried(t, v, "panicInGRPCClassifier")
	awaitCancelled(t, &cancelled, func() int { return srv.Count(grpctest.StreamingOutputCall) })
}

// TestPanicInClassifierOnRetryGoroutine: a retried stream's second
// failure is judged by the goroutine that makes its retries; a classifier
// that panics there is raised on the application's goroutine, by Recv.
func TestPanicInClassifierOnRetryGoroutine(t *testing.T) {
	srv := grpctest.Start(t, grpctest.Handlers{ServerStream: func(int, *testpb.StreamingOutputCallRequest, grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
		return status.Error(codes.Unavailable, "down")
	}})
	tc, _ := client(t, srv, retryConfig(t, 4, `"UNAVAILABLE"`, ""), panickyClassifier(2))
	v := raised(func() {
		st, err := tc.StreamingOutputCall(context.Background(), outMsg("x"))
		if err != nil {
			t.Errorf("StreamingOutputCall: %v", err)
			return
		}
		for err == nil {
			_, err = st.Recv()
		}
		if err != io.EOF {
			t.Errorf("Recv ended with %v, no panic", err)
		}
	})
	carried(t, v, "panicInGRPCClassifier")
	if got := srv.Count(grpctest.StreamingOutputCall); got != 2 {
		t.Fatalf("server saw %d attempts, want 2: the panic ends the call", got)
	}
}

// panicLog is a slog handler of the application's that panics on every
// warning (the calls' debug records are dropped).
type panicLog struct{ slog.Handler }

func (panicLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (panicLog) Handle(context.Context, slog.Record) error {
	panicInLogger()
	return nil
}

func panicInLogger() { panic(errBoom) }

// TestPanicInLoggerOnResolverUpdate: a config the resolver delivers and
// rebound rejects is logged on the resolver's goroutine; a logger that
// panics there does not end the process (nor the resolver): the next
// call on the conn raises the panic, once, and the calls after it run
// under the last good config.
func TestPanicInLoggerOnResolverUpdate(t *testing.T) {
	srv := grpctest.Start(t, failFirst(1<<30, codes.Unavailable))
	r := configResolver(srv, policyJSON(2, ""))
	tc, c := dialResolved(t, r, nil, []grpcretry.Option{grpcretry.WithLogger(slog.New(panicLog{}))})
	if got := attempts(t, tc); got != 2 {
		t.Fatalf("%d attempts under the resolver's first config, want 2", got)
	}
	push(r, srv, `{"methodConfig":[{"name":[{"service":"x"}],"retryPolicy":{"maxAttempts":0}}]}`)
	if c.ResolverConfigErrors() != 1 {
		t.Fatalf("%d configs rejected, want 1", c.ResolverConfigErrors())
	}
	v := raised(func() { _, _ = tc.UnaryCall(context.Background(), grpctest.Request("x")) })
	carried(t, v, "panicInLogger")
	if got := attempts(t, tc); got != 2 {
		t.Fatalf("%d attempts after the rejected config, want the last good config's 2", got)
	}
}

// endRetryPanics is a call budget of the application's that admits every
// hedge and panics when told the first one has ended.
type endRetryPanics struct{ once atomic.Bool }

func (*endRetryPanics) RecordFailure()  {}
func (*endRetryPanics) Allow(bool) bool { return true }
func (*endRetryPanics) RecordSuccess()  {}
func (*endRetryPanics) StartCall()      {}
func (*endRetryPanics) EndCall()        {}
func (b *endRetryPanics) EndRetry() {
	if b.once.CompareAndSwap(false, true) {
		panicInBudget()
	}
}

func panicInBudget() { panic(errBoom) }

// TestPanicInBudgetUnderTheStreamsLock: a hedged stream's machinery tells
// the budget of a failed hedge while it holds the stream's lock; a budget
// that panics there ends the call without leaving the lock held (the
// call's goroutines end, goleak checks), and Recv raises the panic.
func TestPanicInBudgetUnderTheStreamsLock(t *testing.T) {
	var cancelled atomic.Int32
	srv := grpctest.Start(t, grpctest.Handlers{ServerStream: func(_ int, _ *testpb.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
		if previousAttempts(s.Context()) == "1" {
			return status.Error(codes.Unavailable, "hedge 2 fails")
		}
		<-s.Context().Done()
		cancelled.Add(1)
		return s.Context().Err()
	}})
	tc, _ := client(t, srv, hedgeConfig(t, 3, "0s", ""), grpcretry.WithBudget(new(endRetryPanics)))
	v := raised(func() {
		st, err := tc.StreamingOutputCall(context.Background(), outMsg("x"))
		if err != nil {
			t.Errorf("StreamingOutputCall: %v", err)
			return
		}
		for err == nil {
			_, err = st.Recv()
		}
		t.Errorf("Recv ended with %v, no panic", err)
	})
	carried(t, v, "panicInBudget")
	awaitCancelled(t, &cancelled, func() int { return srv.Count(grpctest.StreamingOutputCall) })
}
