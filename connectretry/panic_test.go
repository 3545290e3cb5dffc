package connectretry_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/connectretry"
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

func panicInConnectClassifier() { panic(errBoom) }

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
// attempts are cancelled (the server sees their contexts end), in every
// protocol.
func TestPanicInClassifierJudgingHedge(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			var cancelled atomic.Int32
			s := startServer(t, handlers{unary: func(ctx context.Context, _ int, req *request) (*connect.Response[msg], error) {
				if connectretry.PreviousAttempts(req.Header()) == 1 {
					return nil, connect.NewError(connect.CodeUnavailable, errors.New("hedge 2 fails"))
				}
				<-ctx.Done()
				cancelled.Add(1)
				return nil, connect.NewError(connect.CodeCanceled, ctx.Err())
			}}, p.http2)
			var calls atomic.Int32
			classify := connectretry.WithClassifier(func(_ connectretry.Failure, info rebound.RetryInfo) rebound.RetryInfo {
				if calls.Add(1) == 1 {
					panicInConnectClassifier()
				}
				return info
			})
			c, _ := dial(t, s, p, hedgeConfig(t, 3, "0s", `"UNAVAILABLE"`, ""), classify)
			v := raised(func() { _, _ = call(context.Background(), c.unary, "x") })
			carried(t, v, "panicInConnectClassifier")
			awaitCancelled(t, &cancelled, func() int { return s.count(unary) })
		})
	}
}

// panicOnEnd is a span processor of the application's that panics when
// the first span ends, after telling ended.
type panicOnEnd struct {
	sdktrace.SpanProcessor // a no-op one
	ended                  chan<- struct{}
	once                   *atomic.Bool
}

func (p panicOnEnd) OnEnd(sdktrace.ReadOnlySpan) {
	if p.once.CompareAndSwap(false, true) {
		p.ended <- struct{}{}
		panicInSpanEnd()
	}
}

func panicInSpanEnd() { panic(errBoom) }

// TestPanicInTracerOfAbandonedStream: a traced server stream whose caller
// walks away (its context ends before it reads) has its spans ended on a
// goroutine of its own; a tracer that panics there does not end the
// process: the caller's next call on the stream raises it, once, and the
// stream then closes as usual.
func TestPanicInTracerOfAbandonedStream(t *testing.T) {
	s := startServer(t, serverStreamHeadersThenQuiet(), false)
	ended := make(chan struct{}, 8)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(panicOnEnd{SpanProcessor: sdktrace.NewSimpleSpanProcessor(tracetest.NewInMemoryExporter()), ended: ended, once: new(atomic.Bool)}))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	i, err := connectretry.New(retryConfig(t, 3, `"UNAVAILABLE"`, ""), connectretry.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	c := newClients(s, connectProtocol, i)
	ctx, cancel := context.WithCancel(context.Background())
	st, err := c.serverStream.CallServerStream(ctx, connect.NewRequest(wrapperspb.String("x")))
	if err != nil {
		t.Fatal(err)
	}
	cancel() // the caller walks away
	<-ended  // the attempt's span ends, off the caller's goroutine
	v := raised(func() {
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			st.ResponseTrailer()
		}
	})
	carried(t, v, "panicInSpanEnd")
	if err := st.Close(); err != nil {
		t.Fatalf("Close after the panic: %v", err)
	}
}
