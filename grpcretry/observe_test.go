package grpcretry_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/internal/grpctest"
	"github.com/rebound-go/rebound/serviceconfig"
)

const unaryName = grpctest.UnaryCall

func observed(t *testing.T, srv *grpctest.Server, cfg *serviceconfig.Config, opts ...grpcretry.Option) (*grpcretry.Client, testpb.TestServiceClient, *grpc.ClientConn, *clocktest.Clock) {
	t.Helper()
	clk := clocktest.NewAuto()
	c, err := grpcretry.New(cfg, append([]grpcretry.Option{grpcretry.WithClock(clk), grpcretry.WithRandom(clocktest.NewRand(0.5)),
		grpcretry.WithServerName(fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano()))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	cc := srv.Dial(t, c.DialOptions()...)
	return c, testpb.NewTestServiceClient(cc), cc, clk
}

func TestStatsRetries(t *testing.T) {
	srv := grpctest.Start(t, failFirst(2, codes.Unavailable))
	c, tc, _, clk := observed(t, srv, retryConfig(t, 4, `"UNAVAILABLE"`, `,"retryThrottling":{"maxTokens":6,"tokenRatio":1}`))
	ctx := context.Background()
	if _, err := tc.UnaryCall(ctx, grpctest.Request("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.UnaryCall(ctx, grpctest.Request("x")); err != nil { // first attempt wins
		t.Fatal(err)
	}
	s := c.Stats()[unaryName]
	want := rebound.AttemptStats{Attempts: 2, Failed: 1, Histogram: [8]uint64{1, 1}}
	if s.Calls != 2 || s.Retries != want || s.RetryDelay != 150*time.Millisecond {
		t.Fatalf("stats %+v, want 2 calls, retries %+v, 150ms delay (sleeps %v)", s, want, clk.Sleeps())
	}
	// Tokens: back to 6 after the successes; then 6 → 5 → 4 → 3, and the
	// third retry is refused at the threshold.
	srv.SetHandlers(failFirst(1000, codes.Unavailable))
	_, _ = tc.UnaryCall(ctx, grpctest.Request("x"))
	if s := c.Stats()[unaryName]; s.Throttled != 1 || s.Calls != 3 {
		t.Fatalf("after a throttled call: %+v", s)
	}
}

func TestStatsHedges(t *testing.T) {
	srv := grpctest.Start(t, failFirst(1000, codes.Unavailable))
	js := fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"hedgingPolicy":{"maxAttempts":3,"nonFatalStatusCodes":["UNAVAILABLE"]}}]}`, grpctest.Service)
	cfg, err := serviceconfig.Parse([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	c, tc, _, _ := observed(t, srv, cfg)
	_, _ = tc.UnaryCall(context.Background(), grpctest.Request("x"))
	s := c.Stats()[unaryName]
	want := rebound.AttemptStats{Attempts: 2, Failed: 2, Histogram: [8]uint64{1, 1}}
	if s.Calls != 1 || s.Hedges != want || s.Retries != (rebound.AttemptStats{}) {
		t.Fatalf("stats %+v, want hedges %+v", s, want)
	}
}

func TestMetricsAndTransparentRetries(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rl := &refusingListener{Listener: lis, refused: make(chan struct{})}
	srv := grpctest.Serve(t, rl, failFirst(0, codes.OK))
	t.Cleanup(rl.wg.Wait)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	c, err := grpcretry.New(retryConfig(t, 3, `"UNAVAILABLE"`, ""), grpcretry.WithMeterProvider(mp),
		grpcretry.WithClock(clocktest.NewAuto()), grpcretry.WithRandom(clocktest.NewRand(0.5)))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(srv.Addr, append(c.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	tc := testpb.NewTestServiceClient(cc)
	// Call 1 is refused once below the interceptor (WaitForReady: the
	// transparent retry waits for the new connection); call 2 is retried
	// twice.
	var n1 int
	if _, err := tc.UnaryCall(context.Background(), grpctest.Request("x"), grpc.WaitForReady(true), grpcretry.CountAttempts(&n1)); err != nil {
		t.Fatal(err)
	}
	// Now and then grpc-go surfaces the drain as a failed attempt, which
	// rebound retries (see TestTransparentRetryBelowInterceptor).
	extra := n1 - 1
	srv.SetHandlers(failFirst(srv.Count(unaryName)+2, codes.Unavailable))
	if _, err := tc.UnaryCall(context.Background(), grpctest.Request("x")); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	points := map[string]metricdata.HistogramDataPoint[int64]{}
	units := map[string]string{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			units[m.Name] = m.Unit
			if h, ok := m.Data.(metricdata.Histogram[int64]); ok && len(h.DataPoints) == 1 {
				dp := h.DataPoints[0]
				method, _ := dp.Attributes.Value("grpc.method")
				target, _ := dp.Attributes.Value("grpc.target")
				if method.AsString() != unaryName || target.AsString() != cc.CanonicalTarget() {
					t.Fatalf("%s attributes %v", m.Name, dp.Attributes.ToSlice())
				}
				points[m.Name] = dp
			}
		}
	}
	if dp := points["grpc.client.call.transparent_retries"]; dp.Count != 1 || dp.Sum < 1 || units["grpc.client.call.transparent_retries"] != "{transparent_retry}" {
		t.Fatalf("transparent_retries %+v", dp)
	}
	wantCount := uint64(1)
	if extra > 0 {
		wantCount++
	}
	if dp := points["grpc.client.call.retries"]; dp.Count != wantCount || dp.Sum != int64(2+extra) || units["grpc.client.call.retries"] != "{retry}" {
		t.Fatalf("retries %+v", dp)
	}
	if units["grpc.client.call.retry_delay"] != "s" {
		t.Fatalf("retry_delay unit %q", units["grpc.client.call.retry_delay"])
	}
	if s := c.Stats()[unaryName]; s.TransparentRetries < 1 || s.Retries.Attempts != uint64(2+extra) {
		t.Fatalf("stats %+v", s)
	}
}

func TestDecisionLogs(t *testing.T) {
	srv := grpctest.Start(t, pushbackHandler([]string{"30"}, nil, nil))
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	_, tc, _, _ := observed(t, srv, retryConfig(t, 3, `"UNAVAILABLE"`, ""), grpcretry.WithLogger(logger))
	_, _ = tc.UnaryCall(context.Background(), grpctest.Request("x"))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{"retry scheduled, obeying server pushback", "retry scheduled", "gave up"}
	if len(lines) != len(want) {
		t.Fatalf("%d records, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, w := range want {
		if !strings.Contains(lines[i], "rebound: "+w) || !strings.Contains(lines[i], "method="+unaryName) {
			t.Errorf("record %d %q, want %q", i, lines[i], w)
		}
	}
	if !strings.Contains(lines[0], "delay=30ms") || !strings.Contains(lines[2], `reason="attempts exhausted"`) {
		t.Errorf("records lack the delay or the reason:\n%s", buf.String())
	}
}

func TestStatsStreams(t *testing.T) {
	srv := grpctest.Start(t, grpctest.Handlers{ServerStream: func(n int, _ *testpb.StreamingOutputCallRequest, st grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
		if n == 1 {
			return status.Error(codes.Unavailable, "not yet")
		}
		return st.Send(&testpb.StreamingOutputCallResponse{})
	}})
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, tc, _, _ := observed(t, srv, retryConfig(t, 3, `"UNAVAILABLE"`, ""), grpcretry.WithLogger(logger))
	st, err := tc.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := st.Recv(); err != nil {
			break
		}
	}
	s := c.Stats()[grpctest.StreamingOutputCall]
	want := rebound.AttemptStats{Attempts: 1, Histogram: [8]uint64{1}}
	if s.Calls != 1 || s.Retries != want {
		t.Fatalf("stream stats %+v, want 1 call, retries %+v", s, want)
	}
	if !strings.Contains(buf.String(), "rebound: retry scheduled") || !strings.Contains(buf.String(), "method="+grpctest.StreamingOutputCall) {
		t.Fatalf("no retry record for the stream:\n%s", buf.String())
	}
}

// The one-liner's statistics are reached through the conn.
func TestStatsOf(t *testing.T) {
	srv := grpctest.Start(t, failFirst(1, codes.Unavailable))
	cfg := retryConfig(t, 3, `"UNAVAILABLE"`, "")
	cc := srv.Dial(t, grpcretry.DialOptions(cfg, grpcretry.WithClock(clocktest.NewAuto()))...)
	if s := grpcretry.StatsOf(cc); len(s) != 0 {
		t.Fatalf("stats before any call: %v", s)
	}
	if _, err := testpb.NewTestServiceClient(cc).UnaryCall(context.Background(), grpctest.Request("x")); err != nil {
		t.Fatal(err)
	}
	s := grpcretry.StatsOf(cc)[unaryName]
	if s.Calls != 1 || s.Retries.Attempts != 1 {
		t.Fatalf("stats %+v, want 1 call retried once", s)
	}
	if other := grpcretry.StatsOf(srv.Dial(t)); len(other) != 0 {
		t.Fatalf("a conn without rebound has stats %v", other)
	}
}

// With the real clock, the retry delay is the wall time between the
// failure and the retry: at least the backoff the call waited (a timer
// never fires early), at most the whole call.
func TestStatsRetryDelayRealClock(t *testing.T) {
	srv := grpctest.Start(t, failFirst(1, codes.Unavailable))
	cfg, err := serviceconfig.Parse([]byte(fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"retryPolicy":{
		"maxAttempts":2,"initialBackoff":"0.02s","maxBackoff":"0.02s","backoffMultiplier":1,
		"retryableStatusCodes":["UNAVAILABLE"]}}]}`, grpctest.Service)))
	if err != nil {
		t.Fatal(err)
	}
	// Jitter 0.5 of 20ms: the call waits 10ms.
	c, err := grpcretry.New(cfg, grpcretry.WithRandom(clocktest.NewRand(0.5)))
	if err != nil {
		t.Fatal(err)
	}
	tc := testpb.NewTestServiceClient(srv.Dial(t, c.DialOptions()...))
	start := time.Now()
	if _, err := tc.UnaryCall(context.Background(), grpctest.Request("x")); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if d := c.Stats()[unaryName].RetryDelay; d < 10*time.Millisecond || d > took {
		t.Fatalf("retry delay %v, want at least the 10ms backoff and at most the call's %v", d, took)
	}
}
