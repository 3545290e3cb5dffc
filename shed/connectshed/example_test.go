package connectshed_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"sync"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rebound-go/rebound/shed"
	"github.com/rebound-go/rebound/shed/connectshed"
)

// A connect-go v1 server behind a Shedder whose limit is one call (a
// real server starts from shed.DefaultConfig()): while one call is
// served, another is shed with CodeUnavailable and the pushback in its
// metadata, which connectretry obeys as grpcretry does.
func ExampleInterceptor() {
	c := shed.DefaultConfig()
	c.InitialLimit, c.MinLimit, c.MaxLimit = 1, 1, 1
	s, err := shed.New(c)
	if err != nil {
		log.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	const greet = "/acme.greet.v1.GreetService/Greet"
	mux := http.NewServeMux()
	mux.Handle(greet, connect.NewUnaryHandler(greet,
		func(_ context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
			if req.Msg.GetValue() == "slow" {
				close(entered)
				<-release
			}
			return connect.NewResponse(wrapperspb.String("hello")), nil
		}, connect.WithInterceptors(connectshed.Interceptor(s))))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](srv.Client(), srv.URL+greet)

	var wg sync.WaitGroup
	wg.Go(func() { _, _ = client.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("slow"))) })
	<-entered
	_, err = client.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("second")))
	var ce *connect.Error
	if errors.As(err, &ce) {
		fmt.Println(ce.Code(), "with pushback:", ce.Meta().Get("grpc-retry-pushback-ms") != "")
	}
	close(release)
	wg.Wait()
	st := s.Stats()
	fmt.Println(st.Admitted, "admitted,", st.ShedRetry+st.ShedStop, "shed")
	// Output:
	// unavailable with pushback: true
	// 1 admitted, 1 shed
}
