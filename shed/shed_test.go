package shed_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/shed"
)

func fixed(n int) shed.Config {
	c := shed.DefaultConfig()
	c.InitialLimit, c.MinLimit, c.MaxLimit = n, n, n
	return c
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		mod   func(*shed.Config)
		field string
	}{
		{func(c *shed.Config) { c.MinLimit = 0 }, "MinLimit"},
		{func(c *shed.Config) { c.MaxLimit = 0 }, "MaxLimit"},
		{func(c *shed.Config) { c.MaxLimit = 2e6 }, "MaxLimit"},
		{func(c *shed.Config) { c.InitialLimit = 5000 }, "InitialLimit"},
		{func(c *shed.Config) { c.Tolerance = 1 }, "Tolerance"},
		{func(c *shed.Config) { c.Tolerance = 0 / zero() }, "Tolerance"},
		{func(c *shed.Config) { c.RetryShare = 1 }, "RetryShare"},
		{func(c *shed.Config) { c.RetryShare = -0.1 }, "RetryShare"},
		{func(c *shed.Config) { c.Window = time.Millisecond }, "Window"},
	} {
		c := shed.DefaultConfig()
		tc.mod(&c)
		_, err := shed.New(c)
		if err == nil || !strings.Contains(err.Error(), "Config."+tc.field) {
			t.Errorf("%s: err = %v, want one naming Config.%s", tc.field, err, tc.field)
		}
	}
	if _, err := shed.New(shed.DefaultConfig(), nil); err == nil {
		t.Error("nil Option accepted")
	}
	if _, err := shed.New(shed.DefaultConfig(), shed.WithClock(nil)); err == nil || !strings.Contains(err.Error(), "WithClock") {
		t.Errorf("nil clock: err = %v", err)
	}
}

func zero() float64 { return 0 }

// Requests beyond the limit are shed at once; the first sheds of a window
// invite a retry, and once the window's sheds are more than RetryShare of
// the requests it served, the pushback says stop.
func TestShedAndPushback(t *testing.T) {
	clk := clocktest.New()
	s, err := shed.New(fixed(10), shed.WithClock(clk), shed.WithRandom(clocktest.NewRand(0.5)))
	if err != nil {
		t.Fatal(err)
	}
	var dones []func(shed.Outcome)
	for range 10 {
		done, _ := s.Admit()
		if done == nil {
			t.Fatal("rejected below the limit")
		}
		dones = append(dones, done)
	}
	// 10 admitted; the 11th is shed: 1 for 10 = RetryShare, not above it.
	done, pb := s.Admit()
	if done != nil || pb.Stop {
		t.Fatalf("11th request: admitted %v, pushback %+v; want shed with a delay", done != nil, pb)
	}
	// No latency measured yet: the delay is the floor.
	if pb.Delay != time.Millisecond || pb.Millis() != "1" || pb.RetryAfter(0.5) != "0" {
		t.Fatalf("pushback %+v (%s ms, Retry-After %s), want 1ms", pb, pb.Millis(), pb.RetryAfter(0.5))
	}
	// The 12th: 2 for 10, above a tenth: stop.
	if done, pb = s.Admit(); done != nil || !pb.Stop || pb.Millis() != "-1" || pb.RetryAfter(0.5) != "120" {
		t.Fatalf("12th request: %+v, want stop", pb)
	}
	// Requests end after 100ms; the window moves on; the next shed
	// request is told the latency.
	clk.Advance(100 * time.Millisecond)
	for _, d := range dones {
		d(shed.Served)
		d(shed.Failed) // a second call does nothing
	}
	if st := s.Stats(); st.InFlight != 0 || st.Admitted != 10 || st.ShedRetry != 1 || st.ShedStop != 1 {
		t.Fatalf("stats %+v", st)
	}
	clk.Advance(2 * time.Second)
	dones = dones[:0]
	for range 10 {
		done, _ := s.Admit()
		dones = append(dones, done)
	}
	_, pb = s.Admit()
	// latency 100ms + 1 shed/s × (100ms)² / 10, × (0.5 + 0.5). The
	// Shedder keeps latencies to a sixteenth of an octave: within 5%.
	secs := 0.1 + 0.01/10
	want := time.Duration(secs * float64(time.Second))
	if pb.Stop || absDiff(pb.Delay, want) > want/20 {
		t.Fatalf("pushback %+v, want a delay of %v", pb, want)
	}
	for _, d := range dones {
		d(shed.Served)
	}
}

func absDiff(a, b time.Duration) time.Duration {
	if a > b {
		return a - b
	}
	return b - a
}

// The limit grows while latency holds, and shrinks when requests slow
// down (they queue inside the server) or fail with a sign of overload.
func TestLimitAdapts(t *testing.T) {
	clk := clocktest.New()
	c := shed.DefaultConfig()
	c.InitialLimit, c.MaxLimit = 10, 100
	s, _ := shed.New(c, shed.WithClock(clk))
	// run keeps the server full: each round admits up to the limit, waits
	// lat, and ends them all.
	run := func(rounds int, lat time.Duration) {
		for range rounds {
			var dones []func(shed.Outcome)
			for {
				done, _ := s.Admit()
				if done == nil {
					break
				}
				dones = append(dones, done)
			}
			clk.Advance(lat)
			for _, d := range dones {
				d(shed.Served)
			}
		}
	}
	run(50, 10*time.Millisecond)
	if got := s.Stats().Limit; got != 100 {
		t.Fatalf("limit after steady latency = %d, want the max 100", got)
	}
	run(2, 40*time.Millisecond) // four times slower: queueing
	grown := s.Stats().Limit
	if grown >= 60 {
		t.Fatalf("limit after latency quadrupled = %d, want it well below 100", grown)
	}
	done, _ := s.Admit()
	done(shed.Overloaded)
	if got := s.Stats().Limit; got != max(int(float64(grown)*0.9), 1) && got != int(float64(grown)*0.9)+1 {
		t.Fatalf("limit after an overload error = %d, want about 0.9 × %d", got, grown)
	}
}

func TestMetrics(t *testing.T) {
	reader := metric.NewManualReader()
	mp := metric.NewMeterProvider(metric.WithReader(reader))
	s, err := shed.New(fixed(1), shed.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	done, _ := s.Admit()
	s.Admit() // shed: 1 for none served, stop
	// A handler's 503 without a Retry-After gets one: a refusal.
	h := s.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
	done(shed.Served)
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					k := m.Name
					if v, ok := p.Attributes.Value(shed.PushbackKey); ok {
						k += "/" + v.AsString()
					}
					got[k] += p.Value
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					got[m.Name] = p.Value
				}
			}
		}
	}
	want := map[string]int64{shed.LimitName: 1, shed.InFlightName: 0, shed.AdmittedName: 2, shed.RejectedName + "/stop": 1, shed.RefusedName + "/stop": 1}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
}

func BenchmarkAdmit(b *testing.B) {
	s, _ := shed.New(shed.DefaultConfig())
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if done, _ := s.Admit(); done != nil {
				done(shed.Served)
			}
		}
	})
}

// The idle baseline is the fastest latency of the last 10 to 20 seconds:
// when requests get slower for good (heavier work, not queueing), the
// limit shrinks at first, then, once the fast samples have aged out,
// grows back.
func TestBaselineAges(t *testing.T) {
	clk := clocktest.New()
	c := shed.DefaultConfig()
	c.InitialLimit, c.MaxLimit = 10, 50
	s, _ := shed.New(c, shed.WithClock(clk))
	run := func(rounds int, lat time.Duration) {
		for range rounds {
			var dones []func(shed.Outcome)
			for {
				done, _ := s.Admit()
				if done == nil {
					break
				}
				dones = append(dones, done)
			}
			clk.Advance(lat)
			for _, d := range dones {
				d(shed.Served)
			}
		}
	}
	run(20, 10*time.Millisecond)
	if got := s.Stats().Limit; got != 50 {
		t.Fatalf("limit %d, want the max 50", got)
	}
	run(5, 30*time.Millisecond) // three times slower
	if got := s.Stats().Limit; got >= 25 {
		t.Fatalf("limit %d right after requests got slower, want it well down", got)
	}
	clk.Advance(25 * time.Second) // the 10ms samples age out
	run(200, 30*time.Millisecond)
	if got := s.Stats().Limit; got != 50 {
		t.Fatalf("limit %d once 30ms is the new idle latency, want the max 50", got)
	}
}

// The interceptor's own cost on an admitted call: the handler answers at
// once, with no transport beneath.
func BenchmarkUnaryInterceptor(b *testing.B) {
	s, _ := shed.New(shed.DefaultConfig())
	icpt := s.UnaryServerInterceptor()
	info := &grpc.UnaryServerInfo{FullMethod: "/grpc.testing.TestService/UnaryCall"}
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5000}})
	ctx = grpc.NewContextWithServerTransportStream(ctx, nopStream{})
	handler := func(context.Context, any) (any, error) { return nil, nil }
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := icpt(ctx, nil, info, handler); err != nil {
				b.Fatal(err)
			}
		}
	})
}

type nopStream struct{}

func (nopStream) Method() string               { return "/grpc.testing.TestService/UnaryCall" }
func (nopStream) SetHeader(metadata.MD) error  { return nil }
func (nopStream) SendHeader(metadata.MD) error { return nil }
func (nopStream) SetTrailer(metadata.MD) error { return nil }

// The Handler's own cost on an admitted request.
func BenchmarkHandler(b *testing.B) {
	s, _ := shed.New(shed.DefaultConfig())
	h := s.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		w := httptest.NewRecorder()
		for pb.Next() {
			h.ServeHTTP(w, req)
		}
	})
}
