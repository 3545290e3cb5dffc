package connectretry_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/connectretry"
)

// Calling a rate-limited service: its first ResourceExhausted starts the
// limit; from then on every call waits for its turn, and one that could
// not get it before its deadline fails at once, without reaching the
// server, with CodeResourceExhausted.
func ExampleWithAdaptiveRateLimit() {
	var calls atomic.Int32
	mux := http.NewServeMux()
	mux.Handle(greet, connect.NewUnaryHandler(greet,
		func(_ context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
			if calls.Add(1) == 1 {
				err := connect.NewError(connect.CodeResourceExhausted, errors.New("quota exceeded"))
				err.Meta().Set("grpc-retry-pushback-ms", "1000")
				return nil, err
			}
			return connect.NewResponse(wrapperspb.String("hello, " + req.Msg.GetValue())), nil
		}))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	interceptor, err := connectretry.New(nil, connectretry.WithAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{MinRate: 10}))
	if err != nil {
		log.Fatal(err)
	}
	client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](srv.Client(), srv.URL+greet,
		connect.WithInterceptors(interceptor))
	call := func(timeout time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		_, err := client.CallUnary(ctx, connect.NewRequest(wrapperspb.String("rebound")))
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
