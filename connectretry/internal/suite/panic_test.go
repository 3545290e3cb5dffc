package suite

// A callback of the application's that panics on a goroutine rebound
// started must not end the process: the panic is raised on the caller's
// goroutine, by the call it belongs to, with the call's other attempts
// cancelled and nothing left running (issue 30.4; see package gopanic).

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/internal/observe/observetest"
	"github.com/rebound-go/rebound/serviceconfig"
)

var errBoom = errors.New("boom from a callback")

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

// Each callback panics from a function of its own, for carried to find
// in the stack.
func panicInClassifier()  { panic(errBoom) }
func panicInLogger()      { panic(errBoom) }
func panicInSpanEnd()     { panic(errBoom) }
func panicInInterceptor() { panic(errBoom) }

// panickyClassifier panics at its first call, and only then: the attempts
// cancelled after it are judged quietly.
func panickyClassifier() option {
	var calls atomic.Int32
	return withClassifier(func(_ failed, info rebound.RetryInfo) rebound.RetryInfo {
		if calls.Add(1) == 1 {
			panicInClassifier()
		}
		return info
	})
}

// failSecondHangOthers makes hedge 2 of a call (the attempt with
// grpc-previous-rpc-attempts 1) fail UNAVAILABLE at once, and every other
// attempt hang until its context ends, counted in cancelled.
func failSecondHangOthers(cancelled *atomic.Int32) handlers {
	hang := func(in *call) error {
		if in.previous == 1 {
			return fail(serviceconfig.Unavailable, "hedge 2 fails")
		}
		<-in.ctx.Done()
		cancelled.Add(1)
		return in.ctx.Err()
	}
	return handlers{
		unary:        func(in *call) (string, error) { return "", hang(in) },
		serverStream: func(in *call, _ func(string) error) error { return hang(in) },
		clientStream: func(in *call, recv func() (string, error)) (string, error) {
			if _, err := recvAll(recv); err != nil && in.previous != 1 {
				cancelled.Add(1) // cancelled as it sent
				return "", err
			}
			return "", hang(in)
		},
	}
}

// awaitCancelled waits until every attempt the server saw but the one
// that failed has seen its context end, and fails the test if that does
// not happen within ten seconds. The server sees 1 to 3 attempts: the
// others may be cancelled before they reach it (on a loaded machine,
// while their connections are made).
func awaitCancelled(t *testing.T, cancelled *atomic.Int32, seen func() int) {
	t.Helper()
	awaitCancelledBut(t, cancelled, seen, 1)
}

// awaitCancelledBut is awaitCancelled when failed attempts fail at the
// server, not 1.
func awaitCancelledBut(t *testing.T, cancelled *atomic.Int32, seen func() int, failed int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		n := seen()
		if n >= failed && n <= 3 && int(cancelled.Load()) == n-failed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("server saw %d attempts, %d of them cancelled; want %d to 3, all but %d cancelled", n, cancelled.Load(), failed, failed)
		}
	}
}

// TestPanicInClassifierJudgingHedge: a classifier that panics while
// judging a unary hedge, off the caller's goroutine, does not end the
// process: the call panics on the caller's goroutine with it, and the
// other attempts are cancelled (the server sees their contexts end).
func TestPanicInClassifierJudgingHedge(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		var cancelled atomic.Int32
		s := e.start(t, failSecondHangOthers(&cancelled))
		c, _ := e.dialWith(t, s, hedgeConfig(t, 3, "0s", `"UNAVAILABLE"`, ""), panickyClassifier())
		v := raised(func() { _, _ = c.unary(context.Background(), "x", nil) })
		carried(t, v, "panicInClassifier")
		awaitCancelled(t, &cancelled, func() int { return s.count(unary) })
	})
}

// TestPanicInClassifierJudgingHedgedStream: the same for a hedged server
// stream, whose hedges race on goroutines of the call: the caller's
// Receive raises the panic, the first attempt is cancelled, and the
// stream then closes as usual. (The hedge goes once the first attempt has
// reached the server, which so sees it hang.)
func TestPanicInClassifierJudgingHedgedStream(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		var cancelled atomic.Int32
		s := e.start(t, failSecondHangOthers(&cancelled))
		c, clk := e.dialManual(t, s, hedgeConfig(t, 3, "0.1s", `"UNAVAILABLE"`, ""), panickyClassifier())
		st, err := c.open(context.Background(), serverStream, "x", nil)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for s.count(serverStream) == 0 {
				time.Sleep(time.Millisecond)
			}
			if clk.WaitPending(1) {
				clk.Advance(100 * time.Millisecond)
			}
		}()
		v := raised(func() { _, _ = st.Receive() })
		carried(t, v, "panicInClassifier")
		awaitCancelled(t, &cancelled, func() int { return s.count(serverStream) })
		if _, err := st.Receive(); err == nil {
			t.Fatal("a Receive after the panic succeeded")
		}
		_ = st.Close()
	})
}

// panicOnCommitted is a log handler of the application's that panics on
// the "committed" record.
type panicOnCommitted struct{ slog.Handler }

func (h panicOnCommitted) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "rebound: committed" {
		panicInLogger()
	}
	return h.Handler.Handle(ctx, r)
}

// TestPanicInLoggerOfHedgedStream: a logger that panics as a hedged
// stream commits, which its race logs on a goroutine of the call, does
// not end the process: the caller's Receive raises it, and the stream
// then closes as usual.
func TestPanicInLoggerOfHedgedStream(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		s := e.start(t, handlers{})
		logger := slog.New(panicOnCommitted{slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelDebug})})
		c, _ := e.dialWith(t, s, hedgeConfig(t, 3, "10s", `"UNAVAILABLE"`, ""), withLogger(logger))
		st, err := c.open(context.Background(), serverStream, "x", nil)
		if err != nil {
			t.Fatal(err)
		}
		v := raised(func() { _, _ = st.Receive() })
		carried(t, v, "panicInLogger")
		_ = st.Close()
		if n := s.count(serverStream); n != 1 {
			t.Fatalf("server saw %d attempts, want 1", n)
		}
	})
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

// TestPanicInTracerOfAbandonedStream: a traced server stream whose caller
// walks away (its context ends before it reads) has its spans ended on a
// goroutine of its own; a tracer that panics there does not end the
// process: the caller's next call on the stream raises it, once, and the
// stream then closes as usual.
func TestPanicInTracerOfAbandonedStream(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		s := e.start(t, headersThenQuiet())
		ended := make(chan struct{}, 8)
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(panicOnEnd{SpanProcessor: sdktrace.NewSimpleSpanProcessor(tracetest.NewInMemoryExporter()), ended: ended, once: new(atomic.Bool)}))
		t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		c, _ := e.dialWith(t, s, retryConfig(t, 3, `"UNAVAILABLE"`, ""), withTracerProvider(tp))
		ctx, cancel := context.WithCancel(context.Background())
		st, err := c.open(ctx, serverStream, "x", nil)
		if err != nil {
			t.Fatal(err)
		}
		cancel() // the caller walks away
		<-ended  // a span ends, off the caller's goroutine
		v := raised(func() {
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				_, _ = st.Receive()
			}
		})
		carried(t, v, "panicInSpanEnd")
		if v := raised(func() { _ = st.Close() }); v != nil {
			t.Fatalf("Close after the panic panicked: %v", v)
		}
	})
}

// TestPanicInInterceptorReplaying: an interceptor of the application's,
// after rebound's, that panics as a retried client stream's request is
// replayed to its second attempt, on a goroutine of the call, does not
// end the process: the caller's Receive raises it, and the stream then
// closes as usual.
func TestPanicInInterceptorReplaying(t *testing.T) {
	eachStream(t, func(t *testing.T, e env) {
		s := e.start(t, clientStreamFailFirst(1, serviceconfig.Unavailable))
		i, err := e.newInterceptor(retryConfig(t, 3, `"UNAVAILABLE"`, ""), withClock(clocktest.NewAuto()))
		if err != nil {
			t.Fatal(err)
		}
		c := e.dialHooked(t, s, e.p, i, hooks{send: func(previous string) {
			if previous == "1" {
				panicInInterceptor()
			}
		}})
		st, err := c.open(context.Background(), clientStream, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send("a"); err != nil {
			t.Fatal(err)
		}
		if err := st.CloseSend(); err != nil {
			t.Fatal(err)
		}
		v := raised(func() { _, _ = st.Receive() })
		carried(t, v, "panicInInterceptor")
		if _, err := st.Receive(); err == nil {
			t.Fatal("a Receive after the panic succeeded")
		}
		_ = st.Close()
		if n := s.count(clientStream); n > 2 {
			t.Fatalf("server saw %d attempts, want at most 2", n)
		}
	})
}

// TestPanicInInterceptorReplayingHedge: the same for a hedged client
// stream's hedge, whose request is sent on a goroutine of its own: the
// other attempts are cancelled (those that reached the server see their
// contexts end).
func TestPanicInInterceptorReplayingHedge(t *testing.T) {
	eachStream(t, func(t *testing.T, e env) {
		var cancelled atomic.Int32
		s := e.start(t, failSecondHangOthers(&cancelled))
		i, err := e.newInterceptor(hedgeConfig(t, 3, "0s", `"UNAVAILABLE"`, ""))
		if err != nil {
			t.Fatal(err)
		}
		c := e.dialHooked(t, s, e.p, i, hooks{send: func(previous string) {
			if previous == "1" {
				panicInInterceptor()
			}
		}})
		st, err := c.open(context.Background(), clientStream, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send("a"); err != nil {
			t.Fatal(err)
		}
		if err := st.CloseSend(); err != nil {
			t.Fatal(err)
		}
		v := raised(func() { _, _ = st.Receive() })
		carried(t, v, "panicInInterceptor")
		_ = st.Close()
		// The hedge whose send panicked may reach the server as its
		// stream is closed (connectinprocess runs the handler then),
		// and fails there at once.
		awaitCancelledBut(t, &cancelled, func() int {
			others := slices.DeleteFunc(s.previous(clientStream), func(p int) bool { return p == 1 })
			return len(others)
		}, 0)
	})
}

// TestPanicInInterceptorAbortingHedge: an interceptor of the
// application's that panics as the losing attempt of a hedged server
// stream is closed, on a goroutine of the call, does not end the
// process: the caller's next call raises it, and the stream then closes
// as usual.
func TestPanicInInterceptorAbortingHedge(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		started, canceled := make(chan struct{}), make(chan struct{})
		s := e.start(t, straggler(started, canceled))
		clk := clocktest.New()
		i, err := e.newInterceptor(hedgeConfig(t, 3, "0.1s", `"UNAVAILABLE"`, ""), withClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		var once atomic.Bool
		c := e.dialHooked(t, s, e.p, i, hooks{closed: func(previous string) {
			if previous == "" && once.CompareAndSwap(false, true) {
				panicInInterceptor()
			}
		}})
		st, err := c.open(context.Background(), serverStream, "m", nil)
		if err != nil {
			t.Fatal(err)
		}
		// The first attempt straggles; the hedge answers and wins.
		go func() {
			<-started
			if clk.WaitPending(1) {
				clk.Advance(100 * time.Millisecond)
			}
		}()
		v := raised(func() {
			for {
				if _, err := st.Receive(); err != nil {
					return
				}
			}
		})
		carried(t, v, "panicInInterceptor")
		if v := raised(func() { _ = st.Close() }); v != nil {
			t.Fatalf("Close after the panic panicked: %v", v)
		}
		select {
		case <-canceled:
		case <-time.After(10 * time.Second):
			t.Fatal("the straggler was not cancelled")
		}
	})
}

func panicInMeter() { panic(errBoom) }

// panicMeterProvider is a meter of the application's whose histograms of
// counts panic as they record.
type panicMeterProvider struct{ noop.MeterProvider }

func (panicMeterProvider) Meter(string, ...metric.MeterOption) metric.Meter { return panicMeter{} }

type panicMeter struct{ noop.Meter }

func (panicMeter) Int64Histogram(string, ...metric.Int64HistogramOption) (metric.Int64Histogram, error) {
	return panicHistogram{}, nil
}

type panicHistogram struct{ noop.Int64Histogram }

func (panicHistogram) Record(context.Context, int64, ...metric.RecordOption) { panicInMeter() }

// TestPanicInMeterOfHedgedStream: a meter that panics as a hedged stream's
// race records the call (its hedges), on a goroutine of the call, does not
// end the process: the caller's Receive raises it, the straggling first
// attempt is cancelled, and the stream then closes as usual.
func TestPanicInMeterOfHedgedStream(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		started, canceled := make(chan struct{}), make(chan struct{})
		s := e.start(t, straggler(started, canceled))
		c, clk := e.dialManual(t, s, hedgeConfig(t, 3, "0.1s", `"UNAVAILABLE"`, ""), withMeterProvider(panicMeterProvider{}))
		st, err := c.open(context.Background(), serverStream, "m", nil)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			<-started
			if clk.WaitPending(1) {
				clk.Advance(100 * time.Millisecond)
			}
		}()
		v := raised(func() { _, _ = st.Receive() })
		carried(t, v, "panicInMeter")
		if v := raised(func() { _ = st.Close() }); v != nil {
			t.Fatalf("Close after the panic panicked: %v", v)
		}
		select {
		case <-canceled:
		case <-time.After(10 * time.Second):
			t.Fatal("the straggler was not cancelled")
		}
	})
}

func panicInBudget() { panic(errBoom) }

// panicAtStart is a call budget of the application's whose StartCall
// panics: the hedge machinery asks it on the caller's goroutine before
// the first attempt starts.
type panicAtStart struct{}

func (panicAtStart) RecordFailure()  {}
func (panicAtStart) Allow(bool) bool { return true }
func (panicAtStart) RecordSuccess()  {}
func (panicAtStart) StartCall()      { panicInBudget() }
func (panicAtStart) EndRetry()       {}
func (panicAtStart) EndCall()        {}

// TestPanicBeforeUnaryHedgeStarts: a budget that panics as a hedged unary
// call starts, before its first attempt, panics the call on the caller's
// goroutine, and the call's work is still ended: its span, and the span
// of a first attempt opened ahead of the machinery (v2, whose transport
// tells the server's address only once a stream is open) end, and nothing
// reaches the server.
func TestPanicBeforeUnaryHedgeStarts(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		s := e.start(t, handlers{})
		tp, exp := observetest.Tracing(t)
		c, _ := e.dialWith(t, s, hedgeConfig(t, 3, "10s", `"UNAVAILABLE"`, ""), withBudget(panicAtStart{}), withTracerProvider(tp))
		v := raised(func() { _, _ = c.unary(context.Background(), "x", nil) })
		if err, ok := v.(error); !ok || !errors.Is(err, errBoom) {
			t.Fatalf("recovered %#v, want the budget's panic", v)
		}
		want := 1 // the call's span
		if e.major.name == "v2" {
			want = 2 // and its first attempt's
		}
		if got := len(exp.GetSpans()); got != want {
			t.Fatalf("%d spans ended, want %d: %v", got, want, observetest.Spans(exp.GetSpans()))
		}
		if n := s.count(unary); n != 0 {
			t.Fatalf("server saw %d attempts, want 0", n)
		}
	})
}
