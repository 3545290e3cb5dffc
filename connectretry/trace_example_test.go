package connectretry_test

import (
	"context"
	"fmt"
	"log"
	"net/http"

	"connectrpc.com/connect"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rebound-go/rebound/connectretry"
	"github.com/rebound-go/rebound/serviceconfig"
)

// A call retried twice, as its trace shows it: the call's span, a span per
// attempt under it (failed attempts with their code), and the retry
// decisions as events. Here the spans go to an in-memory exporter; in
// production, to the TracerProvider the application exports with, and an
// otelconnect interceptor installed after rebound's sends each attempt's
// trace context to the server.
func ExampleWithTracerProvider() {
	url, stop := serveGreeter(2)
	defer stop()

	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())

	cfg, err := serviceconfig.Parse([]byte(serviceConfigJSON))
	if err != nil {
		log.Fatal(err)
	}
	client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](http.DefaultClient, url+greet,
		connect.WithInterceptors(connectretry.NewInterceptor(cfg, connectretry.WithTracerProvider(tp))))
	if _, err := client.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("ada"))); err != nil {
		log.Fatal(err)
	}

	for _, s := range exp.GetSpans() { // in the order they ended
		fmt.Println(s.Name, s.Status.Code)
		for _, e := range s.Events {
			fmt.Println("  event:", e.Name)
		}
	}
	// Output:
	// Attempt.acme.greet.v1.GreetService.Greet Error
	// Attempt.acme.greet.v1.GreetService.Greet Error
	// Attempt.acme.greet.v1.GreetService.Greet Unset
	// Sent.acme.greet.v1.GreetService.Greet Unset
	//   event: backoff started
	//   event: backoff started
}
