package httpretry_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/httpretry"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/internal/observe/observetest"
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
	tr, client := newTransport(t, clk, httpretry.WithBufferLimits(1<<20, 4))
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
	// Retry-After 3 waits 3.25s: up to half a second more, a quarter
	// with the random source at 0.5.
	if got, want := totalSleep(clk), 1500*time.Millisecond+1500*time.Millisecond+3250*time.Millisecond; got != want {
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
	tr, client := newTransport(t, clk, httpretry.WithBudgetPerHost(func(string) rebound.Budget { return throttle }))
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
		httpretry.WithBudgetPerHost(func(string) rebound.Budget { return throttle }))
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
	tr, client := newTransport(t, clocktest.NewAuto(), httpretry.WithBudgetPerHost(nil))
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

// at returns the metric attributes of a GET to s answered with status
// (0 for no response).
func (s *stepServer) at(t *testing.T, method string, status int) []attribute.KeyValue {
	t.Helper()
	host, port, err := net.SplitHostPort(s.host())
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	kv := []attribute.KeyValue{
		attribute.String("http.request.method", method),
		attribute.String("server.address", host),
		attribute.Int("server.port", p),
	}
	if status != 0 {
		kv = append(kv, attribute.Int("http.response.status_code", status))
	}
	return kv
}

func TestMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	srv, hedged, other := newStepServer(t), newStepServer(t), newStepServer(t)
	throttle, err := rebound.NewThrottle(rebound.ThrottleConfig{MaxTokens: 6, TokenRatio: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	_, retryClient := newTransport(t, clocktest.NewAuto(), httpretry.WithMeterProvider(mp),
		httpretry.WithBudgetPerHost(func(string) rebound.Budget { return throttle }))
	_, hedgeClient := newTransport(t, clocktest.New(), httpretry.WithMeterProvider(mp), httpretry.WithHedging(10*time.Second, 3))
	_, otherClient := newTransport(t, clocktest.NewAuto(), httpretry.WithMeterProvider(mp), httpretry.WithBudgetPerHost(nil))
	// Tokens 6, threshold 3.
	for _, step := range []struct {
		srv    *stepServer
		client *http.Client
		method string
		h      func(n int, w http.ResponseWriter, r *http.Request)
	}{
		{srv, retryClient, http.MethodGet, script(503, 429, 200)}, // 2 retries, 1.5s; tokens 4.5
		{srv, retryClient, http.MethodGet, script(200)},           // nothing to record; tokens 5
		{srv, retryClient, http.MethodGet, script(503)},           // 1 retry, 500ms, then throttled; tokens 3
		{hedged, hedgeClient, http.MethodGet, script(503, 503, 200)},
		{hedged, hedgeClient, http.MethodGet, script(200)},
		// A method the conventions do not know, made idempotent by its
		// key: 1 retry, under "_OTHER".
		{other, otherClient, "PURGE", script(503, 204)},
		// Every attempt hangs up: 2 retries, and no status code.
		{other, otherClient, http.MethodDelete, func(_ int, w http.ResponseWriter, _ *http.Request) {
			c, _, _ := w.(http.Hijacker).Hijack()
			c.Close()
		}},
	} {
		step.srv.set(step.h)
		req, err := http.NewRequest(step.method, step.srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Idempotency-Key", "k")
		if resp, err := step.client.Do(req); err == nil {
			resp.Body.Close()
		}
	}

	got := observetest.Collect(t, reader, "github.com/rebound-go/rebound/httpretry")
	for name := range got {
		if !strings.HasPrefix(name, "rebound.client.call.") {
			t.Errorf("%s recorded; httpretry records only rebound.client.call.*", name)
		}
	}
	ok, throttled := srv.at(t, "GET", 200), srv.at(t, "GET", 503)
	if retries := observetest.HistogramAt[int64](t, got, "rebound.client.call.retries", "{retry}", ok...); retries.Count != 1 || retries.Sum != 2 ||
		!slices.Equal(retries.Bounds, []float64{1, 2, 3, 4, 5}) || !slices.Equal(retries.BucketCounts, []uint64{0, 1, 0, 0, 0, 0}) {
		t.Errorf("retries of the request answered 200: %d requests summing %d in %v over %v, want 1 request with 2 retries", retries.Count, retries.Sum, retries.BucketCounts, retries.Bounds)
	}
	if retries := observetest.HistogramAt[int64](t, got, "rebound.client.call.retries", "{retry}", throttled...); retries.Count != 1 || retries.Sum != 1 {
		t.Errorf("retries of the request answered 503: %d requests summing %d, want 1 request with 1 retry", retries.Count, retries.Sum)
	}
	hedges := observetest.HistogramAt[int64](t, got, "rebound.client.call.hedges", "{hedge}", hedged.at(t, "GET", 200)...)
	if hedges.Count != 1 || hedges.Sum != 2 || !slices.Equal(hedges.Bounds, []float64{1, 2, 3, 4, 5}) {
		t.Errorf("hedges: %d requests summing %d over %v, want 1 request with 2 hedges", hedges.Count, hedges.Sum, hedges.Bounds)
	}
	delay := observetest.HistogramAt[float64](t, got, "rebound.client.call.retry_delay", "s", ok...)
	if delay.Count != 1 || delay.Sum != 1.5 || len(delay.Bounds) == 0 || delay.Bounds[0] != 0 || delay.Bounds[len(delay.Bounds)-1] != 100 {
		t.Errorf("retry_delay: %d requests summing %vs over %v, want 1 request of 1.5s", delay.Count, delay.Sum, delay.Bounds)
	}
	if d := observetest.HistogramAt[float64](t, got, "rebound.client.call.retry_delay", "s", throttled...); d.Count != 1 || d.Sum != 0.5 {
		t.Errorf("retry_delay of the throttled request: %d requests summing %vs, want 1 request of 0.5s", d.Count, d.Sum)
	}
	if hd := observetest.HistogramAt[float64](t, got, "rebound.client.call.retry_delay", "s", hedged.at(t, "GET", 200)...); hd.Count != 1 || hd.Sum != 0 {
		t.Errorf("retry_delay of the hedged request: %d requests summing %vs, want 1 request of 0s", hd.Count, hd.Sum)
	}
	if v := observetest.CounterAt(t, got, "rebound.client.call.retries_throttled", "{retry}", throttled...); v != 1 {
		t.Errorf("retries_throttled %d, want 1", v)
	}
	if r := observetest.HistogramAt[int64](t, got, "rebound.client.call.retries", "{retry}", other.at(t, "_OTHER", 204)...); r.Count != 1 || r.Sum != 1 {
		t.Errorf("retries of PURGE: %d requests summing %d, want 1 request with 1 retry", r.Count, r.Sum)
	}
	if r := observetest.HistogramAt[int64](t, got, "rebound.client.call.retries", "{retry}", other.at(t, "DELETE", 0)...); r.Count != 1 || r.Sum != 2 {
		t.Errorf("retries of the DELETE that got no response: %d requests summing %d, want 1 request with 2 retries", r.Count, r.Sum)
	}
}

func TestLogs(t *testing.T) {
	logger, records := observetest.DebugLog(t)
	srv := newStepServer(t)
	_, client := newTransport(t, clocktest.NewAuto(), httpretry.WithLogger(logger), httpretry.WithBufferLimits(1<<20, 4))
	seen := 0
	for _, step := range []struct {
		name   string
		h      func(n int, w http.ResponseWriter, r *http.Request)
		method string
		body   io.Reader
		want   []observetest.Record
	}{
		{"success on attempt 3", script(503, 429, 200), http.MethodGet, nil, []observetest.Record{
			{Msg: "rebound: retry scheduled", Attrs: map[string]any{"attempt": 1, "delay": 500 * time.Millisecond, "error": "httpretry: response 503 Service Unavailable"}},
			{Msg: "rebound: retry scheduled", Attrs: map[string]any{"attempt": 2, "delay": time.Second, "error": "httpretry: response 429 Too Many Requests"}},
		}},
		{"success at once", script(200), http.MethodGet, nil, nil},
		{"Retry-After", retryAfter("3", 503, 200), http.MethodGet, nil, []observetest.Record{
			{Msg: "rebound: retry scheduled, obeying server pushback", Attrs: map[string]any{"attempt": 1, "delay": 3250 * time.Millisecond}},
		}},
		{"attempts exhausted", script(503), http.MethodGet, nil, []observetest.Record{
			{Msg: "rebound: retry scheduled", Attrs: map[string]any{"attempt": 1, "delay": 500 * time.Millisecond}},
			{Msg: "rebound: retry scheduled", Attrs: map[string]any{"attempt": 2, "delay": time.Second}},
			{Msg: "rebound: gave up", Attrs: map[string]any{"attempts": 3, "reason": "attempts exhausted", "error": "httpretry: response 503 Service Unavailable"}},
		}},
		// The Transport decides to return the response; retrying stops
		// with the reason every server hint beyond the cap gives.
		{"Retry-After beyond the cap", retryAfter("120", 503, 200), http.MethodGet, nil, []observetest.Record{
			{Msg: "rebound: committed", Attrs: map[string]any{"attempt": 1, "why": "Retry-After beyond cap", "retry_after": 2 * time.Minute, "cap": time.Minute}},
			{Msg: "rebound: gave up", Attrs: map[string]any{"attempts": 1, "reason": "server asked to wait longer than the cap"}},
		}},
		{"not idempotent", script(503), http.MethodPost, strings.NewReader("order"), []observetest.Record{
			{Msg: "rebound: gave up", Attrs: map[string]any{"attempts": 1, "reason": "error is not retryable"}},
		}},
		{"body not replayable", script(503), http.MethodPut, unreplayable("too long"), []observetest.Record{
			{Msg: "rebound: committed", Attrs: map[string]any{"attempt": 1, "why": "request body cannot be replayed"}},
		}},
	} {
		srv.set(step.h)
		send(t, client, step.method, srv.URL, step.body)
		all := records()
		observetest.CheckRecords(t, step.name, all[seen:], step.method+" "+srv.host(), srv.host(), step.want)
		seen = len(all)
	}
}

func TestLogsThrottled(t *testing.T) {
	logger, records := observetest.DebugLog(t)
	srv := newStepServer(t)
	srv.set(script(503))
	throttle, err := rebound.NewThrottle(rebound.ThrottleConfig{MaxTokens: 4, TokenRatio: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, client := newTransport(t, clocktest.NewAuto(), httpretry.WithLogger(logger),
		httpretry.WithBudgetPerHost(func(string) rebound.Budget { return throttle }))
	send(t, client, http.MethodGet, srv.URL, nil)
	observetest.CheckRecords(t, "throttled", records(), "GET "+srv.host(), srv.host(), []observetest.Record{
		{Msg: "rebound: retry scheduled", Attrs: map[string]any{"attempt": 1, "delay": 500 * time.Millisecond}},
		{Msg: "rebound: throttled, gave up", Attrs: map[string]any{"attempts": 2, "reason": "throttled"}},
	})
}

func TestLogsHedging(t *testing.T) {
	logger, records := observetest.DebugLog(t)
	srv := newStepServer(t)
	srv.set(script(503))
	// The clock never moves: hedges follow failures.
	_, client := newTransport(t, clocktest.New(), httpretry.WithLogger(logger), httpretry.WithHedging(10*time.Second, 3))
	send(t, client, http.MethodGet, srv.URL, nil)
	observetest.CheckRecords(t, "hedged request", records(), "GET "+srv.host(), srv.host(), []observetest.Record{
		{Msg: "rebound: hedge sent", Attrs: map[string]any{"attempt": 2}},
		{Msg: "rebound: hedge sent", Attrs: map[string]any{"attempt": 3}},
		{Msg: "rebound: gave up", Attrs: map[string]any{"attempts": 3, "reason": "attempts exhausted"}},
	})
}

func TestLogsOnlyAtDebugLevel(t *testing.T) {
	var buf bytes.Buffer
	srv := newStepServer(t)
	srv.set(retryAfter("120", 503, 503, 200))
	_, client := newTransport(t, clocktest.NewAuto(), httpretry.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))), httpretry.WithBufferLimits(1, 1))
	send(t, client, http.MethodGet, srv.URL, nil)
	send(t, client, http.MethodPut, srv.URL, unreplayable("xy"))
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
