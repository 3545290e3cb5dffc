package connectretry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connectinprocess"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rebound-go/rebound"
	connectretry "github.com/rebound-go/rebound/connectretry/v2"
	"github.com/rebound-go/rebound/serviceconfig"
)

// A hung attempt is cut after the per-attempt timeout and retried within
// the call's deadline.
func ExampleWithPerAttemptTimeout() {
	var calls atomic.Int32
	server := connect.NewServer()
	server.Register(connect.Method{Spec: greet, Handler: func(ctx context.Context, _ connect.Spec, stream connect.ServerStream) error {
		var req wrapperspb.StringValue
		if err := stream.Receive(&req); err != nil {
			return err
		}
		if calls.Add(1) == 1 {
			<-ctx.Done() // stuck; the per-attempt deadline is the handler's too
			return ctx.Err()
		}
		return stream.Send(wrapperspb.String("hello, " + req.GetValue()))
	}})
	cfg, err := serviceconfig.Parse([]byte(serviceConfigJSON))
	if err != nil {
		log.Fatal(err)
	}
	interceptor, err := connectretry.New(cfg, connectretry.WithPerAttemptTimeout(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	client := connect.NewClient(connectinprocess.New(server), interceptor.WrapClient)

	var n int
	ctx := connectretry.CountAttempts(context.Background(), &n)
	var res wrapperspb.StringValue
	if err := client.CallUnary(ctx, greet, wrapperspb.String("rebound"), &res); err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.GetValue(), "after", n, "attempts")
	// Output: hello, rebound after 2 attempts
}

// A client stream is retried as a unary call is: each new attempt is sent
// the messages the application sent so far, again, then its CloseSend.
func ExampleInterceptor_WrapClient_clientStream() {
	sum := connect.Spec{Procedure: "/acme.calc.v1.CalcService/Sum", StreamType: connect.StreamTypeClient}
	var calls atomic.Int32
	server := connect.NewServer()
	server.Register(connect.Method{Spec: sum, Handler: func(_ context.Context, _ connect.Spec, stream connect.ServerStream) error {
		var got []string
		for {
			var m wrapperspb.StringValue
			if err := stream.Receive(&m); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return err
			}
			got = append(got, m.GetValue())
		}
		fmt.Println("attempt", calls.Add(1), "received", got)
		if calls.Load() == 1 {
			return connect.NewError(connect.CodeUnavailable, "restarting")
		}
		return stream.Send(wrapperspb.String(strings.Join(got, "+")))
	}})
	cfg, err := serviceconfig.Parse([]byte(`{"methodConfig": [{
		"name": [{"service": "acme.calc.v1.CalcService"}],
		"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.1s",
			"backoffMultiplier": 2, "retryableStatusCodes": ["unavailable"]}}]}`))
	if err != nil {
		log.Fatal(err)
	}
	client := connect.NewClient(connectinprocess.New(server), connectretry.NewInterceptor(cfg).WrapClient)

	stream, err := client.CallClientStream(context.Background(), sum)
	if err != nil {
		log.Fatal(err)
	}
	for _, v := range []string{"1", "2", "3"} {
		if err := stream.Send(wrapperspb.String(v)); err != nil {
			log.Fatal(err)
		}
	}
	if err := stream.CloseSend(); err != nil {
		log.Fatal(err)
	}
	var res wrapperspb.StringValue
	if err := stream.Receive(&res); err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.GetValue())
	// Output:
	// attempt 1 received [1 2 3]
	// attempt 2 received [1 2 3]
	// 1+2+3
}

// Calling a rate-limited service: its first ResourceExhausted starts the
// limit; from then on every call waits for its turn, and one that could
// not get it before its deadline fails at once, without reaching the
// server, with CodeResourceExhausted.
func ExampleWithAdaptiveRateLimit() {
	var calls atomic.Int32
	server := connect.NewServer()
	server.Register(connect.Method{Spec: greet, Handler: func(ctx context.Context, _ connect.Spec, stream connect.ServerStream) error {
		var req wrapperspb.StringValue
		if err := stream.Receive(&req); err != nil {
			return err
		}
		if calls.Add(1) == 1 {
			info, _ := connect.CallInfoForServerContext(ctx)
			info.ResponseTrailer().Set("grpc-retry-pushback-ms", "1000")
			return connect.NewError(connect.CodeResourceExhausted, "quota exceeded")
		}
		return stream.Send(wrapperspb.String("hello, " + req.GetValue()))
	}})

	interceptor, err := connectretry.New(nil, connectretry.WithServerName("greeter.example"),
		connectretry.WithAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{MinRate: 10}))
	if err != nil {
		log.Fatal(err)
	}
	client := connect.NewClient(connectinprocess.New(server), interceptor.WrapClient)
	call := func(timeout time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		var res wrapperspb.StringValue
		err := client.CallUnary(ctx, greet, wrapperspb.String("rebound"), &res)
		switch {
		case errors.Is(err, rebound.ErrRateLimited):
			fmt.Println(connect.CodeOf(err), "not sent: its turn would come after its deadline")
		case err != nil:
			fmt.Println(connect.CodeOf(err))
		default:
			fmt.Println("ok")
		}
	}
	call(time.Second)           // the throttle: the limit starts at 10 calls/s
	call(10 * time.Millisecond) // its turn is 100ms away
	call(time.Second)           // waits for its turn
	fmt.Println(calls.Load(), "calls reached the server")
	// Output:
	// resource_exhausted
	// resource_exhausted not sent: its turn would come after its deadline
	// ok
	// 2 calls reached the server
}

// Calling a service that publishes its quota in its response headers:
// the first answer says nothing is left until a reset 30s away (the IETF
// RateLimit field), so the next call, whose deadline is sooner, is not
// sent, before the server has refused anything.
func ExampleWithRateLimitQuota() {
	var calls atomic.Int32
	server := connect.NewServer()
	server.Register(connect.Method{Spec: greet, Handler: func(ctx context.Context, _ connect.Spec, stream connect.ServerStream) error {
		var req wrapperspb.StringValue
		if err := stream.Receive(&req); err != nil {
			return err
		}
		calls.Add(1)
		info, _ := connect.CallInfoForServerContext(ctx)
		info.ResponseHeader().Set("RateLimit", `"default";r=0;t=30`)
		return stream.Send(wrapperspb.String("hello, " + req.GetValue()))
	}})

	interceptor, err := connectretry.New(nil, connectretry.WithServerName("quota.example"), connectretry.WithRateLimitQuota())
	if err != nil {
		log.Fatal(err)
	}
	client := connect.NewClient(connectinprocess.New(server), interceptor.WrapClient)
	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		var res wrapperspb.StringValue
		err := client.CallUnary(ctx, greet, wrapperspb.String("rebound"), &res)
		cancel()
		switch {
		case errors.Is(err, rebound.ErrRateLimited):
			fmt.Println(connect.CodeOf(err), "not sent: the quota is spent until after its deadline")
		case err != nil:
			fmt.Println(connect.CodeOf(err))
		default:
			fmt.Println("ok")
		}
	}
	fmt.Println(calls.Load(), "call reached the server")
	// Output:
	// ok
	// resource_exhausted not sent: the quota is spent until after its deadline
	// 1 call reached the server
}

// A call retried twice, as its trace shows it: the call's span, a span per
// attempt under it (failed attempts with their code), and the retry
// decisions as events. Here the spans go to an in-memory exporter; in
// production, to the TracerProvider the application exports with, and an
// otelconnect interceptor installed after rebound's sends each attempt's
// trace context to the server.
func ExampleWithTracerProvider() {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())

	cfg, err := serviceconfig.Parse([]byte(serviceConfigJSON))
	if err != nil {
		log.Fatal(err)
	}
	client := connect.NewClient(connectinprocess.New(greeter(2)),
		connectretry.NewInterceptor(cfg, connectretry.WithTracerProvider(tp)).WrapClient)
	var res wrapperspb.StringValue
	if err := client.CallUnary(context.Background(), greet, wrapperspb.String("ada"), &res); err != nil {
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
