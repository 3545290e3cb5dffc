// Package observetest holds test helpers for the front doors' statistics,
// metrics and logs: reading an OpenTelemetry manual reader and checking
// slog records.
package observetest

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Collect reads every metric of reader by name, checking their scope.
func Collect(t testing.TB, reader *sdkmetric.ManualReader, scope string) map[string]metricdata.Metrics {
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

// Histogram returns the point of histogram name for an RPC of method and
// target through system (rpc.system.name: grpc, connectrpc), checking the
// unit.
func Histogram[N int64 | float64](t testing.TB, got map[string]metricdata.Metrics, name, unit, system, method, target string) metricdata.HistogramDataPoint[N] {
	t.Helper()
	return HistogramAt[N](t, got, name, unit, RPC(system, method, target)...)
}

// RPC returns the metric attributes of an RPC of method and target
// through system.
func RPC(system, method, target string) []attribute.KeyValue {
	return []attribute.KeyValue{attribute.String("grpc.method", method), attribute.String("grpc.target", target), attribute.String("rpc.system.name", system)}
}

// HistogramAt returns the point of histogram name whose attributes are
// exactly attrs, checking the unit.
func HistogramAt[N int64 | float64](t testing.TB, got map[string]metricdata.Metrics, name, unit string, attrs ...attribute.KeyValue) metricdata.HistogramDataPoint[N] {
	t.Helper()
	m := metricOf(t, got, name, unit)
	h, ok := m.Data.(metricdata.Histogram[N])
	if !ok {
		t.Fatalf("%s is a %T", name, m.Data)
	}
	want := attribute.NewSet(slices.Clone(attrs)...) // NewSet sorts its argument
	for _, dp := range h.DataPoints {
		if dp.Attributes.Equals(&want) {
			return dp
		}
	}
	t.Fatalf("%s: no point for %v among %v", name, want.Encoded(attribute.DefaultEncoder()), sets(len(h.DataPoints), func(i int) attribute.Set { return h.DataPoints[i].Attributes }))
	return metricdata.HistogramDataPoint[N]{}
}

// Counter returns the value of counter name for an RPC of method and
// target through system, checking the unit.
func Counter(t testing.TB, got map[string]metricdata.Metrics, name, unit, system, method, target string) int64 {
	t.Helper()
	return CounterAt(t, got, name, unit, RPC(system, method, target)...)
}

// CounterAt returns the value of counter name at the point whose
// attributes are exactly attrs, checking the unit.
func CounterAt(t testing.TB, got map[string]metricdata.Metrics, name, unit string, attrs ...attribute.KeyValue) int64 {
	t.Helper()
	m := metricOf(t, got, name, unit)
	sum, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s is a %T", name, m.Data)
	}
	want := attribute.NewSet(slices.Clone(attrs)...) // NewSet sorts its argument
	for _, dp := range sum.DataPoints {
		if dp.Attributes.Equals(&want) {
			return dp.Value
		}
	}
	t.Fatalf("%s: no point for %v among %v", name, want.Encoded(attribute.DefaultEncoder()), sets(len(sum.DataPoints), func(i int) attribute.Set { return sum.DataPoints[i].Attributes }))
	return 0
}

func metricOf(t testing.TB, got map[string]metricdata.Metrics, name, unit string) metricdata.Metrics {
	t.Helper()
	m, ok := got[name]
	if !ok {
		t.Fatalf("%s not recorded", name)
	}
	if m.Unit != unit {
		t.Errorf("%s: unit %q, want %q", name, m.Unit, unit)
	}
	return m
}

// sets lists the attribute sets of n points, for a failure message.
func sets(n int, at func(int) attribute.Set) []string {
	out := make([]string, n)
	for i := range n {
		set := at(i)
		out[i] = set.Encoded(attribute.DefaultEncoder())
	}
	return out
}

// DebugLog returns a logger that writes JSON records at debug level, and a
// function that returns the records written so far without their time.
func DebugLog(t testing.TB) (*slog.Logger, func() []map[string]any) {
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

// Record is a log record a test expects: its message and some of its
// attributes, with durations as time.Duration and counts as int.
type Record struct {
	Msg   string
	Attrs map[string]any
}

// CheckRecords compares the records logged since the last check with want.
// Every record must be at debug level and name the method and target.
func CheckRecords(t testing.TB, step string, got []map[string]any, method, target string, want []Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, want %d:\n%v", step, len(got), len(want), got)
	}
	for k, w := range want {
		r := got[k]
		if r["level"] != "DEBUG" || r["msg"] != w.Msg || r["method"] != method || r["target"] != target {
			t.Errorf("%s: record %d is %v, want %q at DEBUG for %s at %s", step, k, r, w.Msg, method, target)
		}
		for key, v := range w.Attrs {
			// JSON numbers decode as float64; the handler writes durations
			// in nanoseconds.
			switch x := v.(type) {
			case time.Duration:
				v = float64(x)
			case int:
				v = float64(x)
			}
			if r[key] != v {
				t.Errorf("%s: record %d %q: %s = %v, want %v", step, k, w.Msg, key, r[key], v)
			}
		}
	}
}
