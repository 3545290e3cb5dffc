package observe

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/rebound-go/rebound"
)

// TestAttemptTimeouts: attempts cut by the per-attempt timeout count in
// Stats, in the protocol's counter, and in the decision log.
func TestAttemptTimeouts(t *testing.T) {
	for _, tc := range []struct {
		proto Protocol
		name  string
	}{{GRPC, AttemptTimeoutsName}, {HTTP, AttemptTimeoutsName}} {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		var logs bytes.Buffer
		r, err := New(mp, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), "test", tc.proto)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		var tr Tracker
		tr.Start(time.Time{})
		tr.TimedOut()
		tr.Failed(1, rebound.RetryInfo{Safety: rebound.SafetyYes, Timeout: true}, time.Time{})
		tr.Start(time.Time{})
		tr.TimedOut()
		call := tr.Call("/a.S/M", "t", false, rebound.ErrAttemptsExhausted)
		r.End(ctx, &call)
		if got := r.Stats()["/a.S/M"].AttemptTimeouts; got != 2 {
			t.Fatalf("Stats AttemptTimeouts = %d, want 2", got)
		}
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(ctx, &rm); err != nil {
			t.Fatal(err)
		}
		var got int64 = -1
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name == tc.name {
					got = m.Data.(metricdata.Sum[int64]).DataPoints[0].Value
				}
			}
		}
		if got != 2 {
			t.Fatalf("%s = %d, want 2", tc.name, got)
		}
		_ = mp.Shutdown(ctx)

		cut := errors.Join(errors.New("attempt 1"), rebound.ErrAttemptTimeout)
		d := r.Decisions(ctx, "/a.S/M", "t")
		d.Retry(1, cut, time.Millisecond)
		d.GaveUp(2, cut, rebound.ErrAttemptsExhausted)
		if s := logs.String(); !strings.Contains(s, "per-attempt timeout, retry scheduled") || !strings.Contains(s, "attempt_timeout=true") {
			t.Fatalf("log does not tell of the timeout:\n%s", s)
		}
	}
}
