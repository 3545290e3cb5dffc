package connectretry_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rebound-go/rebound/connectretry"
	"github.com/rebound-go/rebound/serviceconfig"
)

func ExampleNewInterceptor() {
	// A greeter that is unavailable for its first two calls.
	const greet = "/acme.greet.v1.GreetService/Greet"
	var calls atomic.Int32
	mux := http.NewServeMux()
	mux.Handle(greet, connect.NewUnaryHandler(greet,
		func(_ context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
			if calls.Add(1) <= 2 {
				return nil, connect.NewError(connect.CodeUnavailable, errors.New("warming up"))
			}
			return connect.NewResponse(wrapperspb.String("hello, " + req.Msg.GetValue())), nil
		}))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	cfg, err := serviceconfig.Parse([]byte(`{
	  "methodConfig": [{
	    "name": [{"service": "acme.greet.v1.GreetService"}],
	    "retryPolicy": {
	      "maxAttempts": 4,
	      "initialBackoff": "0.01s",
	      "maxBackoff": "0.1s",
	      "backoffMultiplier": 2,
	      "retryableStatusCodes": ["unavailable"]
	    }
	  }],
	  "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}
	}`))
	if err != nil {
		panic(err)
	}
	// The one line: rebound's interceptor on a connect client.
	client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](srv.Client(), srv.URL+greet,
		connect.WithInterceptors(connectretry.NewInterceptor(cfg)))

	var attempts int
	ctx := connectretry.CountAttempts(context.Background(), &attempts)
	resp, err := client.CallUnary(ctx, connect.NewRequest(wrapperspb.String("rebound")))
	if err != nil {
		panic(err)
	}
	fmt.Println(resp.Msg.GetValue(), "after", attempts, "attempts")
	// Output: hello, rebound after 3 attempts
}

func ExampleAIP194() {
	cfg, err := connectretry.AIP194(
		connect.Spec{Procedure: "/library.v1.Library/GetBook", StreamType: connect.StreamTypeUnary, IdempotencyLevel: connect.IdempotencyNoSideEffects},
		connect.Spec{Procedure: "/library.v1.Library/DeleteBook", StreamType: connect.StreamTypeUnary, IdempotencyLevel: connect.IdempotencyIdempotent},
		connect.Spec{Procedure: "/library.v1.Library/CreateBook", StreamType: connect.StreamTypeUnary},
		connect.Spec{Procedure: "/library.v1.Library/WatchBooks", StreamType: connect.StreamTypeServer, IdempotencyLevel: connect.IdempotencyNoSideEffects},
	)
	if err != nil {
		panic(err)
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

func ExampleInterceptor_Stats() {
	// A greeter that is unavailable for its first two calls.
	const greet = "/acme.greet.v1.GreetService/Greet"
	var calls atomic.Int32
	mux := http.NewServeMux()
	mux.Handle(greet, connect.NewUnaryHandler(greet,
		func(_ context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
			if calls.Add(1) <= 2 {
				return nil, connect.NewError(connect.CodeUnavailable, errors.New("warming up"))
			}
			return connect.NewResponse(wrapperspb.String("hello, " + req.Msg.GetValue())), nil
		}))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	cfg, err := serviceconfig.Parse([]byte(`{"methodConfig": [{
	  "name": [{"service": "acme.greet.v1.GreetService"}],
	  "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.01s", "maxBackoff": "0.1s",
	    "backoffMultiplier": 2, "retryableStatusCodes": ["unavailable"]}
	}]}`))
	if err != nil {
		panic(err)
	}
	// Add connectretry.WithMeterProvider for OpenTelemetry metrics, and
	// connectretry.WithLogger for a debug log of each decision.
	interceptor, err := connectretry.New(cfg)
	if err != nil {
		panic(err)
	}
	client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](srv.Client(), srv.URL+greet,
		connect.WithInterceptors(interceptor))
	if _, err := client.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("rebound"))); err != nil {
		panic(err)
	}

	s := interceptor.Stats()[greet]
	fmt.Println(s.Calls, "call,", s.Retries.Attempts, "retries,", s.Retries.Failed, "failed")
	fmt.Println("first retries:", s.Retries.Histogram[0], "second retries:", s.Retries.Histogram[1])
	// Output:
	// 1 call, 2 retries, 1 failed
	// first retries: 1 second retries: 1
}
