package connectretry_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"sync/atomic"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"connectrpc.com/connect/v2/connectinprocess"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rebound-go/rebound"
	connectretry "github.com/rebound-go/rebound/connectretry/v2"
	"github.com/rebound-go/rebound/serviceconfig"
)

// greet is the Spec of the examples' greeter, as generated code would
// have it.
var greet = connect.Spec{
	Procedure:  "/acme.greet.v1.GreetService/Greet",
	StreamType: connect.StreamTypeUnary,
}

// greeter returns a connect.Server whose greeter is unavailable for its
// first `failures` calls.
func greeter(failures int32) *connect.Server {
	var calls atomic.Int32
	server := connect.NewServer()
	server.Register(connect.Method{Spec: greet, Handler: func(_ context.Context, _ connect.Spec, stream connect.ServerStream) error {
		var req wrapperspb.StringValue
		if err := stream.Receive(&req); err != nil {
			return err
		}
		if calls.Add(1) <= failures {
			return connect.NewError(connect.CodeUnavailable, "warming up")
		}
		return stream.Send(wrapperspb.String("hello, " + req.GetValue()))
	}})
	return server
}

// serviceConfigJSON is the A6 service config of the examples: retry the
// greeter's calls on UNAVAILABLE, up to 4 attempts. (It has no
// retryThrottling: a throttle is kept per server name for the whole
// process, and every in-process server's is "", so the examples' failed
// calls would drain one throttle together; see WithServerName.)
const serviceConfigJSON = `{
  "methodConfig": [{
    "name": [{"service": "acme.greet.v1.GreetService"}],
    "retryPolicy": {
      "maxAttempts": 4,
      "initialBackoff": "0.01s",
      "maxBackoff": "0.1s",
      "backoffMultiplier": 2,
      "retryableStatusCodes": ["unavailable"]
    }
  }]
}`

// The one line that installs rebound on a connect v2 client, over HTTP,
// and how to count a call's attempts.
func ExampleNewInterceptor() {
	mux := http.NewServeMux()
	connecthttp.Mount(mux, greeter(2))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	httpClient, url := srv.Client(), srv.URL

	cfg, err := serviceconfig.Parse([]byte(serviceConfigJSON))
	if err != nil {
		log.Fatal(err) // every problem, each named by its JSON path
	}
	client := connect.NewClient(connecthttp.NewTransport(httpClient, url),
		connectretry.NewInterceptor(cfg).WrapClient)

	var attempts int
	ctx := connectretry.CountAttempts(context.Background(), &attempts)
	var res wrapperspb.StringValue
	if err := client.CallUnary(ctx, greet, wrapperspb.String("rebound"), &res); err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.GetValue(), "after", attempts, "attempts")
	// Output: hello, rebound after 3 attempts
}

// A call that fails says why retrying stopped, and unwraps to the last
// attempt's *connect.Error. Here the client calls the server in process.
func ExampleNew() {
	server := greeter(10)
	cfg, err := serviceconfig.Parse([]byte(serviceConfigJSON))
	if err != nil {
		log.Fatal(err)
	}

	retries, err := connectretry.New(cfg, connectretry.WithMaxAttemptsCap(3))
	if err != nil {
		log.Fatal(err) // the first invalid option, by name
	}
	client := connect.NewClient(connectinprocess.New(server), retries.WrapClient)

	var res wrapperspb.StringValue
	err = client.CallUnary(context.Background(), greet, wrapperspb.String("rebound"), &res)
	fmt.Println(err)
	fmt.Println(connect.CodeOf(err)) // the last attempt's code
	var gaveUp *rebound.Error
	if errors.As(err, &gaveUp) {
		fmt.Println(gaveUp.Attempts, "attempts:", gaveUp.Reason)
	}
	fmt.Println(errors.Is(err, rebound.ErrAttemptsExhausted))
	// Output:
	// connectretry: gave up after 3 attempts (attempts exhausted): unavailable: warming up
	// unavailable
	// 3 attempts: rebound: attempts exhausted
	// true
}

func ExampleAIP194() {
	cfg, err := connectretry.AIP194(
		connect.Spec{Procedure: "/library.v1.Library/GetBook", StreamType: connect.StreamTypeUnary, IdempotencyLevel: connect.IdempotencyNoSideEffects},
		connect.Spec{Procedure: "/library.v1.Library/DeleteBook", StreamType: connect.StreamTypeUnary, IdempotencyLevel: connect.IdempotencyIdempotent},
		connect.Spec{Procedure: "/library.v1.Library/CreateBook", StreamType: connect.StreamTypeUnary},
		connect.Spec{Procedure: "/library.v1.Library/WatchBooks", StreamType: connect.StreamTypeServer, IdempotencyLevel: connect.IdempotencyNoSideEffects},
	)
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range []string{"GetBook", "DeleteBook", "CreateBook", "WatchBooks"} {
		mc := cfg.MethodConfig("/library.v1.Library/" + m)
		if mc == nil {
			fmt.Println(m, "is made once")
			continue
		}
		fmt.Println(m, "retries", mc.RetryPolicy.RetryableStatusCodes, "up to", mc.RetryPolicy.MaxAttempts, "attempts")
	}
	// Output:
	// GetBook retries [UNAVAILABLE] up to 5 attempts
	// DeleteBook retries [UNAVAILABLE] up to 5 attempts
	// CreateBook is made once
	// WatchBooks is made once
}

// Whether AIP-194 lets a procedure be retried, from the Spec that
// generated code gives every call.
func ExampleIdempotent() {
	fmt.Println(connectretry.Idempotent(connect.Spec{StreamType: connect.StreamTypeUnary, IdempotencyLevel: connect.IdempotencyIdempotent}))
	fmt.Println(connectretry.Idempotent(connect.Spec{StreamType: connect.StreamTypeUnary}))
	// Output:
	// true
	// false
}

// Where the statistics of the calls are.
func ExampleInterceptor_Stats() {
	server := greeter(2)
	cfg, err := serviceconfig.Parse([]byte(serviceConfigJSON))
	if err != nil {
		log.Fatal(err)
	}

	// Add connectretry.WithMeterProvider for OpenTelemetry metrics, and
	// connectretry.WithLogger for a debug log of each decision.
	interceptor, err := connectretry.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	client := connect.NewClient(connectinprocess.New(server), interceptor.WrapClient)
	var res wrapperspb.StringValue
	if err := client.CallUnary(context.Background(), greet, wrapperspb.String("rebound"), &res); err != nil {
		log.Fatal(err)
	}

	s := interceptor.Stats()["/acme.greet.v1.GreetService/Greet"]
	fmt.Println(s.Calls, "call,", s.Retries.Attempts, "retries,", s.Retries.Failed, "failed")
	// Output: 1 call, 2 retries, 1 failed
}

// An invalid option, given to NewInterceptor, is reported by Err and by
// every call, which fails without reaching the server.
func ExampleInterceptor_Err() {
	interceptor := connectretry.NewInterceptor(nil, connectretry.WithMaxAttemptsCap(0))
	fmt.Println(interceptor.Err())

	client := connect.NewClient(connectinprocess.New(greeter(0)), interceptor.WrapClient)
	var res wrapperspb.StringValue
	err := client.CallUnary(context.Background(), greet, wrapperspb.String("rebound"), &res)
	fmt.Println(connect.CodeOf(err))
	// Output:
	// connectretry: WithMaxAttemptsCap: n must be >= 1, got 0
	// internal
}

// A handler learns how many attempts of its call came before this one.
func ExamplePreviousAttempts() {
	var calls atomic.Int32
	server := connect.NewServer()
	server.Register(connect.Method{Spec: greet, Handler: func(ctx context.Context, _ connect.Spec, stream connect.ServerStream) error {
		var req wrapperspb.StringValue
		if err := stream.Receive(&req); err != nil {
			return err
		}
		fmt.Println("attempts before this one:", connectretry.PreviousAttempts(ctx))
		if calls.Add(1) == 1 {
			return connect.NewError(connect.CodeUnavailable, "warming up")
		}
		return stream.Send(wrapperspb.String("hello"))
	}})
	cfg, err := serviceconfig.Parse([]byte(serviceConfigJSON))
	if err != nil {
		log.Fatal(err)
	}
	client := connect.NewClient(connectinprocess.New(server), connectretry.NewInterceptor(cfg).WrapClient)
	var res wrapperspb.StringValue
	if err := client.CallUnary(context.Background(), greet, wrapperspb.String("rebound"), &res); err != nil {
		log.Fatal(err)
	}
	// Output:
	// attempts before this one: 0
	// attempts before this one: 1
}

// One call narrows its policy: here, to a single attempt.
func ExampleOverride() {
	server := greeter(10)
	cfg, err := serviceconfig.Parse([]byte(serviceConfigJSON))
	if err != nil {
		log.Fatal(err)
	}
	client := connect.NewClient(connectinprocess.New(server), connectretry.NewInterceptor(cfg).WrapClient)

	var attempts int
	ctx := connectretry.CountAttempts(context.Background(), &attempts)
	ctx = connectretry.Override(ctx, rebound.Override{MaxAttempts: 1})
	var res wrapperspb.StringValue
	err = client.CallUnary(ctx, greet, wrapperspb.String("rebound"), &res)
	fmt.Println(connect.CodeOf(err), "after", attempts, "attempt")
	// Output: unavailable after 1 attempt
}
