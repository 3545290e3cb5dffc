package connectretry_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/connectretry"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/internal/observe/observetest"
)

// totalSleep is the sum of the delays the clock was asked to wait.
func totalSleep(clk *clocktest.Clock) time.Duration {
	var d time.Duration
	for _, s := range clk.Sleeps() {
		d += s
	}
	return d
}

var serverNames atomic.Int32

// serverName returns a server name of its own for a test: throttles are
// shared by server name across the process, runs of a test included.
func serverName(t *testing.T) string {
	return fmt.Sprintf("%s-%d.test", strings.ReplaceAll(t.Name(), "/", "-"), serverNames.Add(1))
}

// newInterceptor is dial's interceptor, for tests that read its Stats.
func newInterceptor(t testing.TB, clk *clocktest.Clock, cfgJSON string, opts ...connectretry.Option) *connectretry.Interceptor {
	t.Helper()
	i, err := connectretry.New(parse(t, cfgJSON), append([]connectretry.Option{connectretry.WithClock(clk), connectretry.WithRandom(clocktest.NewRand(0.5))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// retryJSON is retryConfig's service config as text, with maxAttempts 4.
func retryJSON(extra string) string {
	return fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"retryPolicy":{
		"maxAttempts":4,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,
		"retryableStatusCodes":["UNAVAILABLE"]}}]%s}`, service, extra)
}

// hedgeJSON is hedgeConfig's service config as text: 3 attempts 10s apart.
func hedgeJSON(extra string) string {
	return fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"hedgingPolicy":{
		"maxAttempts":3,"hedgingDelay":"10s","nonFatalStatusCodes":["UNAVAILABLE"]}}]%s}`, service, extra)
}

func TestStatsRetries(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			srv := startServer(t, handlers{}, p.http2)
			clk := clocktest.NewAuto()
			i := newInterceptor(t, clk, retryJSON(""))
			c := newClients(srv, p, i)
			// Each step makes one call and checks the statistics of
			// Unary after it. Backoff at jitter 0.5 waits 50ms, 100ms,
			// 200ms.
			for _, step := range []struct {
				name string
				h    handlers
				want rebound.MethodStats
			}{
				{"success at once", handlers{}, rebound.MethodStats{Calls: 1}},
				{"success on attempt 3", failFirst(2, connect.CodeUnavailable), rebound.MethodStats{
					Calls:   2,
					Retries: rebound.AttemptStats{Attempts: 2, Failed: 1, Histogram: [8]uint64{1, 1}},
				}},
				{"attempts exhausted", failFirst(1000, connect.CodeUnavailable), rebound.MethodStats{
					Calls:   3,
					Retries: rebound.AttemptStats{Attempts: 5, Failed: 4, Histogram: [8]uint64{2, 2, 1}},
				}},
				{"pushback delay", pushbackHandler(nil, []string{"250"}), rebound.MethodStats{
					Calls:     4,
					Retries:   rebound.AttemptStats{Attempts: 8, Failed: 7, Histogram: [8]uint64{3, 3, 2}},
					Pushbacks: 1,
				}},
				{"pushback stop", pushbackHandler([]string{"-1"}), rebound.MethodStats{
					Calls:         5,
					Retries:       rebound.AttemptStats{Attempts: 8, Failed: 7, Histogram: [8]uint64{3, 3, 2}},
					Pushbacks:     1,
					PushbackStops: 1,
				}},
				{"not retryable", failFirst(1, connect.CodeInvalidArgument), rebound.MethodStats{
					Calls:         6,
					Retries:       rebound.AttemptStats{Attempts: 8, Failed: 7, Histogram: [8]uint64{3, 3, 2}},
					Pushbacks:     1,
					PushbackStops: 1,
				}},
			} {
				srv.setHandlers(step.h)
				_, _ = call(context.Background(), c.unary, "x")
				// Every delay was waited on the fake clock with no attempt in flight.
				step.want.RetryDelay = totalSleep(clk)
				stats := i.Stats()
				if got := stats[unary]; got != step.want {
					t.Fatalf("after %s: stats\n%+v, want\n%+v", step.name, got, step.want)
				}
				if len(stats) != 1 {
					t.Fatalf("after %s: stats for %d methods, want 1: %v", step.name, len(stats), stats)
				}
			}
			if got := totalSleep(clk); got != 50*time.Millisecond+100*time.Millisecond+ // success on attempt 3
				50*time.Millisecond+100*time.Millisecond+200*time.Millisecond+ // exhausted
				50*time.Millisecond+250*time.Millisecond+50*time.Millisecond { // pushback, then backoff from the start
				t.Fatalf("the clock waited %v in all", got)
			}
		})
	}
}

func TestStatsThrottled(t *testing.T) {
	srv := startServer(t, failFirst(1000, connect.CodeUnavailable), false)
	// Tokens 6, threshold 3: the first call retries twice and is refused a
	// third attempt; the second is refused its first retry.
	i := newInterceptor(t, clocktest.NewAuto(), retryJSON(`,"retryThrottling":{"maxTokens":6,"tokenRatio":0.5}`),
		connectretry.WithServerName(serverName(t)))
	c := newClients(srv, connectProtocol, i)
	for range 2 {
		if _, err := call(context.Background(), c.unary, "x"); !errors.Is(err, rebound.ErrThrottled) {
			t.Fatalf("err %v, want throttled", err)
		}
	}
	want := rebound.MethodStats{
		Calls:      2,
		Retries:    rebound.AttemptStats{Attempts: 2, Failed: 2, Histogram: [8]uint64{1, 1}},
		Throttled:  2,
		RetryDelay: 150 * time.Millisecond,
	}
	if got := i.Stats()[unary]; got != want {
		t.Fatalf("stats\n%+v, want\n%+v", got, want)
	}
}

func TestStatsHedges(t *testing.T) {
	srv := startServer(t, handlers{}, false)
	// The clock never moves: each hedge goes out because the attempt before
	// it failed with a non-fatal code, so attempts run one at a time.
	i := newInterceptor(t, clocktest.New(), hedgeJSON(`,"retryThrottling":{"maxTokens":10,"tokenRatio":1}`),
		connectretry.WithServerName(serverName(t)))
	c := newClients(srv, connectProtocol, i)
	for _, step := range []struct {
		name string
		h    handlers
		want rebound.MethodStats
	}{
		// Tokens 10 → 8, threshold 5.
		{"success on the third attempt", failFirst(2, connect.CodeUnavailable), rebound.MethodStats{
			Calls:  1,
			Hedges: rebound.AttemptStats{Attempts: 2, Failed: 1, Histogram: [8]uint64{1, 1}},
		}},
		// Three more failures: at most 6 tokens remain.
		{"attempts exhausted", failFirst(1000, connect.CodeUnavailable), rebound.MethodStats{
			Calls:  2,
			Hedges: rebound.AttemptStats{Attempts: 4, Failed: 3, Histogram: [8]uint64{2, 2}},
		}},
		// One more failure leaves at most 5: the hedge is refused.
		{"throttled", failFirst(1000, connect.CodeUnavailable), rebound.MethodStats{
			Calls:     3,
			Hedges:    rebound.AttemptStats{Attempts: 4, Failed: 3, Histogram: [8]uint64{2, 2}},
			Throttled: 1,
		}},
	} {
		srv.setHandlers(step.h)
		_, _ = call(context.Background(), c.unary, "x")
		if got := i.Stats()[unary]; got != step.want {
			t.Fatalf("after %s: stats\n%+v, want\n%+v", step.name, got, step.want)
		}
	}
}

func TestStatsServerStream(t *testing.T) {
	srv := startServer(t, streamFailFirst(2, connect.CodeUnavailable), false)
	clk := clocktest.NewAuto()
	i := newInterceptor(t, clk, retryJSON(""))
	c := newClients(srv, connectProtocol, i)
	st, err := c.serverStream.CallServerStream(context.Background(), connect.NewRequest(wrapperspb.String("m")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := receiveAll(t, st); err != nil {
		t.Fatal(err)
	}
	// A stream whose header is read before its first message is committed
	// to its first attempt, failed or not.
	srv.setHandlers(streamFailFirst(1, connect.CodeUnavailable))
	st, err = c.serverStream.CallServerStream(context.Background(), connect.NewRequest(wrapperspb.String("m")))
	if err != nil {
		t.Fatal(err)
	}
	_ = st.ResponseHeader()
	if _, err := receiveAll(t, st); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("err %v, want the first attempt's unavailable", err)
	}
	want := rebound.MethodStats{
		Calls:      2,
		Retries:    rebound.AttemptStats{Attempts: 2, Failed: 1, Histogram: [8]uint64{1, 1}},
		RetryDelay: 150 * time.Millisecond,
	}
	stats := i.Stats()
	if got := stats[serverStream]; got != want {
		t.Fatalf("stats\n%+v, want\n%+v", got, want)
	}
	if len(stats) != 1 {
		t.Fatalf("stats for %d methods, want 1: %v", len(stats), stats)
	}
}

func TestStatsNotKept(t *testing.T) {
	srv := startServer(t, failFirst(1, connect.CodeUnavailable), false)
	// Calls that no policy governs are not counted, nor are client and
	// bidirectional streams.
	i := newInterceptor(t, clocktest.NewAuto(), `{"methodConfig":[{"name":[{"service":"other.Service"}],"retryPolicy":{
		"maxAttempts":4,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`)
	c := newClients(srv, connectProtocol, i)
	_, _ = call(context.Background(), c.unary, "x")
	if s := i.Stats(); len(s) != 0 {
		t.Fatalf("stats %v, want none", s)
	}
	var zero connectretry.Interceptor
	if s := zero.Stats(); s == nil || len(s) != 0 {
		t.Fatalf("zero Interceptor's stats %v, want empty", s)
	}
}

func TestStatsConcurrent(t *testing.T) {
	srv := startServer(t, failFirst(1000, connect.CodeUnavailable), false)
	i := newInterceptor(t, clocktest.NewAuto(), retryJSON(""))
	c := newClients(srv, connectProtocol, i)
	const calls = 8
	var wg sync.WaitGroup
	for range calls {
		wg.Go(func() { _, _ = call(context.Background(), c.unary, "x") })
	}
	// Snapshots while calls run never see more than they could.
	for range 20 {
		if s := i.Stats()[unary]; s.Calls > calls || s.Retries.Attempts > 3*calls {
			t.Fatalf("stats %+v beyond %d calls", s, calls)
		}
	}
	wg.Wait()
	want := rebound.AttemptStats{Attempts: 3 * calls, Failed: 3 * calls, Histogram: [8]uint64{calls, calls, calls}}
	if s := i.Stats()[unary]; s.Calls != calls || s.Retries != want {
		t.Fatalf("stats %+v, want %d calls with retries %+v", s, calls, want)
	}
}

func TestMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	srv := startServer(t, handlers{}, false)
	// Tokens 6, threshold 3.
	retryTarget, hedgeTarget := serverName(t), serverName(t)
	retry := newInterceptor(t, clocktest.NewAuto(), retryJSON(`,"retryThrottling":{"maxTokens":6,"tokenRatio":0.5}`),
		connectretry.WithServerName(retryTarget), connectretry.WithMeterProvider(mp))
	hedge := newInterceptor(t, clocktest.New(), hedgeJSON(""), connectretry.WithServerName(hedgeTarget), connectretry.WithMeterProvider(mp))
	for _, step := range []struct {
		i *connectretry.Interceptor
		h handlers
	}{
		{retry, failFirst(2, connect.CodeUnavailable)},    // 2 retries, 150ms; tokens 4.5
		{retry, handlers{}},                               // nothing to record; tokens 5
		{retry, pushbackHandler([]string{"-1"})},          // pushback stop; tokens 4
		{retry, failFirst(1000, connect.CodeUnavailable)}, // throttled at once; tokens 3
		{hedge, failFirst(2, connect.CodeUnavailable)},    // 2 hedges
		{hedge, handlers{}},                               // nothing to record
	} {
		srv.setHandlers(step.h)
		_, _ = call(context.Background(), newClients(srv, connectProtocol, step.i).unary, "x")
	}

	got := observetest.Collect(t, reader, "github.com/rebound-go/rebound/connectretry")
	if _, ok := got["grpc.client.call.transparent_retries"]; ok {
		t.Error("transparent retries recorded; connect makes none")
	}
	retries := observetest.Histogram[int64](t, got, "grpc.client.call.retries", "{retry}", "connectrpc", unary, retryTarget)
	if retries.Count != 1 || retries.Sum != 2 || !slices.Equal(retries.Bounds, []float64{1, 2, 3, 4, 5}) ||
		!slices.Equal(retries.BucketCounts, []uint64{0, 1, 0, 0, 0, 0}) {
		t.Errorf("retries: %d calls summing %d in %v over %v, want 1 call with 2 retries", retries.Count, retries.Sum, retries.BucketCounts, retries.Bounds)
	}
	hedges := observetest.Histogram[int64](t, got, "grpc.client.call.hedges", "{hedge}", "connectrpc", unary, hedgeTarget)
	if hedges.Count != 1 || hedges.Sum != 2 || !slices.Equal(hedges.Bounds, []float64{1, 2, 3, 4, 5}) {
		t.Errorf("hedges: %d calls summing %d over %v, want 1 call with 2 hedges", hedges.Count, hedges.Sum, hedges.Bounds)
	}
	// Every call with something to record records its delay, 0 included.
	delay := observetest.Histogram[float64](t, got, "grpc.client.call.retry_delay", "s", "connectrpc", unary, retryTarget)
	if delay.Count != 3 || delay.Sum != 0.15 || len(delay.Bounds) == 0 || delay.Bounds[0] != 0 || delay.Bounds[len(delay.Bounds)-1] != 100 {
		t.Errorf("retry_delay: %d calls summing %vs over %v, want 3 calls summing 0.15s", delay.Count, delay.Sum, delay.Bounds)
	}
	if hd := observetest.Histogram[float64](t, got, "grpc.client.call.retry_delay", "s", "connectrpc", unary, hedgeTarget); hd.Count != 1 || hd.Sum != 0 {
		t.Errorf("retry_delay of the hedged call: %d calls summing %vs, want 1 call of 0s", hd.Count, hd.Sum)
	}
	if v := observetest.Counter(t, got, "rebound.client.call.retries_throttled", "{retry}", "connectrpc", unary, retryTarget); v != 1 {
		t.Errorf("retries_throttled %d, want 1", v)
	}
	if v := observetest.Counter(t, got, "rebound.client.call.retries_pushback_stopped", "{retry}", "connectrpc", unary, retryTarget); v != 1 {
		t.Errorf("retries_pushback_stopped %d, want 1", v)
	}
}

func TestLogs(t *testing.T) {
	logger, records := observetest.DebugLog(t)
	srv := startServer(t, handlers{}, false)
	target := serverName(t)
	// Tokens 10, threshold 5.
	i := newInterceptor(t, clocktest.NewAuto(), retryJSON(`,"retryThrottling":{"maxTokens":10,"tokenRatio":1}`),
		connectretry.WithServerName(target), connectretry.WithLogger(logger))
	c := newClients(srv, connectProtocol, i)
	unaryCall := func() { _, _ = call(context.Background(), c.unary, "x") }
	streamCall := func(readHeader bool) func() {
		return func() {
			st, err := c.serverStream.CallServerStream(context.Background(), connect.NewRequest(wrapperspb.String("m")))
			if err != nil {
				t.Fatal(err)
			}
			if readHeader {
				_ = st.ResponseHeader()
			}
			_, _ = receiveAll(t, st)
		}
	}
	seen := 0
	for _, step := range []struct {
		name   string
		h      handlers
		call   func()
		method string
		want   []observetest.Record
	}{
		{"stream retried", streamFailFirst(1, connect.CodeUnavailable), streamCall(false), serverStream, []observetest.Record{ // tokens 10
			{Msg: "rebound: retry scheduled", Attrs: map[string]any{"attempt": 1, "delay": 50 * time.Millisecond, "error": "unavailable: attempt 1 fails"}},
			{Msg: "rebound: committed", Attrs: map[string]any{"attempt": 2, "why": "first response message"}},
		}},
		{"stream committed by its header", handlers{}, streamCall(true), serverStream, []observetest.Record{
			{Msg: "rebound: committed", Attrs: map[string]any{"attempt": 1, "why": "response header read"}},
		}},
		{"success on attempt 3", failFirst(2, connect.CodeUnavailable), unaryCall, unary, []observetest.Record{ // tokens 9
			{Msg: "rebound: retry scheduled", Attrs: map[string]any{"attempt": 1, "delay": 50 * time.Millisecond, "error": "unavailable: attempt 1 fails"}},
			{Msg: "rebound: retry scheduled", Attrs: map[string]any{"attempt": 2, "delay": 100 * time.Millisecond, "error": "unavailable: attempt 2 fails"}},
		}},
		{"success at once", handlers{}, unaryCall, unary, nil}, // tokens 10
		{"pushback, then exhausted", pushbackHandler([]string{"250"}), unaryCall, unary, []observetest.Record{ // tokens 6
			{Msg: "rebound: retry scheduled, obeying server pushback", Attrs: map[string]any{"attempt": 1, "delay": 250 * time.Millisecond, "error": "unavailable: busy"}},
			{Msg: "rebound: retry scheduled", Attrs: map[string]any{"attempt": 2, "delay": 50 * time.Millisecond}},
			{Msg: "rebound: retry scheduled", Attrs: map[string]any{"attempt": 3, "delay": 100 * time.Millisecond}},
			{Msg: "rebound: gave up", Attrs: map[string]any{"attempts": 4, "reason": "attempts exhausted", "error": "unavailable: busy"}},
		}},
		{"pushback stop", pushbackHandler([]string{"-1"}), unaryCall, unary, []observetest.Record{ // tokens 5
			{Msg: "rebound: server pushback said stop, gave up", Attrs: map[string]any{"attempts": 1, "reason": "server pushback said not to retry"}},
		}},
		{"throttled", failFirst(1000, connect.CodeUnavailable), unaryCall, unary, []observetest.Record{ // tokens 4
			{Msg: "rebound: throttled, gave up", Attrs: map[string]any{"attempts": 1, "reason": "throttled"}},
		}},
		{"not retryable", failFirst(1000, connect.CodeInvalidArgument), unaryCall, unary, []observetest.Record{
			{Msg: "rebound: gave up", Attrs: map[string]any{"attempts": 1, "reason": "error is not retryable", "error": "invalid_argument: attempt 1 fails"}},
		}},
	} {
		srv.setHandlers(step.h)
		step.call()
		all := records()
		observetest.CheckRecords(t, step.name, all[seen:], step.method, target, step.want)
		seen = len(all)
	}
}

func TestLogsHedging(t *testing.T) {
	logger, records := observetest.DebugLog(t)
	srv := startServer(t, failFirst(1000, connect.CodeUnavailable), false)
	// The default server name is the URL's host.
	i := newInterceptor(t, clocktest.New(), hedgeJSON(""), connectretry.WithLogger(logger))
	_, _ = call(context.Background(), newClients(srv, connectProtocol, i).unary, "x")
	observetest.CheckRecords(t, "hedged call", records(), unary, strings.TrimPrefix(srv.url, "http://"), []observetest.Record{
		{Msg: "rebound: hedge sent", Attrs: map[string]any{"attempt": 2}},
		{Msg: "rebound: hedge sent", Attrs: map[string]any{"attempt": 3}},
		{Msg: "rebound: gave up", Attrs: map[string]any{"attempts": 3, "reason": "attempts exhausted"}},
	})
}

func TestLogsOnlyAtDebugLevel(t *testing.T) {
	var buf bytes.Buffer
	srv := startServer(t, failFirst(2, connect.CodeUnavailable), false)
	i := newInterceptor(t, clocktest.NewAuto(), retryJSON(""), connectretry.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	c := newClients(srv, connectProtocol, i)
	if _, err := call(context.Background(), c.unary, "x"); err != nil {
		t.Fatal(err)
	}
	st, err := c.serverStream.CallServerStream(context.Background(), connect.NewRequest(wrapperspb.String("m")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := receiveAll(t, st); err != nil {
		t.Fatal(err)
	}
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

func TestObserveOptions(t *testing.T) {
	for _, tc := range []struct {
		opt  connectretry.Option
		want string
	}{
		{connectretry.WithMeterProvider(nil), "connectretry: WithMeterProvider: nil MeterProvider"},
		{connectretry.WithLogger(nil), "connectretry: WithLogger: nil Logger"},
		{connectretry.WithMeterProvider(failingMeters{}), "connectretry: WithMeterProvider: creating instruments: no counters today"},
	} {
		i, err := connectretry.New(nil, tc.opt)
		if i != nil || err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("New: %v, %v; want the error %q", i, err, tc.want)
		}
	}
	srv := startServer(t, handlers{}, false)
	c := newClients(srv, connectProtocol, connectretry.NewInterceptor(nil, connectretry.WithLogger(nil)))
	if _, err := call(context.Background(), c.unary, "x"); connect.CodeOf(err) != connect.CodeInternal || !strings.Contains(err.Error(), "WithLogger") {
		t.Fatalf("err %v, want internal naming WithLogger", err)
	}
}
