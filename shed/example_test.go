package shed_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rebound-go/rebound/shed"
)

// busy holds its first request until release is closed; later requests
// are answered at once.
type busy struct {
	testpb.UnimplementedTestServiceServer
	once             sync.Once
	entered, release chan struct{}
}

func newBusy() *busy { return &busy{entered: make(chan struct{}), release: make(chan struct{})} }

// hold blocks the first caller.
func (b *busy) hold() {
	first := false
	b.once.Do(func() { first = true })
	if first {
		close(b.entered)
		<-b.release
	}
}

func (b *busy) UnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	b.hold()
	return &testpb.SimpleResponse{}, nil
}

// oneAtATime is a Shedder whose limit is fixed at 1, so that the examples
// are deterministic; a real server starts from shed.DefaultConfig().
func oneAtATime() *shed.Shedder {
	c := shed.DefaultConfig()
	c.InitialLimit, c.MinLimit, c.MaxLimit = 1, 1, 1
	s, err := shed.New(c)
	if err != nil {
		log.Fatal(err)
	}
	return s
}

func ExampleShedder_UnaryServerInterceptor() {
	s := oneAtATime()
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(s.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(s.StreamServerInterceptor()))
	b := newBusy()
	testpb.RegisterTestServiceServer(srv, b)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := testpb.NewTestServiceClient(conn)

	// The first call takes the only slot.
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = client.UnaryCall(context.Background(), &testpb.SimpleRequest{}) })
	<-b.entered
	// The second is shed at once. Half of the last second's calls were
	// shed, far more than a tenth: the pushback says not to retry.
	var trailer metadata.MD
	_, err = client.UnaryCall(context.Background(), &testpb.SimpleRequest{}, grpc.Trailer(&trailer))
	fmt.Println(status.Code(err), trailer["grpc-retry-pushback-ms"])
	close(b.release)
	wg.Wait()
	// Output: Unavailable [-1]
}

func ExampleShedder_ConnectInterceptor() {
	s := oneAtATime()
	b := newBusy()
	const greet = "/acme.greet.v1.GreetService/Greet"
	mux := http.NewServeMux()
	mux.Handle(greet, connect.NewUnaryHandler(greet,
		func(_ context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
			b.hold()
			return connect.NewResponse(wrapperspb.String("hello")), nil
		}, connect.WithInterceptors(s.ConnectInterceptor())))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](srv.Client(), srv.URL+greet)

	var wg sync.WaitGroup
	wg.Go(func() { _, _ = client.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("first"))) })
	<-b.entered
	_, err := client.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("second")))
	var ce *connect.Error
	if errors.As(err, &ce) {
		// connectretry reads the same pushback as grpcretry.
		fmt.Println(ce.Code(), ce.Meta().Get("grpc-retry-pushback-ms"))
	}
	close(b.release)
	wg.Wait()
	// Output: unavailable -1
}

func ExampleShedder_Handler() {
	s := oneAtATime()
	b := newBusy()
	srv := httptest.NewServer(s.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.hold()
		fmt.Fprintln(w, "done")
	})))
	defer srv.Close()

	var wg sync.WaitGroup
	wg.Go(func() {
		if resp, err := srv.Client().Get(srv.URL); err == nil {
			resp.Body.Close()
		}
	})
	<-b.entered
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	// HTTP has no "don't retry": the Retry-After is longer than httpretry
	// waits, so it gives the 503 back at once.
	fmt.Println(resp.StatusCode, resp.Header.Get("Retry-After"))
	close(b.release)
	wg.Wait()
	// Output: 503 120
}

// A handler that knows the server itself is overloaded says so: the limit
// shrinks by a tenth, and the 503 goes out with the Shedder's Retry-After
// (here "don't retry", 120s: every request of the last second failed so).
func ExampleReportOverload() {
	s, err := shed.New(shed.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The database pool is exhausted: this server is overloaded.
		shed.ReportOverload(r.Context())
		http.Error(w, "pool exhausted", http.StatusServiceUnavailable)
	})))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, resp.Header.Get("Retry-After"), s.Stats().Limit)
	// Output: 503 120 18
}

// The tap handle rejects a call before grpc-go reads it; the pushback
// travels as a google.rpc.RetryInfo, which grpcretry and connectretry
// read. The interceptors still admit what it lets through.
func ExampleShedder_TapHandle() {
	s := oneAtATime()
	srv := grpc.NewServer(grpc.InTapHandle(s.TapHandle()),
		grpc.ChainUnaryInterceptor(s.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(s.StreamServerInterceptor()))
	b := newBusy()
	testpb.RegisterTestServiceServer(srv, b)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := testpb.NewTestServiceClient(conn)

	var wg sync.WaitGroup
	wg.Go(func() { _, _ = client.UnaryCall(context.Background(), &testpb.SimpleRequest{}) })
	<-b.entered
	_, err = client.UnaryCall(context.Background(), &testpb.SimpleRequest{})
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			// Half the last second's calls were shed: don't retry.
			fmt.Println(status.Code(err), ri.GetRetryDelay().AsDuration())
		}
	}
	close(b.release)
	wg.Wait()
	// Output: Unavailable 2m0s
}

// A front door of your own asks Admit, and says how each request ended:
// only a request served whole teaches the Shedder the server's latency.
func ExampleShedder_Admit() {
	s := oneAtATime()
	done, _ := s.Admit()
	if _, pb := s.Admit(); pb.Stop {
		fmt.Println("second request shed: don't retry")
	}
	done(shed.Served)
	if done, _ := s.Admit(); done != nil {
		fmt.Println("third request admitted")
		done(shed.Failed) // the client went away: its latency teaches nothing
	}
	// Output:
	// second request shed: don't retry
	// third request admitted
}
