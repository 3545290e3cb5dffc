package httpretry_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/httpretry"
)

// A request retried twice, as its trace shows it: the request's span, a
// span per attempt under it with its status code, and the retry decisions
// as events. Here the spans go to an in-memory exporter; in production, to
// the TracerProvider the application exports with, and an
// otelhttp.NewTransport as rebound's base sends each attempt's trace
// context to the server.
func ExampleWithTracerProvider() {
	url, stop := serveFlaky(2)
	defer stop()

	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())

	client := &http.Client{Transport: httpretry.NewTransport(nil,
		httpretry.WithBackoff(rebound.Backoff{Initial: time.Millisecond, Max: 10 * time.Millisecond, Multiplier: 2}),
		httpretry.WithTracerProvider(tp),
	)}
	defer client.CloseIdleConnections()
	resp, err := client.Get(url)
	if err != nil {
		log.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	for _, s := range exp.GetSpans() { // in the order they ended
		code := ""
		for _, kv := range s.Attributes {
			if kv.Key == "http.response.status_code" {
				code = kv.Value.String()
			}
		}
		fmt.Println(s.Name, code)
		for _, e := range s.Events {
			fmt.Println("  event:", e.Name)
		}
	}
	// Output:
	// Attempt.GET 503
	// Attempt.GET 503
	// Attempt.GET 200
	// GET 200
	//   event: backoff started
	//   event: backoff started
}
