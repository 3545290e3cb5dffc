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
	"github.com/rebound-go/rebound/serviceconfig"
)

// A hung attempt is cut after the per-attempt timeout and retried within
// the call's deadline, and one call can narrow its policy: here, to a
// single attempt.
func ExampleWithPerAttemptTimeout() {
	var calls atomic.Int32
	mux := http.NewServeMux()
	mux.Handle(greet, connect.NewUnaryHandler(greet,
		func(ctx context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
			if n := calls.Add(1); n == 1 || n == 3 {
				<-ctx.Done() // stuck; the per-attempt deadline came with the request
				return nil, connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
			}
			return connect.NewResponse(wrapperspb.String("hello, " + req.Msg.GetValue())), nil
		}))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	cfg, err := serviceconfig.Parse([]byte(serviceConfigJSON))
	if err != nil {
		log.Fatal(err)
	}
	interceptor, err := connectretry.New(cfg, connectretry.WithPerAttemptTimeout(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](srv.Client(), srv.URL+greet,
		connect.WithInterceptors(interceptor))

	var n int
	ctx := connectretry.CountAttempts(context.Background(), &n)
	resp, err := client.CallUnary(ctx, connect.NewRequest(wrapperspb.String("rebound")))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.Msg.GetValue(), "after", n, "attempts")

	ctx = connectretry.Override(ctx, rebound.Override{MaxAttempts: 1})
	_, err = client.CallUnary(ctx, connect.NewRequest(wrapperspb.String("rebound")))
	fmt.Println(connect.CodeOf(err), "after", n, "attempt; per-attempt timeout:", errors.Is(err, rebound.ErrAttemptTimeout))
	// Output:
	// hello, rebound after 2 attempts
	// deadline_exceeded after 1 attempt; per-attempt timeout: true
}
