package httpretry_test

import (
	"context"
	"net/http"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/httpretry"
	"github.com/rebound-go/rebound/internal/clocktest"
)

// flaky answers 503 to every other request when fails is set, else 200,
// without the network.
type flaky struct{ fails, failNext *bool }

func (f flaky) RoundTrip(req *http.Request) (*http.Response, error) {
	code := http.StatusOK
	if *f.failNext {
		code = http.StatusServiceUnavailable
	}
	*f.failNext = !*f.failNext && *f.fails
	return &http.Response{StatusCode: code, Body: http.NoBody, Request: req}, nil
}

// BenchmarkTracing is the Transport's cost with tracing off and on, for a
// request that succeeds at once and one whose first attempt gets a 503:
// the difference between the two, less the untraced difference, is the
// cost of one more attempt's span. The base answers at once, backoff does
// not wait (an instant clock) and there is no budget, so the figures are
// the Transport's own. "on" is the OpenTelemetry SDK sampling every span,
// with no exporter.
func BenchmarkTracing(b *testing.B) {
	for _, tc := range []struct {
		name  string
		fails bool
	}{
		{"success", false},
		{"retried", true},
	} {
		for _, traced := range []bool{false, true} {
			name := tc.name + "/off"
			opts := []httpretry.Option{httpretry.WithClock(clocktest.Instant()),
				httpretry.WithBudgetPerHost(func(string) rebound.Budget { return nil })}
			if traced {
				name = tc.name + "/on"
				tp := sdktrace.NewTracerProvider()
				b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
				opts = append(opts, httpretry.WithTracerProvider(tp))
			}
			b.Run(name, func(b *testing.B) {
				fails, failNext := tc.fails, tc.fails
				rt, err := httpretry.New(flaky{&fails, &failNext}, opts...)
				if err != nil {
					b.Fatal(err)
				}
				req, _ := http.NewRequest(http.MethodGet, "http://example.test/", nil)
				b.ReportAllocs()
				for b.Loop() {
					resp, err := rt.RoundTrip(req)
					if err != nil || resp.StatusCode != http.StatusOK {
						b.Fatal(resp, err)
					}
					resp.Body.Close()
				}
			})
		}
	}
}
