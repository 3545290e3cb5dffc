package observetest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// Tracing returns a TracerProvider that hands every span to the returned
// in-memory exporter as it ends; it is shut down when the test ends.
func Tracing(t testing.TB) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp
}

// Spans are ended spans, as an in-memory exporter holds them.
type Spans tracetest.SpanStubs

// Named returns the spans named name, in the order they ended.
func (s Spans) Named(name string) Spans {
	var out Spans
	for _, sp := range s {
		if sp.Name == name {
			out = append(out, sp)
		}
	}
	return out
}

// ChildrenOf returns the spans whose parent is p, in the order they ended.
func (s Spans) ChildrenOf(p tracetest.SpanStub) Spans {
	var out Spans
	for _, sp := range s {
		if sp.Parent.SpanID() == p.SpanContext.SpanID() && sp.SpanContext.TraceID() == p.SpanContext.TraceID() {
			out = append(out, sp)
		}
	}
	return out
}

// ByAttempt sorts s by the A72 attribute previous-rpc-attempts, or for
// HTTP http.request.resend_count (absent counts as 0).
func (s Spans) ByAttempt() Spans {
	out := slices.Clone(s)
	n := func(sp tracetest.SpanStub) int64 {
		if v, ok := Attr(sp, "previous-rpc-attempts"); ok {
			return v.AsInt64()
		}
		v, _ := Attr(sp, "http.request.resend_count")
		return v.AsInt64()
	}
	slices.SortStableFunc(out, func(a, b tracetest.SpanStub) int { return int(n(a) - n(b)) })
	return out
}

// Attr returns the value of sp's attribute key.
func Attr(sp tracetest.SpanStub, key string) (attribute.Value, bool) {
	for _, kv := range sp.Attributes {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// Events returns sp's events as "name k=v k=v", attributes in the order
// they were given.
func Events(sp tracetest.SpanStub) []string {
	out := make([]string, 0, len(sp.Events))
	for _, e := range sp.Events {
		var b strings.Builder
		b.WriteString(e.Name)
		for _, kv := range e.Attributes {
			fmt.Fprintf(&b, " %s=%s", kv.Key, kv.Value.String())
		}
		out = append(out, b.String())
	}
	return out
}

// IsChild reports whether sp's parent is p.
func IsChild(sp, p tracetest.SpanStub) bool {
	return sp.Parent.SpanID() == p.SpanContext.SpanID() && sp.SpanContext.TraceID() == p.SpanContext.TraceID()
}

// CheckAttempt checks the A72 attributes, the status code (attribute
// rpc.response.status_code, or http.response.status_code for HTTP) and the
// span status of an attempt span.
func CheckAttempt(t testing.TB, sp tracetest.SpanStub, previous int, code string, failed bool) {
	t.Helper()
	if v, ok := Attr(sp, "previous-rpc-attempts"); !ok || v.AsInt64() != int64(previous) {
		t.Errorf("%s: previous-rpc-attempts %v, want %d", sp.Name, v.String(), previous)
	}
	if v, ok := Attr(sp, "transparent-retry"); !ok || v.AsBool() {
		t.Errorf("%s: transparent-retry %v (set %v), want false", sp.Name, v.String(), ok)
	}
	CheckEnd(t, sp, "rpc.response.status_code", code, failed)
}

// CheckEnd checks that sp's attribute key is want and its status is Error
// iff failed.
func CheckEnd(t testing.TB, sp tracetest.SpanStub, key, want string, failed bool) {
	t.Helper()
	if v, ok := Attr(sp, key); !ok || v.String() != want {
		t.Errorf("%s (previous %s): %s %q, want %q", sp.Name, attrText(sp, "previous-rpc-attempts"), key, v.String(), want)
	}
	if got := sp.Status.Code.String() == "Error"; got != failed {
		t.Errorf("%s (previous %s): status %v, want failed %v", sp.Name, attrText(sp, "previous-rpc-attempts"), sp.Status, failed)
	}
	if sp.SpanKind != trace.SpanKindInternal && sp.SpanKind != trace.SpanKindClient {
		t.Errorf("%s: kind %v", sp.Name, sp.SpanKind)
	}
}

func attrText(sp tracetest.SpanStub, key string) string {
	v, _ := Attr(sp, key)
	return v.String()
}

// Ends returns a channel that receives the name of each span tp ends from
// now on, once the exporter Tracing returned holds it: a test waits on it
// for spans that end after the call it made returned (a server's, say),
// rather than for time. It holds up to 1024 names; more are dropped.
func Ends(tp *sdktrace.TracerProvider) <-chan string {
	p := endSignal(make(chan string, 1024))
	tp.RegisterSpanProcessor(p)
	return p
}

// Await waits for n spans named name on ends (from Ends), failing the test
// if they have not ended within 10 seconds.
func Await(t testing.TB, ends <-chan string, name string, n int) {
	t.Helper()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for n > 0 {
		select {
		case got := <-ends:
			if got == name {
				n--
			}
		case <-timeout.C:
			t.Fatalf("%d more spans %s never ended", n, name)
		}
	}
}

// endSignal is a span processor that sends the name of each ended span.
type endSignal chan string

func (endSignal) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (e endSignal) OnEnd(s sdktrace.ReadOnlySpan) {
	select {
	case e <- s.Name():
	default:
	}
}
func (endSignal) Shutdown(context.Context) error   { return nil }
func (endSignal) ForceFlush(context.Context) error { return nil }
