package shed_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rebound-go/rebound/shed/connectshed"
)

// A connect streaming handler holds its slot until it returns; a stream
// beyond the limit gets CodeUnavailable with the pushback in its metadata,
// in the Connect and the gRPC protocol alike.
func TestConnectStream(t *testing.T) {
	for _, proto := range []struct {
		name string
		opts []connect.ClientOption
	}{{"connect", nil}, {"grpc", []connect.ClientOption{connect.WithGRPC()}}} {
		t.Run(proto.name, func(t *testing.T) {
			s := oneAtATime()
			entered, release := make(chan struct{}), make(chan struct{})
			first := true
			const watch = "/acme.v1.Clock/Watch"
			mux := http.NewServeMux()
			mux.Handle(watch, connect.NewServerStreamHandler(watch,
				func(_ context.Context, _ *connect.Request[wrapperspb.StringValue], st *connect.ServerStream[wrapperspb.StringValue]) error {
					if first {
						first = false
						close(entered)
						<-release
					}
					return st.Send(wrapperspb.String("tick"))
				}, connect.WithInterceptors(connectshed.Interceptor(s))))
			srv := httptest.NewUnstartedServer(mux)
			srv.EnableHTTP2 = true
			srv.StartTLS()
			defer srv.Close()
			client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](srv.Client(), srv.URL+watch, proto.opts...)

			done := make(chan error, 1)
			go func() {
				st, err := client.CallServerStream(context.Background(), connect.NewRequest(wrapperspb.String("a")))
				if err == nil {
					for st.Receive() {
					}
					err = st.Err()
					st.Close()
				}
				done <- err
			}()
			<-entered
			st, err := client.CallServerStream(context.Background(), connect.NewRequest(wrapperspb.String("b")))
			if err == nil {
				for st.Receive() {
					t.Error("a shed stream received a message")
				}
				err = st.Err()
				st.Close()
			}
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != connect.CodeUnavailable || ce.Meta().Get("Grpc-Retry-Pushback-Ms") != "-1" {
				t.Fatalf("second stream: %v, want unavailable with pushback -1", err)
			}
			close(release)
			if err := <-done; err != nil {
				t.Fatalf("first stream: %v", err)
			}
			if st := s.Stats(); st.Admitted != 1 || st.ShedStop != 1 || st.InFlight != 0 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}
