package shed_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/connectretry"
	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/httpretry"
	"github.com/rebound-go/rebound/internal/grpctest"
	"github.com/rebound-go/rebound/serviceconfig"

	"github.com/rebound-go/rebound/shed/connectshed"
)

const retryUnavailable = `{"methodConfig":[{"name":[{"service":"grpc.testing.TestService"},{"service":"acme.v1.Greeter"}],
 "retryPolicy":{"maxAttempts":5,"initialBackoff":"0.001s","maxBackoff":"0.01s","backoffMultiplier":2,
 "retryableStatusCodes":["UNAVAILABLE"]}}]}`

// rebound's three clients understand the Shedder: told "don't retry" by a
// server far over its limit, each makes one attempt and gives up at once,
// though its policy allows five.
func TestClientsObeyStop(t *testing.T) {
	cfg, err := serviceconfig.Parse([]byte(retryUnavailable))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("grpcretry", func(t *testing.T) {
		s := oneAtATime()
		entered, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		srv := grpctest.Start(t, grpctest.Handlers{Unary: func(context.Context, int, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
			once.Do(func() { close(entered); <-release })
			return &testpb.SimpleResponse{}, nil
		}}, grpc.ChainUnaryInterceptor(s.UnaryServerInterceptor()))
		client := testpb.NewTestServiceClient(srv.Dial(t, grpcretry.DialOptions(cfg)...))
		done := make(chan error, 1)
		go func() { _, err := client.UnaryCall(context.Background(), grpctest.Request("a")); done <- err }()
		<-entered
		var n int
		_, err := client.UnaryCall(context.Background(), grpctest.Request("b"), grpcretry.CountAttempts(&n))
		if status.Code(err) != codes.Unavailable || !errors.Is(err, rebound.ErrPushback) || n != 1 {
			t.Errorf("%d attempts, %v; want 1 ending with ErrPushback", n, err)
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
	t.Run("connectretry", func(t *testing.T) {
		s := oneAtATime()
		b := newBusy()
		const greet = "/acme.v1.Greeter/Greet"
		mux := http.NewServeMux()
		mux.Handle(greet, connect.NewUnaryHandler(greet,
			func(context.Context, *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
				b.hold()
				return connect.NewResponse(wrapperspb.String("hi")), nil
			}, connect.WithInterceptors(connectshed.Interceptor(s))))
		srv := httptest.NewServer(mux)
		defer srv.Close()
		client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](srv.Client(), srv.URL+greet,
			connect.WithInterceptors(connectretry.NewInterceptor(cfg)))
		done := make(chan error, 1)
		go func() {
			_, err := client.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("a")))
			done <- err
		}()
		<-b.entered
		var n int
		_, err := client.CallUnary(connectretry.CountAttempts(context.Background(), &n), connect.NewRequest(wrapperspb.String("b")))
		if connect.CodeOf(err) != connect.CodeUnavailable || !errors.Is(err, rebound.ErrPushback) || n != 1 {
			t.Errorf("%d attempts, %v; want 1 ending with ErrPushback", n, err)
		}
		close(b.release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
	t.Run("httpretry", func(t *testing.T) {
		s := oneAtATime()
		b := newBusy()
		srv := httptest.NewServer(s.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { b.hold() })))
		defer srv.Close()
		client := &http.Client{Transport: httpretry.NewTransport(srv.Client().Transport, httpretry.WithMaxAttempts(5))}
		done := make(chan error, 1)
		go func() {
			resp, err := client.Get(srv.URL)
			if err == nil {
				resp.Body.Close()
			}
			done <- err
		}()
		<-b.entered
		var n int
		req, _ := http.NewRequestWithContext(httpretry.CountAttempts(context.Background(), &n), http.MethodGet, srv.URL, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		// Retry-After 120 is beyond what httpretry waits: the 503 comes
		// back after one attempt.
		if resp.StatusCode != http.StatusServiceUnavailable || n != 1 {
			t.Errorf("%d attempts, status %d; want 1 attempt and the 503", n, resp.StatusCode)
		}
		close(b.release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
