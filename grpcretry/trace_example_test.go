package grpcretry_test

import (
	"context"
	"fmt"
	"log"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/serviceconfig"
)

// A call retried twice, as its trace shows it: the call's span, a span per
// attempt under it with its status, and the retry decisions as events.
// Here the spans go to an in-memory exporter; in production, to the
// TracerProvider the application exports with, and otelgrpc.NewClientHandler
// beside rebound sends each attempt's trace context to the server.
func ExampleWithTracerProvider() {
	target, stop := serve(&flakyServer{failures: 2})
	defer stop()

	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())

	cfg, err := serviceconfig.Parse([]byte(serviceConfigJSON))
	if err != nil {
		log.Fatal(err)
	}
	opts := grpcretry.DialOptions(cfg, grpcretry.WithTracerProvider(tp))
	conn, err := grpc.NewClient(target, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	if _, err := testpb.NewTestServiceClient(conn).UnaryCall(context.Background(), &testpb.SimpleRequest{}); err != nil {
		log.Fatal(err)
	}

	for _, s := range exp.GetSpans() { // in the order they ended
		status := ""
		for _, kv := range s.Attributes {
			if kv.Key == "rpc.response.status_code" {
				status = kv.Value.AsString()
			}
		}
		fmt.Println(s.Name, status)
		for _, e := range s.Events {
			fmt.Println("  event:", e.Name)
		}
	}
	// Output:
	// Attempt.grpc.testing.TestService.UnaryCall UNAVAILABLE
	// Attempt.grpc.testing.TestService.UnaryCall UNAVAILABLE
	// Attempt.grpc.testing.TestService.UnaryCall OK
	// Sent.grpc.testing.TestService.UnaryCall OK
	//   event: backoff started
	//   event: backoff started
}
