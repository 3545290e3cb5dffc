package httpretry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/httpretry"
	"github.com/rebound-go/rebound/internal/clocktest"
)

// stepServer is a server whose handler a test replaces step by step;
// requests are numbered from 1 within each step.
type stepServer struct {
	*server

	mu sync.Mutex
	h  func(n int, w http.ResponseWriter, r *http.Request)
	n  int
}

func newStepServer(t *testing.T) *stepServer {
	s := &stepServer{h: script(200)}
	s.server = newServer(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.n++
		n, h := s.n, s.h
		s.mu.Unlock()
		h(n, w, r)
	})
	return s
}

func (s *stepServer) set(h func(n int, w http.ResponseWriter, r *http.Request)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.h, s.n = h, 0
}

// host is the server's host:port, the target of its requests.
func (s *stepServer) host() string { return strings.TrimPrefix(s.URL, "http://") }

// newTransport is newClient's Transport, for tests that read its Stats.
func newTransport(t *testing.T, clk *clocktest.Clock, opts ...httpretry.Option) (*httpretry.Transport, *http.Client) {
	t.Helper()
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	tr := httpretry.NewTransport(base, append([]httpretry.Option{httpretry.WithClock(clk), httpretry.WithRandom(clocktest.NewRand(0.5))}, opts...)...)
	if err := tr.Err(); err != nil {
		t.Fatal(err)
	}
	return tr, &http.Client{Transport: tr}
}

// send makes a request and closes its response.
func send(t *testing.T, client *http.Client, method, url string, body io.Reader) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err == nil {
		resp.Body.Close()
	}
}

// unreplayable is a request body without GetBody.
func unreplayable(s string) io.Reader { return struct{ io.Reader }{strings.NewReader(s)} }

func totalSleep(clk *clocktest.Clock) time.Duration {
	var d time.Duration
	for _, s := range clk.Sleeps() {
		d += s
	}
	return d
}

func TestStats(t *testing.T) {
	srv := newStepServer(t)
	clk := clocktest.NewAuto()
	// Bodies of more than 4 bytes without GetBody cannot be replayed.
	tr, client := newTransport(t, clk, httpretry.WithMaxBufferedBody(4))
	get, post, put := "GET "+srv.host(), "POST "+srv.host(), "PUT "+srv.host()
	// Each step sends one request and checks the statistics after it. The
	// backoff waits 500ms, then 1s.
	for _, step := range []struct {
		name   string
		h      func(n int, w http.ResponseWriter, r *http.Request)
		method string
		body   io.Reader
		want   rebound.Stats
	}{
		{"success at once", script(200), http.MethodGet, nil, rebound.Stats{
			get: {Calls: 1},
		}},
		{"success on attempt 3", script(503, 429, 200), http.MethodGet, nil, rebound.Stats{
			get: {Calls: 2, Retries: rebound.AttemptStats{Attempts: 2, Failed: 1, Histogram: [8]uint64{1, 1}}},
		}},
		{"attempts exhausted", script(503), http.MethodGet, nil, rebound.Stats{
			get: {Calls: 3, Retries: rebound.AttemptStats{Attempts: 4, Failed: 3, Histogram: [8]uint64{2, 2}}},
		}},
		{"Retry-After", retryAfter("3", 503, 200), http.MethodGet, nil, rebound.Stats{
			get: {Calls: 4, Retries: rebound.AttemptStats{Attempts: 5, Failed: 3, Histogram: [8]uint64{3, 2}}, Pushbacks: 1},
		}},
		{"Retry-After beyond the cap", retryAfter("120", 503, 200), http.MethodGet, nil, rebound.Stats{
			get: {Calls: 5, Retries: rebound.AttemptStats{Attempts: 5, Failed: 3, Histogram: [8]uint64{3, 2}}, Pushbacks: 1},
		}},
		{"not idempotent", script(503), http.MethodPost, strings.NewReader("order"), rebound.Stats{
			get:  {Calls: 5, Retries: rebound.AttemptStats{Attempts: 5, Failed: 3, Histogram: [8]uint64{3, 2}}, Pushbacks: 1},
			post: {Calls: 1},
		}},
		{"body not replayable", script(503), http.MethodPut, unreplayable("too long"), rebound.Stats{
			get:  {Calls: 5, Retries: rebound.AttemptStats{Attempts: 5, Failed: 3, Histogram: [8]uint64{3, 2}}, Pushbacks: 1},
			post: {Calls: 1},
			put:  {Calls: 1},
		}},
	} {
		srv.set(step.h)
		send(t, client, step.method, srv.URL, step.body)
		// Every delay was waited on the fake clock with no attempt in flight.
		m := step.want[get]
		m.RetryDelay = totalSleep(clk)
		step.want[get] = m
		if got := tr.Stats(); !equalStats(got, step.want) {
			t.Fatalf("after %s: stats\n%+v, want\n%+v", step.name, got, step.want)
		}
	}
	if got, want := totalSleep(clk), 1500*time.Millisecond+1500*time.Millisecond+3*time.Second; got != want {
		t.Fatalf("the clock waited %v in all, want %v", got, want)
	}
}

func equalStats(a, b rebound.Stats) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestStatsThrottled(t *testing.T) {
	srv := newStepServer(t)
	srv.set(script(503))
	throttle, err := rebound.NewThrottle(rebound.ThrottleConfig{MaxTokens: 4, TokenRatio: 1})
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktest.NewAuto()
	tr, client := newTransport(t, clk, httpretry.WithBudget(func(string) rebound.Budget { return throttle }))
	// Each failure takes a token; retries stop at half of 4: one retry,
	// then none.
	send(t, client, http.MethodGet, srv.URL, nil)
	send(t, client, http.MethodGet, srv.URL, nil)
	want := rebound.MethodStats{
		Calls:      2,
		Retries:    rebound.AttemptStats{Attempts: 1, Failed: 1, Histogram: [8]uint64{1}},
		Throttled:  2,
		RetryDelay: 500 * time.Millisecond,
	}
	if got := tr.Stats()["GET "+srv.host()]; got != want {
		t.Fatalf("stats\n%+v, want\n%+v", got, want)
	}
}

func TestStatsHedges(t *testing.T) {
	srv := newStepServer(t)
	throttle, err := rebound.NewThrottle(rebound.ThrottleConfig{MaxTokens: 10, TokenRatio: 1})
	if err != nil {
		t.Fatal(err)
	}
	// The clock never moves: each hedge goes out because the attempt before
	// it failed, so attempts run one at a time.
	tr, client := newTransport(t, clocktest.New(), httpretry.WithHedging(10*time.Second, 3),
		httpretry.WithBudget(func(string) rebound.Budget { return throttle }))
	for _, step := range []struct {
		name string
		h    func(n int, w http.ResponseWriter, r *http.Request)
		want rebound.MethodStats
	}{
		// Tokens 10 → 8, threshold 5.
		{"success on the third attempt", script(503, 503, 200), rebound.MethodStats{
			Calls:  1,
			Hedges: rebound.AttemptStats{Attempts: 2, Failed: 1, Histogram: [8]uint64{1, 1}},
		}},
		// Three more failures: at most 6 tokens remain.
		{"attempts exhausted", script(503), rebound.MethodStats{
			Calls:  2,
			Hedges: rebound.AttemptStats{Attempts: 4, Failed: 3, Histogram: [8]uint64{2, 2}},
		}},
		// One more failure leaves at most 5: the hedge is refused.
		{"throttled", script(503), rebound.MethodStats{
			Calls:     3,
			Hedges:    rebound.AttemptStats{Attempts: 4, Failed: 3, Histogram: [8]uint64{2, 2}},
			Throttled: 1,
		}},
	} {
		srv.set(step.h)
		send(t, client, http.MethodGet, srv.URL, nil)
		if got := tr.Stats()["GET "+srv.host()]; got != step.want {
			t.Fatalf("after %s: stats\n%+v, want\n%+v", step.name, got, step.want)
		}
	}
}

func TestStatsConcurrent(t *testing.T) {
	srv := newStepServer(t)
	srv.set(script(503))
	tr, client := newTransport(t, clocktest.NewAuto(), httpretry.WithBudget(nil))
	const requests = 8
	var wg sync.WaitGroup
	for range requests {
		wg.Go(func() { send(t, client, http.MethodGet, srv.URL, nil) })
	}
	// Snapshots while requests run never see more than they could.
	for range 20 {
		if s := tr.Stats()["GET "+srv.host()]; s.Calls > requests || s.Retries.Attempts > 2*requests {
			t.Fatalf("stats %+v beyond %d requests", s, requests)
		}
	}
	wg.Wait()
	want := rebound.AttemptStats{Attempts: 2 * requests, Failed: 2 * requests, Histogram: [8]uint64{requests, requests}}
	if s := tr.Stats()["GET "+srv.host()]; s.Calls != requests || s.Retries != want {
		t.Fatalf("stats %+v, want %d requests with retries %+v", s, requests, want)
	}
	var zero httpretry.Transport
	if s := zero.Stats(); s == nil || len(s) != 0 {
		t.Fatalf("zero Transport's stats %v, want empty", s)
	}
}

func TestMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	srv, hedged := newStepServer(t), newStepServer(t)
	throttle, err := rebound.NewThrottle(rebound.ThrottleConfig{MaxTokens: 6, TokenRatio: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	_, retryClient := newTransport(t, clocktest.NewAuto(), httpretry.WithMeterProvider(mp),
		httpretry.WithBudget(func(string) rebound.Budget { return throttle }))
	_, hedgeClient := newTransport(t, clocktest.New(), httpretry.WithMeterProvider(mp), httpretry.WithHedging(10*time.Second, 3))
	// Tokens 6, threshold 3.
	for _, step := range []struct {
		srv    *stepServer
		client *http.Client
		h      func(n int, w http.ResponseWriter, r *http.Request)
	}{
		{srv, retryClient, script(503, 429, 200)}, // 2 retries, 1.5s; tokens 4.5
		{srv, retryClient, script(200)},           // nothing to record; tokens 5
		{srv, retryClient, script(503)},           // 1 retry, 500ms, then throttled; tokens 3
		{hedged, hedgeClient, script(503, 503, 200)},
		{hedged, hedgeClient, script(200)},
	} {
		step.srv.set(step.h)
		send(t, step.client, http.MethodGet, step.srv.URL, nil)
	}

	got := collectMetrics(t, reader, "github.com/rebound-go/rebound/httpretry")
	for _, name := range []string{"grpc.client.call.transparent_retries", "grpc.client.call.retries_pushback_stopped"} {
		if _, ok := got[name]; ok {
			t.Errorf("%s recorded; HTTP has no such thing", name)
		}
	}
	get, host := "GET "+srv.host(), srv.host()
	retries := histogramPoint[int64](t, got, "grpc.client.call.retries", "{retry}", get, host)
	if retries.Count != 2 || retries.Sum != 3 || !slices.Equal(retries.Bounds, []float64{1, 2, 3, 4, 5}) ||
		!slices.Equal(retries.BucketCounts, []uint64{1, 1, 0, 0, 0, 0}) {
		t.Errorf("retries: %d requests summing %d in %v over %v, want 2 requests with 1 and 2 retries", retries.Count, retries.Sum, retries.BucketCounts, retries.Bounds)
	}
	hedges := histogramPoint[int64](t, got, "grpc.client.call.hedges", "{hedge}", "GET "+hedged.host(), hedged.host())
	if hedges.Count != 1 || hedges.Sum != 2 || !slices.Equal(hedges.Bounds, []float64{1, 2, 3, 4, 5}) {
		t.Errorf("hedges: %d requests summing %d over %v, want 1 request with 2 hedges", hedges.Count, hedges.Sum, hedges.Bounds)
	}
	delay := histogramPoint[float64](t, got, "grpc.client.call.retry_delay", "s", get, host)
	if delay.Count != 2 || delay.Sum != 2 || len(delay.Bounds) == 0 || delay.Bounds[0] != 0 || delay.Bounds[len(delay.Bounds)-1] != 100 {
		t.Errorf("retry_delay: %d requests summing %vs over %v, want 2 requests summing 2s", delay.Count, delay.Sum, delay.Bounds)
	}
	if hd := histogramPoint[float64](t, got, "grpc.client.call.retry_delay", "s", "GET "+hedged.host(), hedged.host()); hd.Count != 1 || hd.Sum != 0 {
		t.Errorf("retry_delay of the hedged request: %d requests summing %vs, want 1 request of 0s", hd.Count, hd.Sum)
	}
	if v := counterValue(t, got, "grpc.client.call.retries_throttled", "{retry}", get, host); v != 1 {
		t.Errorf("retries_throttled %d, want 1", v)
	}
}

// collectMetrics reads every metric of reader by name, checking their scope.
func collectMetrics(t *testing.T, reader *sdkmetric.ManualReader, scope string) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != scope {
			t.Errorf("meter scope %q, want %q", sm.Scope.Name, scope)
		}
		for _, m := range sm.Metrics {
			got[m.Name] = m
		}
	}
	return got
}

// histogramPoint returns the point of histogram name for method and
// target, checking the unit.
func histogramPoint[N int64 | float64](t *testing.T, got map[string]metricdata.Metrics, name, unit, method, target string) metricdata.HistogramDataPoint[N] {
	t.Helper()
	m, ok := got[name]
	if !ok {
		t.Fatalf("%s not recorded", name)
	}
	if m.Unit != unit {
		t.Errorf("%s: unit %q, want %q", name, m.Unit, unit)
	}
	h, ok := m.Data.(metricdata.Histogram[N])
	if !ok {
		t.Fatalf("%s is a %T", name, m.Data)
	}
	for _, dp := range h.DataPoints {
		if pointOf(dp.Attributes, method, target) {
			return dp
		}
	}
	t.Fatalf("%s: no point for grpc.method %q, grpc.target %q", name, method, target)
	return metricdata.HistogramDataPoint[N]{}
}

// counterValue returns the value of counter name for method and target,
// checking the unit.
func counterValue(t *testing.T, got map[string]metricdata.Metrics, name, unit, method, target string) int64 {
	t.Helper()
	m, ok := got[name]
	if !ok {
		t.Fatalf("%s not recorded", name)
	}
	if m.Unit != unit {
		t.Errorf("%s: unit %q, want %q", name, m.Unit, unit)
	}
	for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
		if pointOf(dp.Attributes, method, target) {
			return dp.Value
		}
	}
	t.Fatalf("%s: no point for grpc.method %q, grpc.target %q", name, method, target)
	return 0
}

// pointOf reports whether a point's attributes are exactly grpc.method and
// grpc.target with the given values.
func pointOf(set attribute.Set, method, target string) bool {
	m, _ := set.Value("grpc.method")
	tg, _ := set.Value("grpc.target")
	return set.Len() == 2 && m.AsString() == method && tg.AsString() == target
}

// debugLog returns a logger that writes JSON records at debug level, and a
// function that returns the records written so far without their time.
func debugLog(t *testing.T) (*slog.Logger, func() []map[string]any) {
	t.Helper()
	var (
		mu  sync.Mutex
		buf bytes.Buffer
	)
	w := writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	})
	records := func() []map[string]any {
		mu.Lock()
		defer mu.Unlock()
		var out []map[string]any
		for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			if line == "" {
				continue
			}
			var r map[string]any
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			delete(r, "time")
			out = append(out, r)
		}
		return out
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug})), records
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// record is a log record a test expects: its message and some of its
// attributes, with durations as time.Duration and counts as int.
type record struct {
	msg   string
	attrs map[string]any
}

// checkRecords compares records with want. Every record must be at debug
// level and name the method and target.
func checkRecords(t *testing.T, step string, got []map[string]any, method, target string, want []record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d:\n%v", step, len(got), len(want), got)
	}
	for k, w := range want {
		r := got[k]
		if r["level"] != "DEBUG" || r["msg"] != w.msg || r["method"] != method || r["target"] != target {
			t.Errorf("%s: record %d is %v, want %q at DEBUG for %s at %s", step, k, r, w.msg, method, target)
		}
		for key, v := range w.attrs {
			// JSON numbers decode as float64; the handler writes durations
			// in nanoseconds.
			switch x := v.(type) {
			case time.Duration:
				v = float64(x)
			case int:
				v = float64(x)
			}
			if r[key] != v {
				t.Errorf("%s: record %d %q: %s = %v, want %v", step, k, w.msg, key, r[key], v)
			}
		}
	}
}

func TestLogs(t *testing.T) {
	logger, records := debugLog(t)
	srv := newStepServer(t)
	_, client := newTransport(t, clocktest.NewAuto(), httpretry.WithLogger(logger), httpretry.WithMaxBufferedBody(4))
	seen := 0
	for _, step := range []struct {
		name   string
		h      func(n int, w http.ResponseWriter, r *http.Request)
		method string
		body   io.Reader
		want   []record
	}{
		{"success on attempt 3", script(503, 429, 200), http.MethodGet, nil, []record{
			{"rebound: retry scheduled", map[string]any{"attempt": 1, "delay": 500 * time.Millisecond, "error": "httpretry: response 503 Service Unavailable"}},
			{"rebound: retry scheduled", map[string]any{"attempt": 2, "delay": time.Second, "error": "httpretry: response 429 Too Many Requests"}},
		}},
		{"success at once", script(200), http.MethodGet, nil, nil},
		{"Retry-After", retryAfter("3", 503, 200), http.MethodGet, nil, []record{
			{"rebound: retry scheduled, obeying server pushback", map[string]any{"attempt": 1, "delay": 3 * time.Second}},
		}},
		{"attempts exhausted", script(503), http.MethodGet, nil, []record{
			{"rebound: retry scheduled", map[string]any{"attempt": 1, "delay": 500 * time.Millisecond}},
			{"rebound: retry scheduled", map[string]any{"attempt": 2, "delay": time.Second}},
			{"rebound: gave up", map[string]any{"attempts": 3, "reason": "attempts exhausted", "error": "httpretry: response 503 Service Unavailable"}},
		}},
		// The Transport decides to return the response; the engine then
		// sees a failure it may not retry.
		{"Retry-After beyond the cap", retryAfter("120", 503, 200), http.MethodGet, nil, []record{
			{"rebound: committed", map[string]any{"attempt": 1, "why": "Retry-After beyond cap", "retry_after": 2 * time.Minute, "cap": time.Minute}},
			{"rebound: gave up", map[string]any{"attempts": 1, "reason": "error is not retryable"}},
		}},
		{"not idempotent", script(503), http.MethodPost, strings.NewReader("order"), []record{
			{"rebound: gave up", map[string]any{"attempts": 1, "reason": "error is not retryable"}},
		}},
		{"body not replayable", script(503), http.MethodPut, unreplayable("too long"), []record{
			{"rebound: committed", map[string]any{"attempt": 1, "why": "request body cannot be replayed"}},
		}},
	} {
		srv.set(step.h)
		send(t, client, step.method, srv.URL, step.body)
		all := records()
		checkRecords(t, step.name, all[seen:], step.method+" "+srv.host(), srv.host(), step.want)
		seen = len(all)
	}
}

func TestLogsThrottled(t *testing.T) {
	logger, records := debugLog(t)
	srv := newStepServer(t)
	srv.set(script(503))
	throttle, err := rebound.NewThrottle(rebound.ThrottleConfig{MaxTokens: 4, TokenRatio: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, client := newTransport(t, clocktest.NewAuto(), httpretry.WithLogger(logger),
		httpretry.WithBudget(func(string) rebound.Budget { return throttle }))
	send(t, client, http.MethodGet, srv.URL, nil)
	checkRecords(t, "throttled", records(), "GET "+srv.host(), srv.host(), []record{
		{"rebound: retry scheduled", map[string]any{"attempt": 1, "delay": 500 * time.Millisecond}},
		{"rebound: throttled, gave up", map[string]any{"attempts": 2, "reason": "retry budget exhausted"}},
	})
}

func TestLogsHedging(t *testing.T) {
	logger, records := debugLog(t)
	srv := newStepServer(t)
	srv.set(script(503))
	// The clock never moves: hedges follow failures.
	_, client := newTransport(t, clocktest.New(), httpretry.WithLogger(logger), httpretry.WithHedging(10*time.Second, 3))
	send(t, client, http.MethodGet, srv.URL, nil)
	checkRecords(t, "hedged request", records(), "GET "+srv.host(), srv.host(), []record{
		{"rebound: hedge sent", map[string]any{"attempt": 2}},
		{"rebound: hedge sent", map[string]any{"attempt": 3}},
		{"rebound: gave up", map[string]any{"attempts": 3, "reason": "attempts exhausted"}},
	})
}

func TestLogsOnlyAtDebugLevel(t *testing.T) {
	var buf bytes.Buffer
	srv := newStepServer(t)
	srv.set(retryAfter("120", 503, 503, 200))
	_, client := newTransport(t, clocktest.NewAuto(), httpretry.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))), httpretry.WithMaxBufferedBody(0))
	send(t, client, http.MethodGet, srv.URL, nil)
	send(t, client, http.MethodPut, srv.URL, unreplayable("x"))
	if buf.Len() != 0 {
		t.Fatalf("logged at info level:\n%s", buf.String())
	}
}

// failingMeters is a MeterProvider whose counters cannot be made.
type failingMeters struct{ noop.MeterProvider }

func (failingMeters) Meter(string, ...metric.MeterOption) metric.Meter { return failingMeter{} }

type failingMeter struct{ noop.Meter }

func (failingMeter) Int64Counter(string, ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	return nil, errors.New("no counters today")
}

func TestMeterProviderFails(t *testing.T) {
	tr := httpretry.NewTransport(nil, httpretry.WithMeterProvider(failingMeters{}))
	const want = "httpretry: WithMeterProvider: creating instruments: no counters today"
	if err := tr.Err(); err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("Err() = %v, want %q", err, want)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:1", nil)
	if _, err := tr.RoundTrip(req); err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("RoundTrip: %v, want %q", err, want)
	}
}
