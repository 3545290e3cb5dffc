package observe_test

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/observe"
	"github.com/rebound-go/rebound/internal/observe/observetest"
)

// Without a TracerProvider every step of a traced call is a no-op that
// allocates nothing.
func TestTracingOffCostsNothing(t *testing.T) {
	tr := observe.NewTracer(nil, "scope", observe.SystemGRPC)
	if tr != nil {
		t.Fatal("a Tracer without a provider")
	}
	ctx := context.Background()
	u := &url.URL{Scheme: "http", Host: "example.test"}
	err := errors.New("boom")
	allocs := testing.AllocsPerRun(100, func() {
		c, call := tr.StartRPC(ctx, "/pkg.Service/Method", "host:443")
		_, _ = tr.StartHTTP(ctx, "GET", u)
		a, as := call.StartAttempt(c, 1)
		call.Retry(1, time.Second)
		call.Hedge(2)
		call.Throttled(3)
		call.Committed(1, "why")
		call.GaveUp(1, rebound.ErrThrottled)
		as.Transparent()
		as.Committed("why")
		_ = as.Into(a)
		_ = call.Lost(a)
		as.End(observe.Outcome{Err: err, Failed: true}, rebound.RetryInfo{HasRetryAfter: true}, true)
		call.End(observe.Outcome{})
	})
	if allocs != 0 {
		t.Errorf("%v allocations with tracing off, want 0", allocs)
	}
}

func TestTraceHTTPOutcome(t *testing.T) {
	tp, exp := observetest.Tracing(t)
	tr := observe.NewTracer(tp, "scope", observe.SystemHTTP)
	u, _ := url.Parse("http://user:secret@example.test:8080/x")
	ctx, call := tr.StartHTTP(context.Background(), "", u)
	_, as := call.StartAttempt(ctx, 1)
	as.End(observe.Outcome{HTTPStatus: 404, Failed: true}, rebound.RetryInfo{}, false)
	as.End(observe.Outcome{HTTPStatus: 200}, rebound.RetryInfo{}, false) // only the first End counts
	call.End(observe.Outcome{HTTPStatus: 404, Failed: true})
	call.End(observe.Outcome{})

	spans := observetest.Spans(exp.GetSpans())
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	a, c := spans[0], spans[1]
	if a.Name != "Attempt.GET" || c.Name != "GET" || !observetest.IsChild(a, c) {
		t.Fatalf("spans %q under %q", a.Name, c.Name)
	}
	observetest.CheckEnd(t, a, "error.type", "404", true)
	observetest.CheckEnd(t, c, "http.response.status_code", "404", true)
	want := map[string]string{"http.request.method": "GET", "server.address": "example.test", "server.port": "8080",
		"url.full": "http://user:xxxxx@example.test:8080/x", "rebound.attempts": "1"}
	for k, v := range want {
		if got, _ := observetest.Attr(c, k); got.String() != v {
			t.Errorf("%s = %q, want %q", k, got.String(), v)
		}
	}
	if _, ok := observetest.Attr(a, "http.request.resend_count"); ok {
		t.Error("the first attempt has http.request.resend_count")
	}
	if got := observetest.Events(c); len(got) != 0 {
		t.Errorf("events %q", got)
	}
}
