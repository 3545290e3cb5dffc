package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/grpctest"
	"github.com/rebound-go/rebound/serviceconfig"
)

// writeDemoTrace makes one retried and one hedged call through grpcretry
// with tracing on, against a scripted grpc-go server on 127.0.0.1, prints
// each call's trace as a tree to stdout and writes the spans to file as
// one JSON document: an array with an object per span, in the form of the
// OpenTelemetry stdout exporter (stdouttrace). An empty file does nothing.
func writeDemoTrace(ctx context.Context, stdout io.Writer, file string) error {
	if file == "" {
		return nil
	}
	spans, err := tracedCalls(ctx)
	if err != nil {
		return err
	}
	doc, err := json.MarshalIndent(spans, "", "\t")
	if err != nil {
		return err
	}
	if err := os.WriteFile(file, append(doc, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nTraces of one retried and one hedged call (spans in %s):\n", file)
	printTrees(stdout, spans)
	return nil
}

// tracedCalls makes the two calls and returns their spans, in the order
// they ended.
func tracedCalls(ctx context.Context) (tracetest.SpanStubs, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer()
	testpb.RegisterTestServiceServer(srv, scriptedServer{})
	go func() { _ = srv.Serve(lis) }() // until Stop
	defer srv.Stop()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	for _, c := range []struct{ body, policy string }{
		{"retried", `"retryPolicy":{"maxAttempts":3,"initialBackoff":"0.01s","maxBackoff":"0.1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}`},
		{"hedged", `"hedgingPolicy":{"maxAttempts":2,"hedgingDelay":"0.02s","nonFatalStatusCodes":["UNAVAILABLE"]}`},
	} {
		cfg, err := serviceconfig.Parse([]byte(fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],%s}]}`, grpctest.Service, c.policy)))
		if err != nil {
			return nil, err
		}
		client, err := grpcretry.New(cfg, grpcretry.WithTracerProvider(tp))
		if err != nil {
			return nil, err
		}
		cc, err := grpc.NewClient(lis.Addr().String(), append(client.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			return nil, err
		}
		_, err = testpb.NewTestServiceClient(cc).UnaryCall(ctx, grpctest.Request(c.body))
		cc.Close()
		if err != nil {
			return nil, fmt.Errorf("the %s call: %w", c.body, err)
		}
	}
	return exp.GetSpans(), nil
}

// scriptedServer fails the "retried" call's first two attempts, the
// second with pushback, and stalls the "hedged" call's first attempt, so
// that its hedge wins.
type scriptedServer struct {
	testpb.UnimplementedTestServiceServer
}

func (scriptedServer) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	previous := grpcretry.PreviousAttempts(ctx)
	switch string(req.GetPayload().GetBody()) {
	case "retried":
		switch previous {
		case 0:
			return nil, status.Error(codes.Unavailable, "overloaded")
		case 1:
			_ = grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", "20"))
			return nil, status.Error(codes.Unavailable, "overloaded, retry in 20ms")
		}
	case "hedged":
		if previous == 0 {
			t := time.NewTimer(time.Second)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return nil, status.FromContextError(ctx.Err()).Err()
			case <-t.C:
			}
		}
	}
	return &testpb.SimpleResponse{}, nil
}

// printTrees prints each call span with its attempts and events in time
// order, the events of the call marked with "·".
func printTrees(w io.Writer, spans tracetest.SpanStubs) {
	type line struct {
		at   time.Time
		text string
	}
	for _, call := range spans {
		if !strings.HasPrefix(call.Name, "Sent.") {
			continue
		}
		fmt.Fprintf(w, "\n%s  %s  %v\n", call.Name, statusText(call), roundDuration(call.EndTime.Sub(call.StartTime)))
		var lines []line
		for _, s := range spans {
			if s.Parent.SpanID() == call.SpanContext.SpanID() {
				lines = append(lines, line{s.StartTime, fmt.Sprintf("%s previous-rpc-attempts=%s  %s  %v",
					s.Name, attr(s.Attributes, "previous-rpc-attempts"), statusText(s), roundDuration(s.EndTime.Sub(s.StartTime)))})
			}
		}
		for _, e := range call.Events {
			var b strings.Builder
			fmt.Fprintf(&b, "· %s", e.Name)
			for _, kv := range e.Attributes {
				switch kv.Key {
				case "rebound.attempt":
				case "rebound.delay", "rebound.pushback": // seconds
					fmt.Fprintf(&b, " %v", roundDuration(time.Duration(kv.Value.AsFloat64()*float64(time.Second))))
				default:
					fmt.Fprintf(&b, " %s=%s", kv.Key, kv.Value.String())
				}
			}
			if v := attr(e.Attributes, "rebound.attempt"); v != "" {
				fmt.Fprintf(&b, " (attempt %s)", v)
			}
			lines = append(lines, line{e.Time, b.String()})
		}
		slices.SortStableFunc(lines, func(a, b line) int { return a.at.Compare(b.at) })
		for i, l := range lines {
			branch := "├─ "
			if i == len(lines)-1 {
				branch = "└─ "
			}
			fmt.Fprintf(w, "%s%s\n", branch, l.text)
		}
	}
}

// statusText is a span's rpc.response.status_code.
func statusText(s tracetest.SpanStub) string {
	if v := attr(s.Attributes, "rpc.response.status_code"); v != "" {
		return v
	}
	return s.Status.Code.String()
}

func attr(kvs []attribute.KeyValue, key string) string {
	for _, kv := range kvs {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

// roundDuration rounds d to a tenth of a millisecond, which is what the
// demo's timings can tell apart.
func roundDuration(d time.Duration) time.Duration {
	return d.Round(100 * time.Microsecond)
}
