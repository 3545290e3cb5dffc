package connectshed_test

import (
	"context"
	"fmt"
	"log"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connectinprocess"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rebound-go/rebound/shed"
	"github.com/rebound-go/rebound/shed/connectshed"
)

// A connect v2 server behind a Shedder whose limit is one call: while one
// call is served, another is shed with CodeUnavailable and a pushback
// trailer, which connectretry/v2 obeys.
func ExampleInterceptor() {
	c := shed.DefaultConfig()
	c.InitialLimit, c.MinLimit, c.MaxLimit = 1, 1, 1
	s, err := shed.New(c)
	if err != nil {
		log.Fatal(err)
	}
	server := connect.NewServer(connectshed.Interceptor(s))
	entered, release := make(chan struct{}), make(chan struct{})
	server.Register(connect.Method{Spec: greet, Handler: func(_ context.Context, _ connect.Spec, st connect.ServerStream) error {
		var req wrapperspb.StringValue
		if err := st.Receive(&req); err != nil {
			return err
		}
		if req.GetValue() == "slow" {
			close(entered)
			<-release
		}
		return st.Send(wrapperspb.String("hello, " + req.GetValue()))
	}})
	client := connect.NewClient(connectinprocess.New(server))

	done := make(chan struct{})
	go func() {
		defer close(done)
		var res wrapperspb.StringValue
		if err := client.CallUnary(context.Background(), greet, wrapperspb.String("slow"), &res); err != nil {
			log.Print(err)
		}
	}()
	<-entered
	ctx, info := connect.NewClientContext(context.Background())
	var res wrapperspb.StringValue
	err = client.CallUnary(ctx, greet, wrapperspb.String("rebound"), &res)
	fmt.Println(connect.CodeOf(err), "with pushback:", info.ResponseTrailer().Get("Grpc-Retry-Pushback-Ms") != "")
	close(release)
	<-done
	st := s.Stats()
	fmt.Println(st.Admitted, "admitted,", st.ShedRetry+st.ShedStop, "shed")
	// Output:
	// unavailable with pushback: true
	// 1 admitted, 1 shed
}
