package suite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/internal/observe/observetest"
	"github.com/rebound-go/rebound/serviceconfig"
)

// totalSleep is the sum of the delays the clock was asked to wait.
func totalSleep(clk *clocktest.Clock) time.Duration {
	var d time.Duration
	for _, s := range clk.Sleeps() {
		d += s
	}
	return d
}

// interceptorFor is e's Interceptor for cfgJSON on clk with jitter 0.5,
// for tests that read its Stats.
func interceptorFor(t testing.TB, e env, clk *clocktest.Clock, cfgJSON string, opts ...option) interceptor {
	t.Helper()
	i, err := e.newInterceptor(parse(t, cfgJSON), append([]option{withClock(clk), withRandom(clocktest.NewRand(0.5))}, opts...)...)
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
	each(t, func(t *testing.T, e env) {
		srv := e.start(t, handlers{})
		clk := clocktest.NewAuto()
		i := interceptorFor(t, e, clk, retryJSON(""))
		c := e.major.dial(t, srv, e.p, i)
		// Each step makes one call and checks the statistics of Unary
		// after it. Backoff at jitter 0.5 waits 50ms, 100ms, 200ms.
		for _, step := range []struct {
			name string
			h    handlers
			want rebound.MethodStats
		}{
			{"success at once", handlers{}, rebound.MethodStats{Calls: 1}},
			{"success on attempt 3", failFirst(2, serviceconfig.Unavailable), rebound.MethodStats{
				Calls:   2,
				Retries: rebound.AttemptStats{Attempts: 2, Failed: 1, Histogram: [8]uint64{1, 1}},
			}},
			{"attempts exhausted", failFirst(1000, serviceconfig.Unavailable), rebound.MethodStats{
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
			{"not retryable", failFirst(1, serviceconfig.InvalidArgument), rebound.MethodStats{
				Calls:         6,
				Retries:       rebound.AttemptStats{Attempts: 8, Failed: 7, Histogram: [8]uint64{3, 3, 2}},
				Pushbacks:     1,
				PushbackStops: 1,
			}},
		} {
			srv.setHandlers(step.h)
			_, _ = c.unary(context.Background(), "x", nil)
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

func TestStatsThrottled(t *testing.T) {
	eachMajor(t, protocol{}, func(t *testing.T, e env) {
		srv := e.start(t, failFirst(1000, serviceconfig.Unavailable))
		// Tokens 6, threshold 3: the first call retries twice and is
		// refused a third attempt; the second is refused its first retry.
		i := interceptorFor(t, e, clocktest.NewAuto(), retryJSON(`,"retryThrottling":{"maxTokens":6,"tokenRatio":0.5}`),
			withServerName(uniqueName(t)))
		c := e.major.dial(t, srv, e.p, i)
		for range 2 {
			if _, err := c.unary(context.Background(), "x", nil); !errors.Is(err, rebound.ErrThrottled) {
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
	})
}

func TestStatsHedges(t *testing.T) {
	eachMajor(t, protocol{}, func(t *testing.T, e env) {
		srv := e.start(t, handlers{})
		// The clock never moves: each hedge goes out because the attempt
		// before it failed with a non-fatal code, so attempts run one at a
		// time.
		i := interceptorFor(t, e, clocktest.New(), hedgeJSON(`,"retryThrottling":{"maxTokens":10,"tokenRatio":1}`),
			withServerName(uniqueName(t)))
		c := e.major.dial(t, srv, e.p, i)
		for _, step := range []struct {
			name string
			h    handlers
			want rebound.MethodStats
		}{
			// Tokens 10 → 8, threshold 5.
			{"success on the third attempt", failFirst(2, serviceconfig.Unavailable), rebound.MethodStats{
				Calls:  1,
				Hedges: rebound.AttemptStats{Attempts: 2, Failed: 1, Histogram: [8]uint64{1, 1}},
			}},
			// Three more failures: at most 6 tokens remain.
			{"attempts exhausted", failFirst(1000, serviceconfig.Unavailable), rebound.MethodStats{
				Calls:  2,
				Hedges: rebound.AttemptStats{Attempts: 4, Failed: 3, Histogram: [8]uint64{2, 2}},
			}},
			// One more failure leaves at most 5: the hedge is refused.
			{"throttled", failFirst(1000, serviceconfig.Unavailable), rebound.MethodStats{
				Calls:     3,
				Hedges:    rebound.AttemptStats{Attempts: 4, Failed: 3, Histogram: [8]uint64{2, 2}},
				Throttled: 1,
			}},
		} {
			srv.setHandlers(step.h)
			_, _ = c.unary(context.Background(), "x", nil)
			if got := i.Stats()[unary]; got != step.want {
				t.Fatalf("after %s: stats\n%+v, want\n%+v", step.name, got, step.want)
			}
		}
	})
}

func TestStatsStreams(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		srv := e.start(t, streamFailFirst(2, serviceconfig.Unavailable))
		clk := clocktest.NewAuto()
		i := interceptorFor(t, e, clk, retryJSON(""))
		c := e.major.dial(t, srv, e.p, i)
		st, err := c.open(context.Background(), serverStream, "m", nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := receiveAll(t, st); err != nil {
			t.Fatal(err)
		}
		// A stream that succeeds at once counts one call, no retry.
		srv.setHandlers(handlers{})
		st, err = c.open(context.Background(), serverStream, "m", nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := receiveAll(t, st); err != nil {
			t.Fatal(err)
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
	})
}

// TestStatsHeaderCommits: in connect v1, a stream whose header is read
// before its first message is committed to its first attempt, failed or
// not, and counted as a call of one attempt.
func TestStatsHeaderCommits(t *testing.T) {
	e := env{v1, connectHTTP1}
	srv := e.start(t, streamFailFirst(1, serviceconfig.Unavailable))
	i := interceptorFor(t, e, clocktest.NewAuto(), retryJSON(""))
	c := e.major.dial(t, srv, e.p, i)
	st, err := c.open(context.Background(), serverStream, "m", nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Header()
	if _, err := receiveAll(t, st); e.codeOf(err) != serviceconfig.Unavailable {
		t.Fatalf("err %v, want the first attempt's unavailable", err)
	}
	if got := i.Stats()[serverStream]; got != (rebound.MethodStats{Calls: 1}) {
		t.Fatalf("stats %+v, want one call of one attempt", got)
	}
}

func TestStatsNotKept(t *testing.T) {
	eachMajor(t, protocol{}, func(t *testing.T, e env) {
		srv := e.start(t, failFirst(1, serviceconfig.Unavailable))
		// Calls that no policy governs are not counted.
		i := interceptorFor(t, e, clocktest.NewAuto(), `{"methodConfig":[{"name":[{"service":"other.Service"}],"retryPolicy":{
			"maxAttempts":4,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`)
		c := e.major.dial(t, srv, e.p, i)
		_, _ = c.unary(context.Background(), "x", nil)
		if s := i.Stats(); len(s) != 0 {
			t.Fatalf("stats %v, want none", s)
		}
		if s := e.zero().Stats(); s == nil || len(s) != 0 {
			t.Fatalf("zero Interceptor's stats %v, want empty", s)
		}
	})
}

func TestStatsConcurrent(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		srv := e.start(t, failFirst(1000, serviceconfig.Unavailable))
		i := interceptorFor(t, e, clocktest.NewAuto(), retryJSON(""))
		c := e.major.dial(t, srv, e.p, i)
		const calls = 8
		var wg sync.WaitGroup
		for range calls {
			wg.Go(func() { _, _ = c.unary(context.Background(), "x", nil) })
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
	})
}

func TestMetrics(t *testing.T) {
	eachMajor(t, protocol{}, func(t *testing.T, e env) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
		srv := e.start(t, handlers{})
		// Tokens 6, threshold 3.
		retryTarget, hedgeTarget := uniqueName(t)+"-retry", uniqueName(t)+"-hedge"
		retry := interceptorFor(t, e, clocktest.NewAuto(), retryJSON(`,"retryThrottling":{"maxTokens":6,"tokenRatio":0.5}`),
			withServerName(retryTarget), withMeterProvider(mp))
		hedge := interceptorFor(t, e, clocktest.New(), hedgeJSON(""), withServerName(hedgeTarget), withMeterProvider(mp))
		for _, step := range []struct {
			i interceptor
			h handlers
		}{
			{retry, failFirst(2, serviceconfig.Unavailable)}, // 2 retries, 150ms; tokens 4.5
			{retry, handlers{}},                                 // nothing to record; tokens 5
			{retry, pushbackHandler([]string{"-1"})},            // pushback stop; tokens 4
			{retry, failFirst(1000, serviceconfig.Unavailable)}, // throttled at once; tokens 3
			{hedge, failFirst(2, serviceconfig.Unavailable)},    // 2 hedges
			{hedge, handlers{}},                                 // nothing to record
		} {
			srv.setHandlers(step.h)
			_, _ = e.major.dial(t, srv, e.p, step.i).unary(context.Background(), "x", nil)
		}

		got := observetest.Collect(t, reader, e.scope)
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
	})
}

func TestLogs(t *testing.T) {
	eachMajor(t, protocol{}, func(t *testing.T, e env) {
		logger, records := observetest.DebugLog(t)
		srv := e.start(t, handlers{})
		target := uniqueName(t)
		// Tokens 10, threshold 5.
		i := interceptorFor(t, e, clocktest.NewAuto(), retryJSON(`,"retryThrottling":{"maxTokens":10,"tokenRatio":1}`),
			withServerName(target), withLogger(logger))
		c := e.major.dial(t, srv, e.p, i)
		unaryCall := func() { _, _ = c.unary(context.Background(), "x", nil) }
		streamCall := func() {
			st, err := c.open(context.Background(), serverStream, "m", nil)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = receiveAll(t, st)
		}
		seen := 0
		for _, step := range []struct {
			name   string
			h      handlers
			call   func()
			method string
			want   []observetest.Record
		}{
			{"stream retried", streamFailFirst(1, serviceconfig.Unavailable), streamCall, serverStream, []observetest.Record{ // tokens 10
				{Msg: "rebound: retry scheduled", Attrs: map[string]any{"attempt": 1, "delay": 50 * time.Millisecond, "error": "unavailable: attempt 1 fails"}},
				{Msg: "rebound: committed", Attrs: map[string]any{"attempt": 2, "why": "first response message"}},
			}},
			{"success on attempt 3", failFirst(2, serviceconfig.Unavailable), unaryCall, unary, []observetest.Record{ // tokens 9
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
			{"throttled", failFirst(1000, serviceconfig.Unavailable), unaryCall, unary, []observetest.Record{ // tokens 4
				{Msg: "rebound: throttled, gave up", Attrs: map[string]any{"attempts": 1, "reason": "throttled"}},
			}},
			{"not retryable", failFirst(1000, serviceconfig.InvalidArgument), unaryCall, unary, []observetest.Record{
				{Msg: "rebound: gave up", Attrs: map[string]any{"attempts": 1, "reason": "error is not retryable", "error": "invalid_argument: attempt 1 fails"}},
			}},
		} {
			srv.setHandlers(step.h)
			step.call()
			all := records()
			observetest.CheckRecords(t, step.name, all[seen:], step.method, target, step.want)
			seen = len(all)
		}
	})
}

// TestLogsHeaderCommits: connect v1 logs a stream committed by its header.
func TestLogsHeaderCommits(t *testing.T) {
	e := env{v1, connectHTTP1}
	logger, records := observetest.DebugLog(t)
	srv := e.start(t, handlers{})
	target := uniqueName(t)
	i := interceptorFor(t, e, clocktest.NewAuto(), retryJSON(""), withServerName(target), withLogger(logger))
	st, err := e.major.dial(t, srv, e.p, i).open(context.Background(), serverStream, "m", nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Header()
	_, _ = receiveAll(t, st)
	observetest.CheckRecords(t, "stream committed by its header", records(), serverStream, target, []observetest.Record{
		{Msg: "rebound: committed", Attrs: map[string]any{"attempt": 1, "why": "response header read"}},
	})
}

func TestLogsHedging(t *testing.T) {
	eachMajor(t, protocol{}, func(t *testing.T, e env) {
		logger, records := observetest.DebugLog(t)
		srv := e.start(t, failFirst(1000, serviceconfig.Unavailable))
		// The default server name is the URL's host.
		i := interceptorFor(t, e, clocktest.New(), hedgeJSON(""), withLogger(logger))
		_, _ = e.major.dial(t, srv, e.p, i).unary(context.Background(), "x", nil)
		observetest.CheckRecords(t, "hedged call", records(), unary, strings.TrimPrefix(srv.url, "http://"), []observetest.Record{
			{Msg: "rebound: hedge sent", Attrs: map[string]any{"attempt": 2}},
			{Msg: "rebound: hedge sent", Attrs: map[string]any{"attempt": 3}},
			{Msg: "rebound: gave up", Attrs: map[string]any{"attempts": 3, "reason": "attempts exhausted"}},
		})
	})
}

func TestLogsOnlyAtDebugLevel(t *testing.T) {
	eachMajor(t, protocol{}, func(t *testing.T, e env) {
		var buf bytes.Buffer
		srv := e.start(t, handlers{
			unary:        failFirst(2, serviceconfig.Unavailable).unary,
			serverStream: streamFailFirst(1, serviceconfig.Unavailable).serverStream,
		})
		i := interceptorFor(t, e, clocktest.NewAuto(), retryJSON(""), withLogger(slog.New(slog.NewTextHandler(&buf, nil))))
		c := e.major.dial(t, srv, e.p, i)
		if _, err := c.unary(context.Background(), "x", nil); err != nil {
			t.Fatal(err)
		}
		st, err := c.open(context.Background(), serverStream, "m", nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := receiveAll(t, st); err != nil {
			t.Fatal(err)
		}
		if buf.Len() != 0 {
			t.Fatalf("logged at info level:\n%s", buf.String())
		}
	})
}

// failingMeters is a MeterProvider whose counters cannot be made.
type failingMeters struct{ noop.MeterProvider }

func (failingMeters) Meter(string, ...metric.MeterOption) metric.Meter { return failingMeter{} }

type failingMeter struct{ noop.Meter }

func (failingMeter) Int64Counter(string, ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	return nil, errors.New("no counters today")
}

func TestObserveOptions(t *testing.T) {
	eachMajor(t, protocol{}, func(t *testing.T, e env) {
		for _, tc := range []struct {
			opt  option
			want string
		}{
			{withMeterProvider(nil), "connectretry: WithMeterProvider: nil MeterProvider"},
			{withLogger(nil), "connectretry: WithLogger: nil Logger"},
			{withMeterProvider(failingMeters{}), "connectretry: WithMeterProvider: creating instruments: no counters today"},
		} {
			i, err := e.newInterceptor(nil, tc.opt)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("New: %v, %v; want the error %q", i, err, tc.want)
			}
		}
		srv := e.start(t, handlers{})
		c := e.major.dial(t, srv, e.p, e.mustInterceptor(nil, withLogger(nil)))
		if _, err := c.unary(context.Background(), "x", nil); e.codeOf(err) != serviceconfig.Internal || !strings.Contains(err.Error(), "WithLogger") {
			t.Fatalf("err %v, want internal naming WithLogger", err)
		}
	})
}
