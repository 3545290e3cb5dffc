package httpretry_test

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/rebound-go/rebound/httpretry"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/internal/observe/observetest"
)

// injecting is what otelhttp.NewTransport does, in small: it sends the
// trace context of the request's span in a traceparent header. Under
// rebound it runs once per attempt.
type injecting struct{ base http.RoundTripper }

func (i injecting) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	propagation.TraceContext{}.Inject(r.Context(), propagation.HeaderCarrier(r.Header))
	return i.base.RoundTrip(r)
}

func TestTraceHTTPRetry(t *testing.T) {
	var (
		mu      sync.Mutex
		parents []trace.SpanID // by request number - 1
	)
	srv := newServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
		sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.HeaderCarrier(r.Header)))
		mu.Lock()
		parents = append(parents, sc.SpanID())
		mu.Unlock()
		switch n {
		case 1:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
		case 2:
			w.WriteHeader(http.StatusBadGateway)
		}
	})
	tp, exp := observetest.Tracing(t)
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	rt, err := httpretry.New(injecting{base}, httpretry.WithClock(clocktest.NewAuto()), httpretry.WithRandom(clocktest.NewRand(0.5)),
		httpretry.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	ctx, root := tp.Tracer("test").Start(context.Background(), "test")
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/x", nil)
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); resp.StatusCode != http.StatusOK || got != "" {
		t.Fatalf("response %d %q", resp.StatusCode, got)
	}
	root.End()

	spans := observetest.Spans(exp.GetSpans())
	calls := spans.Named("GET")
	if len(calls) != 1 || !observetest.IsChild(calls[0], spans.Named("test")[0]) || calls[0].SpanKind != trace.SpanKindClient {
		t.Fatalf("%d call spans GET, want 1 client span under the test's: %+v", len(calls), calls)
	}
	call := calls[0]
	as := spans.ChildrenOf(call).ByAttempt()
	if len(as) != 3 {
		t.Fatalf("%d attempt spans, want 3", len(as))
	}
	for i, a := range as {
		if a.Name != "Attempt.GET" {
			t.Errorf("attempt span %q", a.Name)
		}
		v, ok := observetest.Attr(a, "http.request.resend_count")
		if i == 0 && ok || i > 0 && v.AsInt64() != int64(i) {
			t.Errorf("attempt %d: http.request.resend_count %v (set %v)", i+1, v.String(), ok)
		}
		if parents[i] != a.SpanContext.SpanID() {
			t.Errorf("server's parent for attempt %d: %v, want the attempt's span %v", i+1, parents[i], a.SpanContext.SpanID())
		}
	}
	observetest.CheckEnd(t, as[0], "http.response.status_code", "503", true)
	observetest.CheckEnd(t, as[1], "http.response.status_code", "502", true)
	observetest.CheckEnd(t, as[2], "http.response.status_code", "200", false)
	observetest.CheckEnd(t, call, "http.response.status_code", "200", false)
	if v, _ := observetest.Attr(call, "url.full"); v.AsString() != srv.URL+"/x" {
		t.Errorf("url.full %q", v.AsString())
	}
	want := []string{
		// Retry-After 1, and up to half a second more (a quarter at 0.5).
		"pushback received rebound.attempt=1 rebound.pushback=1.25",
		"backoff started rebound.attempt=1 rebound.delay=1.25",
		"backoff started rebound.attempt=2 rebound.delay=1",
	}
	if got := observetest.Events(call); !slices.Equal(got, want) {
		t.Errorf("events:\n got %q\nwant %q", got, want)
	}
}

func TestTraceHTTPHedge(t *testing.T) {
	arrived := make(chan struct{}) // the first attempt reached the server
	srv := newServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 1 { // a straggler: the hedge wins
			close(arrived)
			<-r.Context().Done()
		}
	})
	tp, exp := observetest.Tracing(t)
	clk := clocktest.New()
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	rt, err := httpretry.New(base, httpretry.WithClock(clk), httpretry.WithHedging(10*time.Millisecond, 2), httpretry.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		// The hedge goes once the first attempt is at the server.
		defer close(done)
		<-arrived
		if clk.WaitPending(1) {
			clk.Advance(10 * time.Millisecond)
		}
	}()
	resp, err := (&http.Client{Transport: rt}).Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	<-done

	spans := observetest.Spans(exp.GetSpans())
	calls := spans.Named("GET")
	if len(calls) != 1 {
		t.Fatalf("%d call spans", len(calls))
	}
	as := spans.ChildrenOf(calls[0]).ByAttempt()
	if len(as) != 2 {
		t.Fatalf("%d attempt spans, want 2", len(as))
	}
	if as[0].Status.Code.String() != "Error" {
		t.Errorf("the cancelled attempt's status %v, want Error", as[0].Status)
	}
	observetest.CheckEnd(t, as[1], "http.response.status_code", "200", false)
	want := []string{"hedge sent rebound.attempt=2", "committed rebound.attempt=2 rebound.why=response received", "hedge cancelled rebound.attempt=1"}
	if got := observetest.Events(calls[0]); !slices.Equal(got, want) {
		t.Errorf("events:\n got %q\nwant %q", got, want)
	}
}

func TestTraceHTTPBodyNotReplayable(t *testing.T) {
	srv := newServer(t, script(503))
	tp, exp := observetest.Tracing(t)
	client, _ := newClient(t, httpretry.WithBufferLimits(1, 1), httpretry.WithTracerProvider(tp))
	// Without GetBody and with no buffering, the body can be sent once.
	req, _ := http.NewRequest(http.MethodPut, srv.URL, io.NopCloser(strings.NewReader("once")))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if srv.attempts() != 1 {
		t.Fatalf("%d attempts reached the server, want 1", srv.attempts())
	}
	spans := observetest.Spans(exp.GetSpans())
	calls := spans.Named("PUT")
	if len(calls) != 1 {
		t.Fatalf("%d call spans", len(calls))
	}
	as := spans.ChildrenOf(calls[0])
	if len(as) != 1 || as[0].Name != "Attempt.PUT" {
		t.Fatalf("attempt spans %+v", as)
	}
	observetest.CheckEnd(t, as[0], "http.response.status_code", "503", true)
	observetest.CheckEnd(t, calls[0], "http.response.status_code", "503", true)
	want := []string{"committed rebound.attempt=1 rebound.why=request body cannot be replayed"}
	if got := observetest.Events(calls[0]); !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
}

func TestTraceHTTPRetryAfterBeyondCap(t *testing.T) {
	srv := newServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "120")
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	tp, exp := observetest.Tracing(t)
	client, _ := newClient(t, httpretry.WithTracerProvider(tp))
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	calls := observetest.Spans(exp.GetSpans()).Named("GET")
	if len(calls) != 1 {
		t.Fatalf("%d call spans", len(calls))
	}
	// The response is returned at once: retrying stops on it.
	want := []string{
		"committed rebound.attempt=1 rebound.why=Retry-After beyond cap",
		"retrying stopped rebound.attempts=1 rebound.reason=server asked to wait longer than the cap",
	}
	if got := observetest.Events(calls[0]); !slices.Equal(got, want) {
		t.Errorf("events:\n got %q\nwant %q", got, want)
	}
}
