package shed_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rebound-go/rebound/internal/grpctest"
	"github.com/rebound-go/rebound/shed"
)

// waitFor polls cond every millisecond for up to 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// A handler waiting on its client holds no slot: with a limit of 1, a
// stream whose client sends nothing, in each protocol, leaves room for
// a call. When the waiting stream ends, its wait does not count as
// latency.
func TestWaitOnClientHoldsNoSlot(t *testing.T) {
	t.Run("grpc", func(t *testing.T) {
		s, _ := shed.New(fixed(1))
		received := make(chan struct{}, 1)
		srv := grpctest.Start(t, grpctest.Handlers{
			Unary: func(context.Context, int, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
				return &testpb.SimpleResponse{}, nil
			},
			ClientStream: func(_ int, st grpc.ClientStreamingServer[testpb.StreamingInputCallRequest, testpb.StreamingInputCallResponse]) error {
				for {
					if _, err := st.Recv(); err == io.EOF {
						return st.SendAndClose(&testpb.StreamingInputCallResponse{})
					} else if err != nil {
						return err
					}
					received <- struct{}{}
				}
			},
		}, grpc.ChainUnaryInterceptor(s.UnaryServerInterceptor()), grpc.ChainStreamInterceptor(s.StreamServerInterceptor()))
		client := testpb.NewTestServiceClient(srv.Dial(t))
		st, err := client.StreamingInputCall(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the stream to be admitted", func() bool { return s.Stats().Admitted == 1 })
		waitFor(t, "the stream to wait", func() bool { return s.Stats().InFlight == 0 })
		if _, err := client.UnaryCall(context.Background(), grpctest.Request("x")); err != nil {
			t.Fatalf("a call beside a stream waiting on its client: %v", err)
		}
		if err := st.Send(&testpb.StreamingInputCallRequest{}); err != nil {
			t.Fatal(err)
		}
		<-received
		if _, err := st.CloseAndRecv(); err != nil {
			t.Fatal(err)
		}
		if got := s.Stats(); got.Admitted != 2 || got.ShedRetry+got.ShedStop != 0 || got.InFlight != 0 {
			t.Fatalf("stats %+v, want 2 admitted, none shed", got)
		}
	})
	t.Run("connect", func(t *testing.T) {
		s, _ := shed.New(fixed(1))
		const upload, greet = "/acme.v1.Files/Upload", "/acme.v1.Greeter/Greet"
		mux := http.NewServeMux()
		mux.Handle(upload, connect.NewClientStreamHandler(upload,
			func(_ context.Context, st *connect.ClientStream[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
				for st.Receive() {
				}
				return connect.NewResponse(wrapperspb.String("done")), st.Err()
			}, connect.WithInterceptors(s.ConnectInterceptor())))
		mux.Handle(greet, connect.NewUnaryHandler(greet,
			func(context.Context, *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
				return connect.NewResponse(wrapperspb.String("hi")), nil
			}, connect.WithInterceptors(s.ConnectInterceptor())))
		srv := httptest.NewServer(mux)
		defer srv.Close()
		body, stall := io.Pipe()
		defer stall.Close() // before srv.Close, which waits for the upload
		req, _ := http.NewRequest(http.MethodPost, srv.URL+upload, body)
		req.Header.Set("Content-Type", "application/connect+proto")
		uploaded := make(chan error, 1)
		go func() {
			resp, err := srv.Client().Do(req)
			if err == nil {
				resp.Body.Close()
			}
			uploaded <- err
		}()
		waitFor(t, "the stream to be admitted", func() bool { return s.Stats().Admitted == 1 })
		waitFor(t, "the stream to wait", func() bool { return s.Stats().InFlight == 0 })
		client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](srv.Client(), srv.URL+greet)
		if _, err := client.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("x"))); err != nil {
			t.Fatalf("a call beside a stream waiting on its client: %v", err)
		}
		stall.Close()
		if err := <-uploaded; err != nil {
			t.Fatal(err)
		}
		if got := s.Stats(); got.Admitted != 2 || got.ShedRetry+got.ShedStop != 0 || got.InFlight != 0 {
			t.Fatalf("stats %+v, want 2 admitted, none shed", got)
		}
	})
	t.Run("http", func(t *testing.T) {
		s, _ := shed.New(fixed(1))
		srv := httptest.NewServer(s.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, err := io.Copy(io.Discard, r.Body); err != nil {
				w.WriteHeader(http.StatusBadRequest)
			}
		})))
		defer srv.Close()
		body, stall := io.Pipe()
		defer stall.Close() // before srv.Close, which waits for the upload
		uploaded := make(chan error, 1)
		go func() {
			resp, err := srv.Client().Post(srv.URL, "application/octet-stream", body)
			if err == nil {
				resp.Body.Close()
			}
			uploaded <- err
		}()
		go func() { _, _ = stall.Write([]byte("1 byte of many")[:1]) }()
		waitFor(t, "the upload to be admitted", func() bool { return s.Stats().Admitted == 1 })
		waitFor(t, "the upload to wait", func() bool { return s.Stats().InFlight == 0 })
		resp, err := srv.Client().Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("a request beside an upload waiting on its client: %s", resp.Status)
		}
		stall.Close()
		if err := <-uploaded; err != nil {
			t.Fatal(err)
		}
		if got := s.Stats(); got.Admitted != 2 || got.ShedRetry+got.ShedStop != 0 || got.InFlight != 0 {
			t.Fatalf("stats %+v, want 2 admitted, none shed", got)
		}
	})
}
