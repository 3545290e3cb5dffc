package observe

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/observe/observetest"
)

func TestStatsBuckets(t *testing.T) {
	r, _ := New(nil, nil, "test", GRPC)
	ctx := context.Background()
	// Calls with 0, 1, 3, 12 retries; the last one's retries all failed.
	for _, c := range []Call{
		{Method: "/a.S/M", Attempts: 1},
		{Method: "/a.S/M", Attempts: 2},
		{Method: "/a.S/M", Attempts: 4, FailedLater: 2},
		{Method: "/a.S/M", Attempts: 13, FailedLater: 12, Reason: rebound.ErrAttemptsExhausted},
		{Method: "/a.S/H", Attempts: 3, Hedged: true, FailedLater: 1, Pushbacks: 1},
		{Method: "/a.S/H", Attempts: 1, Hedged: true, Reason: rebound.ErrThrottled},
		{Method: "/a.S/H", Attempts: 1, Hedged: true, Reason: rebound.ErrPushback, Delay: time.Second},
	} {
		r.End(ctx, &c)
	}
	s := r.Stats()
	m := s["/a.S/M"]
	// Retry ordinals: 1; 1,2,3; 1..12 → >=1:3 >=2:2 >=3:2 >=4:1 >=5:5 (5..9) >=10:3 (10..12).
	want := rebound.AttemptStats{Attempts: 16, Failed: 14, Histogram: [8]uint64{3, 2, 2, 1, 5, 3, 0, 0}}
	if m.Calls != 4 || m.Retries != want || m.Hedges != (rebound.AttemptStats{}) {
		t.Fatalf("/a.S/M stats %+v, want retries %+v", m, want)
	}
	h := s["/a.S/H"]
	wantH := rebound.AttemptStats{Attempts: 2, Failed: 1, Histogram: [8]uint64{1, 1}}
	if h.Calls != 3 || h.Hedges != wantH || h.Throttled != 1 || h.PushbackStops != 1 || h.Pushbacks != 1 || h.RetryDelay != time.Second {
		t.Fatalf("/a.S/H stats %+v", h)
	}
}

func TestStatsBucketOrdinals(t *testing.T) {
	for k, want := range map[int]int{0: 0, 1: 0, 2: 1, 4: 3, 5: 4, 9: 4, 10: 5, 99: 5, 100: 6, 999: 6, 1000: 7, 5000: 7} {
		if got := Bucket(k); got != want {
			t.Errorf("StatsBucket(%d) = %d, want %d", k, got, want)
		}
	}
}

func TestMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	r, err := New(mp, nil, "github.com/rebound-go/rebound/test", GRPC)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r.End(ctx, &Call{Method: "/a.S/M", Target: "dns:///x:1", Attempts: 1})                                               // nothing recorded
	r.End(ctx, &Call{Method: "/a.S/M", Target: "dns:///x:1", Attempts: 3, Delay: 250 * time.Millisecond})                // 2 retries
	r.End(ctx, &Call{Method: "/a.S/M", Target: "dns:///x:1", Attempts: 2, Transparent: 1, Reason: rebound.ErrThrottled}) // throttled
	r.End(ctx, &Call{Method: "/a.S/H", Target: "dns:///x:1", Attempts: 4, Hedged: true, Reason: rebound.ErrPushback})
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			got[m.Name] = m
		}
	}
	hist := func(name, unit, method string) metricdata.HistogramDataPoint[int64] {
		t.Helper()
		m, ok := got[name]
		if !ok || m.Unit != unit {
			t.Fatalf("%s: missing or unit %q, want %q", name, m.Unit, unit)
		}
		for _, dp := range m.Data.(metricdata.Histogram[int64]).DataPoints {
			if v, _ := dp.Attributes.Value("grpc.method"); v.AsString() == method {
				if tv, _ := dp.Attributes.Value("grpc.target"); tv.AsString() != "dns:///x:1" {
					t.Fatalf("%s: grpc.target %q", name, tv.AsString())
				}
				return dp
			}
		}
		t.Fatalf("%s: no point for %s", name, method)
		return metricdata.HistogramDataPoint[int64]{}
	}
	if dp := hist(RetriesName, "{retry}", "/a.S/M"); dp.Count != 2 || dp.Sum != 3 || len(dp.Bounds) != 5 {
		t.Fatalf("retries: count %d sum %d bounds %v, want 2 calls, 3 retries, A96 buckets", dp.Count, dp.Sum, dp.Bounds)
	}
	if dp := hist(TransparentRetriesName, "{transparent_retry}", "/a.S/M"); dp.Count != 1 || dp.Sum != 1 || len(dp.Bounds) != 6 {
		t.Fatalf("transparent: %+v", dp)
	}
	if dp := hist(HedgesName, "{hedge}", "/a.S/H"); dp.Count != 1 || dp.Sum != 3 {
		t.Fatalf("hedges: count %d sum %d", dp.Count, dp.Sum)
	}
	delay := got[RetryDelayName]
	if delay.Unit != "s" {
		t.Fatalf("retry_delay unit %q", delay.Unit)
	}
	var sum float64
	var n uint64
	for _, dp := range delay.Data.(metricdata.Histogram[float64]).DataPoints {
		sum += dp.Sum
		n += dp.Count
	}
	if n != 3 || sum != 0.25 {
		t.Fatalf("retry_delay: %d points summing %v, want 3 and 0.25", n, sum)
	}
	counter := func(name string) int64 {
		var total int64
		for _, dp := range got[name].Data.(metricdata.Sum[int64]).DataPoints {
			total += dp.Value
		}
		return total
	}
	if counter(ThrottledName) != 1 || counter(PushbackStoppedName) != 1 {
		t.Fatalf("throttled %d pushback %d, want 1 and 1", counter(ThrottledName), counter(PushbackStoppedName))
	}
	// A96's instruments keep A96's names; rebound's own are outside
	// grpc.*; every point says which RPC system it is.
	for name, m := range got {
		switch name {
		case RetriesName, TransparentRetriesName, HedgesName, RetryDelayName:
		default:
			if !strings.HasPrefix(name, "rebound.client.call.") {
				t.Errorf("instrument %s: rebound's own instruments are named rebound.client.call.*", name)
			}
		}
		for _, set := range pointSets(m) {
			if v, _ := set.Value(RPCSystemKey); v.AsString() != "grpc" {
				t.Errorf("%s: rpc.system.name %q, want grpc", name, v.AsString())
			}
		}
	}
}

// pointSets returns the attribute sets of m's points.
func pointSets(m metricdata.Metrics) []attribute.Set {
	var out []attribute.Set
	switch d := m.Data.(type) {
	case metricdata.Histogram[int64]:
		for _, dp := range d.DataPoints {
			out = append(out, dp.Attributes)
		}
	case metricdata.Histogram[float64]:
		for _, dp := range d.DataPoints {
			out = append(out, dp.Attributes)
		}
	case metricdata.Sum[int64]:
		for _, dp := range d.DataPoints {
			out = append(out, dp.Attributes)
		}
	}
	return out
}

// TestMetricsConnect: a Connect recorder records what a gRPC one does,
// under the same names, but transparent retries, which connect-go does not
// make, and tells its points apart by rpc.system.name.
func TestMetricsConnect(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	r, err := New(mp, nil, "github.com/rebound-go/rebound/test", Connect)
	if err != nil {
		t.Fatal(err)
	}
	r.End(context.Background(), &Call{Method: "/a.S/M", Target: "x", Attempts: 3, AttemptTimeouts: 1, Reason: rebound.ErrThrottled})
	got := observetest.Collect(t, reader, "github.com/rebound-go/rebound/test")
	if _, ok := got[TransparentRetriesName]; ok {
		t.Error("a Connect recorder recorded transparent retries")
	}
	if dp := observetest.Histogram[int64](t, got, RetriesName, "{retry}", "connectrpc", "/a.S/M", "x"); dp.Count != 1 || dp.Sum != 2 {
		t.Errorf("retries: count %d sum %d, want 1 and 2", dp.Count, dp.Sum)
	}
	if n := observetest.Counter(t, got, ThrottledName, "{retry}", "connectrpc", "/a.S/M", "x"); n != 1 {
		t.Errorf("retries_throttled %d, want 1", n)
	}
	if n := observetest.Counter(t, got, AttemptTimeoutsName, "{attempt}", "connectrpc", "/a.S/M", "x"); n != 1 {
		t.Errorf("attempt_timeouts %d, want 1", n)
	}
}

func TestMetricsHTTP(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	r, err := New(mp, nil, "github.com/rebound-go/rebound/test", HTTP)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ok := HTTPAttributes{Method: "GET", ServerAddress: "example.com", ServerPort: 443, StatusCode: 200}
	failed := HTTPAttributes{Method: "GET", ServerAddress: "example.com", ServerPort: 443} // no response
	other := HTTPAttributes{Method: "_OTHER", ServerAddress: "(other)", StatusCode: 503}
	for _, c := range []Call{
		{Method: "GET example.com", HTTP: ok, Attempts: 1},                                         // nothing recorded
		{Method: "GET example.com", HTTP: ok, Attempts: 3, Delay: 250 * time.Millisecond},          // 2 retries
		{Method: "GET example.com", HTTP: failed, Attempts: 2, Reason: rebound.ErrThrottled},       // throttled
		{Method: "GET example.com", HTTP: ok, Attempts: 4, Hedged: true},                           // 3 hedges
		{Method: "(other)", HTTP: other, Attempts: 2, Transparent: 1, Reason: rebound.ErrPushback}, // pushback
	} {
		r.End(ctx, &c)
	}
	got := observetest.Collect(t, reader, "github.com/rebound-go/rebound/test")
	for name := range got {
		if !strings.HasPrefix(name, "rebound.client.call.") {
			t.Errorf("instrument %s recorded; an HTTP recorder records only rebound.client.call.*", name)
		}
	}
	okAttrs := []attribute.KeyValue{HTTPMethodKey.String("GET"), ServerAddressKey.String("example.com"), ServerPortKey.Int(443), HTTPStatusCodeKey.Int(200)}
	failedAttrs := []attribute.KeyValue{HTTPMethodKey.String("GET"), ServerAddressKey.String("example.com"), ServerPortKey.Int(443)}
	otherAttrs := []attribute.KeyValue{HTTPMethodKey.String("_OTHER"), ServerAddressKey.String("(other)"), HTTPStatusCodeKey.Int(503)}
	if dp := observetest.HistogramAt[int64](t, got, HTTPRetriesName, "{retry}", okAttrs...); dp.Count != 1 || dp.Sum != 2 || len(dp.Bounds) != 5 {
		t.Errorf("retries: count %d sum %d bounds %v, want 1 request, 2 retries, A96 buckets", dp.Count, dp.Sum, dp.Bounds)
	}
	if dp := observetest.HistogramAt[int64](t, got, HTTPRetriesName, "{retry}", failedAttrs...); dp.Count != 1 || dp.Sum != 1 {
		t.Errorf("retries without a response: count %d sum %d, want 1 and 1", dp.Count, dp.Sum)
	}
	if dp := observetest.HistogramAt[int64](t, got, HTTPHedgesName, "{hedge}", okAttrs...); dp.Count != 1 || dp.Sum != 3 {
		t.Errorf("hedges: count %d sum %d, want 1 and 3", dp.Count, dp.Sum)
	}
	if dp := observetest.HistogramAt[float64](t, got, HTTPRetryDelayName, "s", okAttrs...); dp.Count != 2 || dp.Sum != 0.25 {
		t.Errorf("retry_delay: count %d sum %v, want 2 and 0.25", dp.Count, dp.Sum)
	}
	if n := observetest.CounterAt(t, got, ThrottledName, "{retry}", failedAttrs...); n != 1 {
		t.Errorf("retries_throttled %d, want 1", n)
	}
	if n := observetest.CounterAt(t, got, PushbackStoppedName, "{retry}", otherAttrs...); n != 1 {
		t.Errorf("retries_pushback_stopped %d, want 1", n)
	}
	// Stats keep the Call's Method as their key, whatever the attributes.
	if s := r.Stats(); s["GET example.com"].Calls != 4 || s["(other)"].Calls != 1 {
		t.Errorf("stats %+v, want 4 calls of GET example.com and 1 of (other)", s)
	}
}

func TestDecisionLogs(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r, _ := New(nil, logger, "test", GRPC)
	d := r.Decisions(context.Background(), "/a.S/M", "x:1")
	call := Hooks[struct{}](&d)
	p, _ := rebound.NewRetrier(rebound.RetryPolicy{MaxAttempts: 3, Backoff: rebound.Backoff{Initial: time.Nanosecond, Max: time.Nanosecond, Multiplier: 1}})
	errBusy := errors.New("busy")
	_, _ = call.Retry(context.Background(), p, func(context.Context) (struct{}, error) { return struct{}{}, rebound.Retryable(errBusy) })
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d log records, want 3:\n%s", len(lines), buf.String())
	}
	for i, want := range []string{"retry scheduled", "retry scheduled", "gave up"} {
		if !strings.Contains(lines[i], want) || !strings.Contains(lines[i], "method=/a.S/M") {
			t.Errorf("record %d = %q, want %q", i, lines[i], want)
		}
	}
	if !strings.Contains(lines[2], `reason="attempts exhausted"`) || !strings.Contains(lines[2], "attempts=3") {
		t.Errorf("gave-up record lacks why: %q", lines[2])
	}
	// Without debug logging nothing hears the decisions: no hooks.
	quiet, _ := New(nil, slog.New(slog.NewTextHandler(&buf, nil)), "test", GRPC)
	qd := quiet.Decisions(context.Background(), "m", "t")
	if c := Hooks[struct{}](&qd); qd.Active() || c.OnRetry != nil || c.OnGiveUp != nil {
		t.Fatal("hooks set though debug logging is off")
	}
}
