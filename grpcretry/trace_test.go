package grpcretry_test

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	experimental "google.golang.org/grpc/experimental/opentelemetry"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats/opentelemetry"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/internal/grpctest"
	"github.com/rebound-go/rebound/internal/observe/observetest"
	"github.com/rebound-go/rebound/serviceconfig"
)

// mdCarrier is gRPC metadata as a propagation.TextMapCarrier.
type mdCarrier metadata.MD

func (c mdCarrier) Get(k string) string {
	if v := metadata.MD(c).Get(k); len(v) > 0 {
		return v[0]
	}
	return ""
}
func (c mdCarrier) Set(k, v string) { metadata.MD(c).Set(k, v) }
func (c mdCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// traceparent is what an otelgrpc client handler does, in small: it sends
// the trace context of the attempt's span to the server in W3C
// traceparent form. Installed after rebound's interceptors, it runs once
// per attempt.
func traceparent(ctx context.Context) context.Context {
	md := metadata.MD{}
	propagation.TraceContext{}.Inject(ctx, mdCarrier(md))
	return metadata.AppendToOutgoingContext(ctx, "traceparent", mdCarrier(md).Get("traceparent"))
}

func injectUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(traceparent(ctx), method, req, reply, cc, opts...)
}

func injectStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(traceparent(ctx), desc, cc, method, opts...)
}

// parents records, by the attempt's number of previous attempts, the span
// the server's incoming trace context names as its parent.
type parents struct {
	mu  sync.Mutex
	ids map[int]trace.SpanID
}

func (p *parents) record(ctx context.Context) {
	md, _ := metadata.FromIncomingContext(ctx)
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), mdCarrier(md)))
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ids == nil {
		p.ids = map[int]trace.SpanID{}
	}
	p.ids[grpcretry.PreviousAttempts(ctx)] = sc.SpanID()
}

func (p *parents) of(previous int) trace.SpanID {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ids[previous]
}

// tracedClient dials srv through rebound traced by a fresh provider, with
// an interceptor after rebound's that sends each attempt's trace context.
func tracedClient(t *testing.T, srv *grpctest.Server, cfg *serviceconfig.Config, clk *clocktest.Clock) (testpb.TestServiceClient, *tracetest.InMemoryExporter, trace.Tracer) {
	t.Helper()
	tc, exp, tr, _ := tracedClientEnds(t, srv, cfg, clk)
	return tc, exp, tr
}

// tracedClientEnds is tracedClient, and the names of the spans as they
// end (observetest.Ends).
func tracedClientEnds(t *testing.T, srv *grpctest.Server, cfg *serviceconfig.Config, clk *clocktest.Clock) (testpb.TestServiceClient, *tracetest.InMemoryExporter, trace.Tracer, <-chan string) {
	t.Helper()
	tp, exp := observetest.Tracing(t)
	ends := observetest.Ends(tp)
	c, err := grpcretry.New(cfg, grpcretry.WithClock(clk), grpcretry.WithRandom(clocktest.NewRand(0.5)),
		grpcretry.WithTracerProvider(tp), grpcretry.WithServerName(t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	opts := append(c.DialOptions(), grpc.WithChainUnaryInterceptor(injectUnary), grpc.WithChainStreamInterceptor(injectStream))
	return testpb.NewTestServiceClient(srv.Dial(t, opts...)), exp, tp.Tracer("test"), ends
}

// callTree returns the call span, a child of root, named name, and its
// attempt spans by attempt.
func callTree(t *testing.T, exp *tracetest.InMemoryExporter, root trace.Span, name string, attempts int) (tracetest.SpanStub, observetest.Spans) {
	t.Helper()
	spans := observetest.Spans(exp.GetSpans())
	calls := spans.Named("Sent." + name)
	if len(calls) != 1 {
		t.Fatalf("%d call spans Sent.%s in %d spans", len(calls), name, len(spans))
	}
	call := calls[0]
	if call.Parent.SpanID() != root.SpanContext().SpanID() || call.SpanKind != trace.SpanKindClient {
		t.Errorf("call span: parent %v kind %v, want the test's span %v, client", call.Parent.SpanID(), call.SpanKind, root.SpanContext().SpanID())
	}
	as := spans.ChildrenOf(call).ByAttempt()
	if len(as) != attempts {
		t.Fatalf("%d attempt spans, want %d", len(as), attempts)
	}
	for _, a := range as {
		if a.Name != "Attempt."+name {
			t.Errorf("attempt span named %q", a.Name)
		}
	}
	return call, as
}

func checkEvents(t *testing.T, sp tracetest.SpanStub, want ...string) {
	t.Helper()
	if got := observetest.Events(sp); !slices.Equal(got, want) {
		t.Errorf("events of %s:\n got %q\nwant %q", sp.Name, got, want)
	}
}

func TestTraceRetriedUnary(t *testing.T) {
	var ps parents
	srv := grpctest.Start(t, grpctest.Handlers{Unary: func(ctx context.Context, n int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		ps.record(ctx)
		switch n {
		case 1:
			return nil, status.Error(codes.Unavailable, "busy")
		case 2:
			_ = grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", "30"))
			return nil, status.Error(codes.Unavailable, "busy, later")
		}
		return &testpb.SimpleResponse{}, nil
	}})
	tc, exp, tr := tracedClient(t, srv, retryConfig(t, 4, `"UNAVAILABLE"`, ""), clocktest.NewAuto())
	ctx, root := tr.Start(context.Background(), "test")
	if _, err := tc.UnaryCall(ctx, grpctest.Request("x")); err != nil {
		t.Fatal(err)
	}
	root.End()
	call, as := callTree(t, exp, root, "grpc.testing.TestService.UnaryCall", 3)
	observetest.CheckAttempt(t, as[0], 0, "UNAVAILABLE", true)
	observetest.CheckAttempt(t, as[1], 1, "UNAVAILABLE", true)
	observetest.CheckAttempt(t, as[2], 2, "OK", false)
	observetest.CheckEnd(t, call, "rpc.response.status_code", "OK", false)
	if v, _ := observetest.Attr(call, "rebound.attempts"); v.AsInt64() != 3 {
		t.Errorf("rebound.attempts %v", v.String())
	}
	if v, _ := observetest.Attr(call, "rpc.method"); v.AsString() != "grpc.testing.TestService/UnaryCall" {
		t.Errorf("rpc.method %v", v.String())
	}
	checkEvents(t, call,
		"backoff started rebound.attempt=1 rebound.delay=0.05",
		"pushback received rebound.attempt=2 rebound.pushback=0.03",
		"backoff started rebound.attempt=2 rebound.delay=0.03",
	)
	// The server's trace context names the attempt that carried it.
	for i, a := range as {
		if got := ps.of(i); got != a.SpanContext.SpanID() {
			t.Errorf("server's parent for attempt %d: %v, want the attempt's span %v", i+1, got, a.SpanContext.SpanID())
		}
	}
}

func TestTraceGaveUp(t *testing.T) {
	srv := grpctest.Start(t, failFirst(1000, codes.Unavailable))
	tc, exp, tr := tracedClient(t, srv, retryConfig(t, 2, `"UNAVAILABLE"`, ""), clocktest.NewAuto())
	ctx, root := tr.Start(context.Background(), "test")
	if _, err := tc.UnaryCall(ctx, grpctest.Request("x")); status.Code(err) != codes.Unavailable {
		t.Fatalf("err %v", err)
	}
	root.End()
	call, as := callTree(t, exp, root, "grpc.testing.TestService.UnaryCall", 2)
	observetest.CheckAttempt(t, as[1], 1, "UNAVAILABLE", true)
	observetest.CheckEnd(t, call, "rpc.response.status_code", "UNAVAILABLE", true)
	checkEvents(t, call,
		"backoff started rebound.attempt=1 rebound.delay=0.05",
		"retrying stopped rebound.attempts=2 rebound.reason=attempts exhausted",
	)
}

func TestTraceHedgedUnary(t *testing.T) {
	var ps parents
	arrived := make(chan struct{}) // attempt 1 reached the server
	srv := grpctest.Start(t, grpctest.Handlers{Unary: func(ctx context.Context, _ int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		ps.record(ctx)
		switch grpcretry.PreviousAttempts(ctx) {
		case 0: // slow: it loses
			close(arrived)
			<-ctx.Done()
			return nil, status.FromContextError(ctx.Err()).Err()
		case 1:
			<-arrived
			return nil, status.Error(codes.Unavailable, "busy")
		}
		return &testpb.SimpleResponse{}, nil
	}})
	js := fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"hedgingPolicy":{"maxAttempts":3,"hedgingDelay":"0.01s","nonFatalStatusCodes":["UNAVAILABLE"]}}]}`, grpctest.Service)
	cfg, err := serviceconfig.Parse([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktest.New()
	tc, exp, tr := tracedClient(t, srv, cfg, clk)
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
	if _, err := tc.UnaryCall(ctx, grpctest.Request("x")); err != nil {
		t.Fatal(err)
	}
	<-done
	root.End()
	call, as := callTree(t, exp, root, "grpc.testing.TestService.UnaryCall", 3)
	observetest.CheckAttempt(t, as[0], 0, "CANCELLED", true)
	observetest.CheckAttempt(t, as[1], 1, "UNAVAILABLE", true)
	observetest.CheckAttempt(t, as[2], 2, "OK", false)
	observetest.CheckEnd(t, call, "rpc.response.status_code", "OK", false)
	// Attempt 3's response headers commit the call to it, and cancel
	// attempt 1: the commit is recorded before the attempt it cancels
	// ends.
	checkEvents(t, call,
		"hedge sent rebound.attempt=2",
		"hedge sent rebound.attempt=3",
		"committed rebound.attempt=3 rebound.why=response headers",
		"hedge cancelled rebound.attempt=1",
	)
	for i, a := range as {
		if got := ps.of(i); got != a.SpanContext.SpanID() {
			t.Errorf("server's parent for attempt %d: %v, want the attempt's span %v", i+1, got, a.SpanContext.SpanID())
		}
	}
}

func TestTraceRetriedStream(t *testing.T) {
	var ps parents
	srv := grpctest.Start(t, grpctest.Handlers{ServerStream: func(n int, _ *testpb.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
		ps.record(s.Context())
		if n == 1 {
			return status.Error(codes.Unavailable, "busy")
		}
		return s.Send(&testpb.StreamingOutputCallResponse{})
	}})
	tc, exp, tr := tracedClient(t, srv, retryConfig(t, 3, `"UNAVAILABLE"`, ""), clocktest.NewAuto())
	ctx, root := tr.Start(context.Background(), "test")
	st, err := tc.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{})
	if err != nil {
		t.Fatal(err)
	}
	msgs := 0
	for {
		if _, err := st.Recv(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		msgs++
	}
	root.End()
	if msgs != 1 {
		t.Fatalf("%d messages", msgs)
	}
	call, as := callTree(t, exp, root, "grpc.testing.TestService.StreamingOutputCall", 2)
	observetest.CheckAttempt(t, as[0], 0, "UNAVAILABLE", true)
	observetest.CheckAttempt(t, as[1], 1, "OK", false)
	observetest.CheckEnd(t, call, "rpc.response.status_code", "OK", false)
	checkEvents(t, call,
		"backoff started rebound.attempt=1 rebound.delay=0.05",
		"committed rebound.attempt=2 rebound.why=response headers",
	)
	if got := ps.of(1); got != as[1].SpanContext.SpanID() {
		t.Errorf("server's parent for attempt 2: %v, want the attempt's span %v", got, as[1].SpanContext.SpanID())
	}
}

func TestTraceThrottled(t *testing.T) {
	// maxTokens 2, tokenRatio 1: the throttle allows retries while it
	// holds more than 1 token, and the first failure leaves 1.
	throttling := `,"retryThrottling":{"maxTokens":2,"tokenRatio":1}`
	srv := grpctest.Start(t, failFirst(1000, codes.Unavailable))
	for _, tc := range []struct {
		name, policy string
		clock        *clocktest.Clock // the hedge's delay never passes
		events       []string
	}{
		{"retry", `"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}`, clocktest.NewAuto(),
			[]string{"retry throttled rebound.attempt=2", "retrying stopped rebound.attempts=1 rebound.reason=throttled"}},
		{"hedge", `"hedgingPolicy":{"maxAttempts":3,"hedgingDelay":"1s","nonFatalStatusCodes":["UNAVAILABLE"]}`, clocktest.New(),
			[]string{"hedge throttled rebound.attempt=2", "retrying stopped rebound.attempts=1 rebound.reason=throttled"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := serviceconfig.Parse([]byte(fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],%s}]%s}`, grpctest.Service, tc.policy, throttling)))
			if err != nil {
				t.Fatal(err)
			}
			tc2, exp, tr := tracedClient(t, srv, cfg, tc.clock)
			ctx, root := tr.Start(context.Background(), "test")
			if _, err := tc2.UnaryCall(ctx, grpctest.Request("x")); status.Code(err) != codes.Unavailable {
				t.Fatalf("err %v", err)
			}
			root.End()
			call, _ := callTree(t, exp, root, "grpc.testing.TestService.UnaryCall", 1)
			checkEvents(t, call, tc.events...)
		})
	}
}

func TestTraceHedgedStream(t *testing.T) {
	var ps parents
	arrived := make(chan struct{}) // attempt 1 reached the server
	srv := grpctest.Start(t, grpctest.Handlers{ServerStream: func(_ int, _ *testpb.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
		ps.record(s.Context())
		if grpcretry.PreviousAttempts(s.Context()) == 0 { // a straggler: the hedge wins
			close(arrived)
			<-s.Context().Done()
			return status.FromContextError(s.Context().Err()).Err()
		}
		return s.Send(&testpb.StreamingOutputCallResponse{})
	}})
	js := fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"hedgingPolicy":{"maxAttempts":2,"hedgingDelay":"0.01s","nonFatalStatusCodes":["UNAVAILABLE"]}}]}`, grpctest.Service)
	cfg, err := serviceconfig.Parse([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktest.New()
	tc, exp, tr := tracedClient(t, srv, cfg, clk)
	ctx, root := tr.Start(context.Background(), "test")
	done := make(chan struct{})
	go func() {
		// The hedge goes once the first attempt is at the server.
		defer close(done)
		<-arrived
		if clk.WaitPending(1) {
			clk.Advance(10 * time.Millisecond)
		}
	}()
	st, err := tc.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := st.Recv(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	<-done
	root.End()
	call, as := callTree(t, exp, root, "grpc.testing.TestService.StreamingOutputCall", 2)
	observetest.CheckAttempt(t, as[0], 0, "CANCELLED", true)
	observetest.CheckAttempt(t, as[1], 1, "OK", false)
	observetest.CheckEnd(t, call, "rpc.response.status_code", "OK", false)
	checkEvents(t, call,
		"hedge sent rebound.attempt=2",
		"committed rebound.attempt=2 rebound.why=response headers",
		"hedge cancelled rebound.attempt=1",
	)
	for i, a := range as {
		if got := ps.of(i); got != a.SpanContext.SpanID() {
			t.Errorf("server's parent for attempt %d: %v, want the attempt's span %v", i+1, got, a.SpanContext.SpanID())
		}
	}
}

// grpc-go's own OpenTelemetry tracing, installed beside rebound, runs
// inside each of rebound's attempts: its call span hangs under rebound's
// attempt span, and the server's span, which its propagator links to the
// client's, under that.
func TestTraceUnderGRPCGoTracing(t *testing.T) {
	tp, exp := observetest.Tracing(t)
	ends := observetest.Ends(tp)
	grpcOTel := opentelemetry.Options{TraceOptions: experimental.TraceOptions{TracerProvider: tp, TextMapPropagator: propagation.TraceContext{}}}
	srv := grpctest.Start(t, failFirst(1, codes.Unavailable), opentelemetry.ServerOption(grpcOTel))
	c, err := grpcretry.New(retryConfig(t, 3, `"UNAVAILABLE"`, ""), grpcretry.WithClock(clocktest.NewAuto()),
		grpcretry.WithRandom(clocktest.NewRand(0.5)), grpcretry.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	tc := testpb.NewTestServiceClient(srv.Dial(t, append(c.DialOptions(), opentelemetry.DialOption(grpcOTel))...))
	ctx, root := tp.Tracer("test").Start(context.Background(), "test")
	if _, err := tc.UnaryCall(ctx, grpctest.Request("x")); err != nil {
		t.Fatal(err)
	}
	root.End()

	const name = "grpc.testing.TestService.UnaryCall"
	// The server's span ends after its status has gone out, so after the
	// client may have returned: wait for both attempts' server spans.
	observetest.Await(t, ends, "Recv."+name, 2)
	spans := observetest.Spans(exp.GetSpans())
	ours := func(s observetest.Spans) observetest.Spans {
		var out observetest.Spans
		for _, sp := range s {
			if sp.InstrumentationScope.Name == "github.com/rebound-go/rebound/grpcretry" {
				out = append(out, sp)
			}
		}
		return out
	}
	calls := ours(spans.Named("Sent." + name))
	if len(calls) != 1 {
		t.Fatalf("%d rebound call spans", len(calls))
	}
	attempts := ours(spans.ChildrenOf(calls[0])).ByAttempt()
	if len(attempts) != 2 {
		t.Fatalf("%d rebound attempt spans, want 2", len(attempts))
	}
	for i, a := range attempts {
		// rebound's attempt → grpc-go's call → grpc-go's attempt → the
		// server's span.
		inner := spans.ChildrenOf(a)
		if len(inner) != 1 || inner[0].Name != "Sent."+name || inner[0].InstrumentationScope.Name == a.InstrumentationScope.Name {
			t.Fatalf("attempt %d: children %d, want grpc-go's call span", i+1, len(inner))
		}
		grpcAttempts := spans.ChildrenOf(inner[0])
		if len(grpcAttempts) != 1 || grpcAttempts[0].Name != "Attempt."+name {
			t.Fatalf("attempt %d: grpc-go's call span has %d children, want its attempt", i+1, len(grpcAttempts))
		}
		server := spans.ChildrenOf(grpcAttempts[0])
		if len(server) != 1 || server[0].Name != "Recv."+name {
			t.Fatalf("attempt %d: grpc-go's attempt has %d children, want the server's span", i+1, len(server))
		}
	}
}

func TestTraceBufferOverflow(t *testing.T) {
	srv := grpctest.Start(t, grpctest.Handlers{ClientStream: func(_ int, s grpc.ClientStreamingServer[testpb.StreamingInputCallRequest, testpb.StreamingInputCallResponse]) error {
		for {
			if _, err := s.Recv(); err == io.EOF {
				return s.SendAndClose(&testpb.StreamingInputCallResponse{})
			} else if err != nil {
				return err
			}
		}
	}})
	tp, exp := observetest.Tracing(t)
	c, err := grpcretry.New(retryConfig(t, 3, `"UNAVAILABLE"`, ""), grpcretry.WithTracerProvider(tp), grpcretry.WithBufferLimits(1<<10, 100))
	if err != nil {
		t.Fatal(err)
	}
	tc := testpb.NewTestServiceClient(srv.Dial(t, c.DialOptions()...))
	st, err := tc.StreamingInputCall(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(inMsg("small")); err != nil {
		t.Fatal(err)
	}
	// More than the call's 100 bytes: kept no longer, the call commits.
	if err := st.Send(inMsg(strings.Repeat("x", 200))); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
	calls := observetest.Spans(exp.GetSpans()).Named("Sent.grpc.testing.TestService.StreamingInputCall")
	if len(calls) != 1 {
		t.Fatalf("%d call spans", len(calls))
	}
	checkEvents(t, calls[0], "committed rebound.attempt=1 rebound.why=message not kept for replay: buffer limit, or not a proto message")
}

func TestTraceRequestTooLarge(t *testing.T) {
	srv := grpctest.Start(t, failFirst(1, codes.Unavailable))
	tp, exp := observetest.Tracing(t)
	c, err := grpcretry.New(retryConfig(t, 3, `"UNAVAILABLE"`, ""), grpcretry.WithTracerProvider(tp), grpcretry.WithBufferLimits(1<<10, 10))
	if err != nil {
		t.Fatal(err)
	}
	tc := testpb.NewTestServiceClient(srv.Dial(t, c.DialOptions()...))
	if _, err := tc.UnaryCall(context.Background(), grpctest.Request(strings.Repeat("x", 100))); status.Code(err) != codes.Unavailable {
		t.Fatalf("err %v, want the one attempt's UNAVAILABLE", err)
	}
	calls := observetest.Spans(exp.GetSpans()).Named("Sent.grpc.testing.TestService.UnaryCall")
	if len(calls) != 1 {
		t.Fatalf("%d call spans", len(calls))
	}
	checkEvents(t, calls[0],
		"committed rebound.attempt=1 rebound.why=request does not fit the buffer",
		"retrying stopped rebound.attempts=1 rebound.reason=call committed",
	)
}

func TestTracePushbackStop(t *testing.T) {
	srv := grpctest.Start(t, grpctest.Handlers{Unary: func(ctx context.Context, _ int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		_ = grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", "-1"))
		return nil, status.Error(codes.Unavailable, "go away")
	}})
	tc, exp, tr := tracedClient(t, srv, retryConfig(t, 3, `"UNAVAILABLE"`, ""), clocktest.NewAuto())
	ctx, root := tr.Start(context.Background(), "test")
	if _, err := tc.UnaryCall(ctx, grpctest.Request("x")); status.Code(err) != codes.Unavailable {
		t.Fatalf("err %v", err)
	}
	root.End()
	call, _ := callTree(t, exp, root, "grpc.testing.TestService.UnaryCall", 1)
	checkEvents(t, call,
		"pushback received rebound.attempt=1 rebound.pushback_stop=true",
		"retrying stopped rebound.attempts=1 rebound.reason=server pushback said not to retry",
	)
}

// A stream's spans end when its caller's context does, whether the caller
// is waiting between attempts or has stopped reading a committed stream:
// no span outlives the call.
func TestTraceAbandonedStream(t *testing.T) {
	const name = "grpc.testing.TestService.StreamingOutputCall"
	t.Run("committed, caller stops reading", func(t *testing.T) {
		srv := grpctest.Start(t, grpctest.Handlers{ServerStream: func(n int, _ *testpb.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
			if n == 1 {
				return status.Error(codes.Unavailable, "busy")
			}
			if err := s.Send(&testpb.StreamingOutputCallResponse{}); err != nil {
				return err
			}
			<-s.Context().Done()
			return s.Context().Err()
		}})
		tc, exp, tr, ends := tracedClientEnds(t, srv, retryConfig(t, 3, `"UNAVAILABLE"`, ""), clocktest.NewAuto())
		ctx, root := tr.Start(context.Background(), "test")
		ctx, cancel := context.WithCancel(ctx)
		st, err := tc.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
		// The caller walks away: no Recv to the end, only its context.
		cancel()
		observetest.Await(t, ends, "Sent."+name, 1)
		root.End()
		call, as := callTree(t, exp, root, name, 2)
		observetest.CheckAttempt(t, as[0], 0, "UNAVAILABLE", true)
		observetest.CheckAttempt(t, as[1], 1, "CANCELLED", true)
		observetest.CheckEnd(t, call, "rpc.response.status_code", "CANCELLED", true)
		checkEvents(t, call,
			"backoff started rebound.attempt=1 rebound.delay=0.05",
			"committed rebound.attempt=2 rebound.why=response headers",
			"retrying stopped rebound.attempts=2 rebound.reason=context canceled",
		)
	})
	t.Run("cancelled in backoff", func(t *testing.T) {
		srv := grpctest.Start(t, grpctest.Handlers{ServerStream: func(int, *testpb.StreamingOutputCallRequest, grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
			return status.Error(codes.Unavailable, "busy")
		}})
		clk := clocktest.New()
		tc, exp, tr, ends := tracedClientEnds(t, srv, retryConfig(t, 3, `"UNAVAILABLE"`, ""), clk)
		ctx, root := tr.Start(context.Background(), "test")
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		st, err := tc.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{})
		if err != nil {
			t.Fatal(err)
		}
		// The application's Recv learns that attempt 1 failed, and waits
		// for the retry.
		recvErr := make(chan error, 1)
		go func() {
			_, err := st.Recv()
			recvErr <- err
		}()
		if !clk.WaitPending(1) { // the backoff after attempt 1
			t.Fatal("no backoff started")
		}
		cancel()
		if err := <-recvErr; status.Code(err) != codes.Canceled {
			t.Fatalf("Recv = %v, want CANCELLED", err)
		}
		observetest.Await(t, ends, "Sent."+name, 1)
		root.End()
		call, as := callTree(t, exp, root, name, 1)
		observetest.CheckAttempt(t, as[0], 0, "UNAVAILABLE", true)
		observetest.CheckEnd(t, call, "rpc.response.status_code", "CANCELLED", true)
		checkEvents(t, call,
			"backoff started rebound.attempt=1 rebound.delay=0.05",
			"retrying stopped rebound.attempts=1 rebound.reason=context canceled",
		)
	})
}
