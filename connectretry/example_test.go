package connectretry_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"sync/atomic"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/connectretry"
	"github.com/rebound-go/rebound/internal/loopback"
	"github.com/rebound-go/rebound/serviceconfig"
)

// greet is the procedure of the examples' greeter.
const greet = "/acme.greet.v1.GreetService/Greet"

// serveGreeter starts a greeter that is unavailable for its first
// `failures` calls, and returns its URL and a function that stops it. The
// examples' A6 throttles are process-wide per server name, here the
// server's address, so every greeter gets an address no earlier one had:
// on an earlier example's port an example would find its tokens spent.
func serveGreeter(failures int32) (url string, stop func()) {
	var calls atomic.Int32
	mux := http.NewServeMux()
	mux.Handle(greet, connect.NewUnaryHandler(greet,
		func(_ context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
			if calls.Add(1) <= failures {
				return nil, connect.NewError(connect.CodeUnavailable, errors.New("warming up"))
			}
			return connect.NewResponse(wrapperspb.String("hello, " + req.Msg.GetValue())), nil
		}))
	srv := httptest.NewUnstartedServer(mux)
	srv.Listener.Close()
	srv.Listener = loopback.Listen()
	srv.Start()
	return srv.URL, srv.Close
}

// serviceConfigJSON is the A6 service config of the examples: retry the
// greeter's calls on UNAVAILABLE, up to 4 attempts, and throttle retries
// when many calls fail.
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
  }],
  "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}
}`

// The one line that installs rebound on a connect client, and how to
// count a call's attempts.
func ExampleNewInterceptor() {
	url, stop := serveGreeter(2)
	defer stop()
	httpClient := http.DefaultClient

	cfg, err := serviceconfig.Parse([]byte(serviceConfigJSON))
	if err != nil {
		log.Fatal(err) // every problem, each named by its JSON path
	}
	client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](httpClient, url+greet,
		connect.WithInterceptors(connectretry.NewInterceptor(cfg)))

	var attempts int
	ctx := connectretry.CountAttempts(context.Background(), &attempts)
	resp, err := client.CallUnary(ctx, connect.NewRequest(wrapperspb.String("rebound")))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.Msg.GetValue(), "after", attempts, "attempts")
	// Output: hello, rebound after 3 attempts
}

// A call that fails returns the last attempt's *connect.Error, and says
// why retrying stopped.
func ExampleNew() {
	url, stop := serveGreeter(10)
	defer stop()
	httpClient := http.DefaultClient
	cfg, err := serviceconfig.Parse([]byte(serviceConfigJSON))
	if err != nil {
		log.Fatal(err)
	}

	retries, err := connectretry.New(cfg, connectretry.WithMaxAttemptsCap(3))
	if err != nil {
		log.Fatal(err) // the first invalid option, by name
	}
	client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](httpClient, url+greet,
		connect.WithInterceptors(retries))

	_, err = client.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("rebound")))
	fmt.Println(connect.CodeOf(err)) // the last attempt's code
	var gaveUp *rebound.Error
	if errors.As(err, &gaveUp) {
		fmt.Println(gaveUp.Attempts, "attempts:", gaveUp.Reason)
	}
	fmt.Println(errors.Is(err, rebound.ErrAttemptsExhausted))
	// Output:
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

// Where the statistics of the calls are.
func ExampleInterceptor_Stats() {
	url, stop := serveGreeter(2)
	defer stop()
	httpClient := http.DefaultClient
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
	client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](httpClient, url+greet,
		connect.WithInterceptors(interceptor))
	if _, err := client.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("rebound"))); err != nil {
		log.Fatal(err)
	}

	s := interceptor.Stats()["/acme.greet.v1.GreetService/Greet"]
	fmt.Println(s.Calls, "call,", s.Retries.Attempts, "retries,", s.Retries.Failed, "failed")
	fmt.Println("first retries:", s.Retries.Histogram[0], "second retries:", s.Retries.Histogram[1])
	// Output:
	// 1 call, 2 retries, 1 failed
	// first retries: 1 second retries: 1
}
