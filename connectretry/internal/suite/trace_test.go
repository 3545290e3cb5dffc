package suite

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/internal/observe/observetest"
	"github.com/rebound-go/rebound/serviceconfig"
)

// traced returns clients of s through a traced interceptor for cfg, with
// an injecting interceptor after it, the exporter of its spans, a tracer
// for the test's own span, and the names of the spans as they end
// (observetest.Ends).
func traced(t *testing.T, e env, s *server, cfg *serviceconfig.Config, clk *clocktest.Clock) (clients, *tracetest.InMemoryExporter, trace.Tracer, <-chan string) {
	t.Helper()
	tp, exp := observetest.Tracing(t)
	ends := observetest.Ends(tp)
	i, err := e.newInterceptor(cfg, withClock(clk), withRandom(clocktest.NewRand(0.5)),
		withTracerProvider(tp), withServerName(uniqueName(t)))
	if err != nil {
		t.Fatal(err)
	}
	return e.dialInject(t, s, e.p, i), exp, tp.Tracer("test"), ends
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
	each(t, func(t *testing.T, e env) {
		s := e.start(t, handlers{unary: func(in *call) (string, error) {
			if in.n <= 2 {
				f := fail(serviceconfig.Unavailable, "attempt %d fails", in.n)
				if in.n == 2 {
					f.with("Grpc-Retry-Pushback-Ms", "30")
				}
				return "", f
			}
			return "ok", nil
		}})
		c, exp, tr, _ := traced(t, e, s, retryConfig(t, 4, `"UNAVAILABLE"`, ""), clocktest.NewAuto())
		ctx, root := tr.Start(context.Background(), "test")
		if _, err := c.unary(ctx, "x", nil); err != nil {
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
	})
}

func TestTraceUnaryHedge(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		arrived := make(chan struct{})
		s := e.start(t, handlers{unary: func(in *call) (string, error) {
			switch max(in.previous, 0) {
			case 0: // slow: it loses
				close(arrived)
				<-in.ctx.Done()
				return "", fail(serviceconfig.Cancelled, "%v", in.ctx.Err())
			case 1:
				<-arrived
				return "", fail(serviceconfig.Unavailable, "busy")
			}
			return "ok", nil
		}})
		clk := clocktest.New()
		c, exp, tr, _ := traced(t, e, s, hedgeConfig(t, 3, "0.01s", `"UNAVAILABLE"`, ""), clk)
		ctx, root := tr.Start(context.Background(), "test")
		// The first hedge goes when the delay has passed; the second at
		// once when the first fails.
		done := make(chan struct{})
		go func() {
			defer close(done)
			if clk.WaitPending(1) {
				clk.Advance(10 * time.Millisecond)
			}
		}()
		if _, err := c.unary(ctx, "x", nil); err != nil {
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
	})
}

func TestTraceServerStreamRetry(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		s := e.start(t, handlers{serverStream: func(in *call, send func(string) error) error {
			if in.n == 1 {
				return fail(serviceconfig.Unavailable, "busy")
			}
			return send("one")
		}})
		c, exp, tr, _ := traced(t, e, s, retryConfig(t, 3, `"UNAVAILABLE"`, ""), clocktest.NewAuto())
		ctx, root := tr.Start(context.Background(), "test")
		st, err := c.open(ctx, serverStream, "x", nil)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := receiveAll(t, st); err != nil || len(got) != 1 {
			t.Fatalf("%d messages, err %v", len(got), err)
		}
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
	})
}

// A stream's spans end when its caller's context does, though the caller
// stopped reading and never closed the response: no span outlives the
// call.
func TestTraceServerStreamAbandoned(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		s := e.start(t, handlers{serverStream: func(in *call, send func(string) error) error {
			if in.n == 1 {
				return fail(serviceconfig.Unavailable, "busy")
			}
			if err := send("one"); err != nil {
				return err
			}
			<-in.ctx.Done()
			return in.ctx.Err()
		}})
		c, exp, tr, ends := traced(t, e, s, retryConfig(t, 3, `"UNAVAILABLE"`, ""), clocktest.NewAuto())
		ctx, root := tr.Start(context.Background(), "test")
		ctx, cancel := context.WithCancel(ctx)
		st, err := c.open(ctx, serverStream, "x", nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Receive(); err != nil {
			t.Fatalf("no message: %v", err)
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
	})
}

// TestTraceClientStreamRetry: a client stream's retry is traced as a
// server stream's is, each attempt carrying its own span to the server.
func TestTraceClientStreamRetry(t *testing.T) {
	eachStream(t, func(t *testing.T, e env) {
		s := e.start(t, clientStreamFailFirst(1, serviceconfig.Unavailable))
		c, exp, tr, _ := traced(t, e, s, retryConfig(t, 3, `"UNAVAILABLE"`, ""), clocktest.NewAuto())
		ctx, root := tr.Start(context.Background(), "test")
		st, err := c.open(ctx, clientStream, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = st.Send("a")
		_ = st.CloseSend()
		if got, err := receiveAll(t, st); err != nil || len(got) != 1 {
			t.Fatalf("%q, err %v", got, err)
		}
		root.End()
		span, as := tree(t, exp, root, s, clientStream, 2)
		observetest.CheckEnd(t, as[0], "rpc.response.status_code", "unavailable", true)
		events(t, span,
			"backoff started rebound.attempt=1 rebound.delay=0.05",
			"committed rebound.attempt=2 rebound.why=first response message",
		)
	})
}
