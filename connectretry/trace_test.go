package connectretry_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rebound-go/rebound/connectretry"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/internal/observe/observetest"
	"github.com/rebound-go/rebound/serviceconfig"
)

// inject is what otelconnect does, in small: it sends the trace context
// of the attempt's span in a traceparent header. Installed after rebound's
// interceptor, it runs once per attempt.
type inject struct{}

func (inject) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header()))
		return next(ctx, req)
	}
}

func (inject) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(conn.RequestHeader()))
		return conn
	}
}

func (inject) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// traced returns clients of s through a traced interceptor for cfg, with
// inject after it, the exporter of its spans and a tracer for the test's
// own span.
func traced(t *testing.T, s *server, cfg *serviceconfig.Config, clk *clocktest.Clock) (clients, *tracetest.InMemoryExporter, trace.Tracer) {
	t.Helper()
	c, exp, tr, _ := tracedEnds(t, s, cfg, clk)
	return c, exp, tr
}

// tracedEnds is traced, and the names of the spans as they end
// (observetest.Ends).
func tracedEnds(t *testing.T, s *server, cfg *serviceconfig.Config, clk *clocktest.Clock) (clients, *tracetest.InMemoryExporter, trace.Tracer, <-chan string) {
	t.Helper()
	tp, exp := observetest.Tracing(t)
	ends := observetest.Ends(tp)
	i, err := connectretry.New(cfg, connectretry.WithClock(clk), connectretry.WithRandom(clocktest.NewRand(0.5)),
		connectretry.WithTracerProvider(tp), connectretry.WithServerName(t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	opts := []connect.ClientOption{connect.WithInterceptors(i, inject{})}
	return clients{
		unary:        connect.NewClient[msg, msg](s.client, s.url+unary, opts...),
		serverStream: connect.NewClient[msg, msg](s.client, s.url+serverStream, opts...),
	}, exp, tp.Tracer("test"), ends
}

// parentOf returns the span the server's incoming trace context names.
func parentOf(h http.Header) trace.SpanID {
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.HeaderCarrier(h))).SpanID()
}

// tree returns the call span named name under root and its attempts, and
// checks that each attempt carried its own span to the server.
func tree(t *testing.T, exp *tracetest.InMemoryExporter, root trace.Span, s *server, procedure string, attempts int) (tracetest.SpanStub, observetest.Spans) {
	t.Helper()
	spans := observetest.Spans(exp.GetSpans())
	dotted := strings.ReplaceAll(procedure[1:], "/", ".")
	calls := spans.Named("Sent." + dotted)
	if len(calls) != 1 || calls[0].Parent.SpanID() != root.SpanContext().SpanID() {
		t.Fatalf("call spans Sent.%s: %d, want 1 under the test's span", dotted, len(calls))
	}
	as := spans.ChildrenOf(calls[0]).ByAttempt()
	if len(as) != attempts {
		t.Fatalf("%d attempt spans, want %d", len(as), attempts)
	}
	seen := s.seen(procedure)
	for i, a := range as {
		if a.Name != "Attempt."+dotted {
			t.Errorf("attempt span %q", a.Name)
		}
		if v, _ := observetest.Attr(a, "previous-rpc-attempts"); v.AsInt64() != int64(i) {
			t.Errorf("attempt %d: previous-rpc-attempts %v", i+1, v.String())
		}
		if i < len(seen) && parentOf(seen[i].header) != a.SpanContext.SpanID() {
			t.Errorf("server's parent for attempt %d: %v, want the attempt's span %v", i+1, parentOf(seen[i].header), a.SpanContext.SpanID())
		}
	}
	if v, _ := observetest.Attr(calls[0], "rpc.system.name"); v.AsString() != "connectrpc" {
		t.Errorf("rpc.system.name %q", v.AsString())
	}
	return calls[0], as
}

func events(t *testing.T, sp tracetest.SpanStub, want ...string) {
	t.Helper()
	if got := observetest.Events(sp); !slices.Equal(got, want) {
		t.Errorf("events of %s:\n got %q\nwant %q", sp.Name, got, want)
	}
}

func TestTraceUnaryRetry(t *testing.T) {
	s := startServer(t, handlers{unary: func(_ context.Context, n int, req *request) (*connect.Response[msg], error) {
		if n <= 2 {
			err := connect.NewError(connect.CodeUnavailable, fmt.Errorf("attempt %d fails", n))
			if n == 2 {
				err.Meta().Set("Grpc-Retry-Pushback-Ms", "30")
			}
			return nil, err
		}
		return connect.NewResponse(wrapperspb.String("ok")), nil
	}}, false)
	c, exp, tr := traced(t, s, retryConfig(t, 4, `"UNAVAILABLE"`, ""), clocktest.NewAuto())
	ctx, root := tr.Start(context.Background(), "test")
	if _, err := call(ctx, c.unary, "x"); err != nil {
		t.Fatal(err)
	}
	root.End()
	span, as := tree(t, exp, root, s, unary, 3)
	observetest.CheckEnd(t, as[0], "rpc.response.status_code", "unavailable", true)
	observetest.CheckEnd(t, as[1], "rpc.response.status_code", "unavailable", true)
	if _, ok := observetest.Attr(as[2], "rpc.response.status_code"); ok || as[2].Status.Code.String() == "Error" {
		t.Errorf("attempt 3: %v", as[2].Status)
	}
	events(t, span,
		"backoff started rebound.attempt=1 rebound.delay=0.05",
		"pushback received rebound.attempt=2 rebound.pushback=0.03",
		"backoff started rebound.attempt=2 rebound.delay=0.03",
	)
}

func TestTraceUnaryHedge(t *testing.T) {
	arrived := make(chan struct{})
	s := startServer(t, handlers{unary: func(ctx context.Context, _ int, req *request) (*connect.Response[msg], error) {
		switch connectretry.PreviousAttempts(req.Header()) {
		case 0: // slow: it loses
			close(arrived)
			<-ctx.Done()
			return nil, connect.NewError(connect.CodeCanceled, ctx.Err())
		case 1:
			<-arrived
			return nil, connect.NewError(connect.CodeUnavailable, errors.New("busy"))
		}
		return connect.NewResponse(wrapperspb.String("ok")), nil
	}}, false)
	clk := clocktest.New()
	c, exp, tr := traced(t, s, hedgeConfig(t, 3, "0.01s", `"UNAVAILABLE"`, ""), clk)
	ctx, root := tr.Start(context.Background(), "test")
	// The first hedge goes when the delay has passed; the second at once
	// when the first fails.
	done := make(chan struct{})
	go func() {
		defer close(done)
		if clk.WaitPending(1) {
			clk.Advance(10 * time.Millisecond)
		}
	}()
	if _, err := call(ctx, c.unary, "x"); err != nil {
		t.Fatal(err)
	}
	<-done
	root.End()
	spans := observetest.Spans(exp.GetSpans())
	span := spans.Named("Sent.rebound.test.v1.TestService.Unary")[0]
	as := spans.ChildrenOf(span).ByAttempt()
	if len(as) != 3 {
		t.Fatalf("%d attempt spans", len(as))
	}
	observetest.CheckEnd(t, as[0], "rpc.response.status_code", "canceled", true)
	observetest.CheckEnd(t, as[1], "rpc.response.status_code", "unavailable", true)
	events(t, span,
		"hedge sent rebound.attempt=2",
		"hedge sent rebound.attempt=3",
		"committed rebound.attempt=3 rebound.why=response received",
		"hedge cancelled rebound.attempt=1",
	)
}

func TestTraceServerStreamRetry(t *testing.T) {
	s := startServer(t, handlers{serverStream: func(_ context.Context, n int, req *request, st *connect.ServerStream[msg]) error {
		if n == 1 {
			return connect.NewError(connect.CodeUnavailable, errors.New("busy"))
		}
		return st.Send(wrapperspb.String("one"))
	}}, false)
	c, exp, tr := traced(t, s, retryConfig(t, 3, `"UNAVAILABLE"`, ""), clocktest.NewAuto())
	ctx, root := tr.Start(context.Background(), "test")
	st, err := c.serverStream.CallServerStream(ctx, connect.NewRequest(wrapperspb.String("x")))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for st.Receive() {
		n++
	}
	if err := st.Err(); err != nil || n != 1 {
		t.Fatalf("%d messages, err %v", n, err)
	}
	_ = st.Close()
	root.End()
	span, as := tree(t, exp, root, s, serverStream, 2)
	observetest.CheckEnd(t, as[0], "rpc.response.status_code", "unavailable", true)
	if as[1].Status.Code.String() == "Error" || span.Status.Code.String() == "Error" {
		t.Errorf("statuses: attempt 2 %v, call %v", as[1].Status, span.Status)
	}
	events(t, span,
		"backoff started rebound.attempt=1 rebound.delay=0.05",
		"committed rebound.attempt=2 rebound.why=first response message",
	)
}

// A stream's spans end when its caller's context does, though the caller
// stopped reading and never closed the response: no span outlives the
// call.
func TestTraceServerStreamAbandoned(t *testing.T) {
	s := startServer(t, handlers{serverStream: func(ctx context.Context, n int, req *request, st *connect.ServerStream[msg]) error {
		if n == 1 {
			return connect.NewError(connect.CodeUnavailable, errors.New("busy"))
		}
		if err := st.Send(wrapperspb.String("one")); err != nil {
			return err
		}
		<-ctx.Done()
		return ctx.Err()
	}}, false)
	c, exp, tr, ends := tracedEnds(t, s, retryConfig(t, 3, `"UNAVAILABLE"`, ""), clocktest.NewAuto())
	ctx, root := tr.Start(context.Background(), "test")
	ctx, cancel := context.WithCancel(ctx)
	st, err := c.serverStream.CallServerStream(ctx, connect.NewRequest(wrapperspb.String("x")))
	if err != nil {
		t.Fatal(err)
	}
	if !st.Receive() {
		t.Fatalf("no message: %v", st.Err())
	}
	// The caller walks away: no Receive to the end, no Close.
	cancel()
	name := "Sent." + strings.ReplaceAll(serverStream[1:], "/", ".")
	observetest.Await(t, ends, name, 1)
	root.End()
	span, as := tree(t, exp, root, s, serverStream, 2)
	observetest.CheckEnd(t, as[0], "rpc.response.status_code", "unavailable", true)
	observetest.CheckEnd(t, as[1], "rpc.response.status_code", "canceled", true)
	observetest.CheckEnd(t, span, "rpc.response.status_code", "canceled", true)
	events(t, span,
		"backoff started rebound.attempt=1 rebound.delay=0.05",
		"committed rebound.attempt=2 rebound.why=first response message",
	)
}
