package connectshed_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"connectrpc.com/connect/v2/connectinprocess"
	"connectrpc.com/connect/v2/connectproto"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rebound-go/rebound/internal/testmain"
	"github.com/rebound-go/rebound/shed"
	connectshed "github.com/rebound-go/rebound/shed/connectshed/v2"
)

func TestMain(m *testing.M) { testmain.Run(m) }

var (
	greet = connect.Spec{Procedure: "/acme.v1.Greeter/Greet", StreamType: connect.StreamTypeUnary}
	chat  = connect.Spec{Procedure: "/acme.v1.Greeter/Chat", StreamType: connect.StreamTypeBidi}
)

// transports are every way a v2 client reaches the server: connecthttp in
// its three protocols, over cleartext HTTP/2, and connectinprocess.
var transports = []struct {
	name string
	new  func(t *testing.T, srv *connect.Server) connect.Transport
}{
	{"connect", httpTransport()},
	{"grpc", httpTransport(connecthttp.WithGRPC())},
	{"grpcweb", httpTransport(connecthttp.WithGRPCWeb())},
	{"inprocess", func(_ *testing.T, srv *connect.Server) connect.Transport { return connectinprocess.New(srv) }},
}

func httpTransport(opts ...connecthttp.Option) func(t *testing.T, srv *connect.Server) connect.Transport {
	return func(t *testing.T, srv *connect.Server) connect.Transport {
		mux := http.NewServeMux()
		connecthttp.Mount(mux, srv)
		hs := httptest.NewUnstartedServer(mux)
		hs.Config.Protocols = new(http.Protocols)
		hs.Config.Protocols.SetHTTP1(true)
		hs.Config.Protocols.SetUnencryptedHTTP2(true)
		hs.Start()
		t.Cleanup(hs.Close)
		protocols := new(http.Protocols)
		protocols.SetUnencryptedHTTP2(true)
		hc := &http.Client{Transport: &http.Transport{Protocols: protocols}}
		t.Cleanup(hc.CloseIdleConnections)
		return connecthttp.NewTransport(hc, hs.URL, opts...)
	}
}

// newShedder returns a Shedder whose limit is held at n.
func newShedder(t *testing.T, n int) *shed.Shedder {
	c := shed.DefaultConfig()
	c.InitialLimit, c.MinLimit, c.MaxLimit = n, n, n
	s, err := shed.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// call makes a unary call of v and returns its response trailer and
// error.
func call(c *connect.Client, v string) (*connect.Header, error) {
	ctx, info := connect.NewClientContext(context.Background())
	var res wrapperspb.StringValue
	err := c.CallUnary(ctx, greet, wrapperspb.String(v), &res)
	return info.ResponseTrailer(), err
}

// A call beyond the limit gets CodeUnavailable and the pushback as the
// trailer grpc-retry-pushback-ms, its handler never running, in every
// transport; the call that holds the slot is served.
func TestShed(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			s := newShedder(t, 1)
			entered, release := make(chan struct{}), make(chan struct{})
			var handled int
			srv := connect.NewServer(connectshed.Interceptor(s))
			srv.Register(connect.Method{Spec: greet, Handler: func(_ context.Context, _ connect.Spec, st connect.ServerStream) error {
				var req wrapperspb.StringValue
				if err := st.Receive(&req); err != nil {
					return err
				}
				handled++
				if req.GetValue() == "hold" {
					close(entered)
					<-release
				}
				return st.Send(wrapperspb.String("hi"))
			}})
			c := connect.NewClient(tr.new(t, srv))
			done := make(chan error, 1)
			go func() { _, err := call(c, "hold"); done <- err }()
			<-entered
			trailer, err := call(c, "shed")
			if connect.CodeOf(err) != connect.CodeUnavailable || trailer.Get("Grpc-Retry-Pushback-Ms") == "" {
				t.Fatalf("second call: %v with pushback %q, want unavailable with a pushback", err, trailer.Get("Grpc-Retry-Pushback-Ms"))
			}
			close(release)
			if err := <-done; err != nil {
				t.Fatalf("first call: %v", err)
			}
			if st := s.Stats(); handled != 1 || st.Admitted != 1 || st.ShedRetry+st.ShedStop != 1 || st.InFlight != 0 {
				t.Fatalf("%d handled, stats %+v; want 1 admitted and 1 shed", handled, st)
			}
		})
	}
}

// A handler's own failures with a sign of overload go out with a
// pushback, the Shedder's when they carry none, without shrinking the
// limit; ReportOverload shrinks it. An error the handler passes on from
// its backend (IsRemote) is the backend's verdict, which the transport
// sends as CodeInternal, and gets none.
func TestHandlerRefusals(t *testing.T) {
	retryInfo, err := connectproto.NewErrorDetail(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			c := shed.DefaultConfig()
			c.InitialLimit = 100
			s, err := shed.New(c)
			if err != nil {
				t.Fatal(err)
			}
			srv := connect.NewServer(connectshed.Interceptor(s))
			srv.Register(connect.Method{Spec: greet, Handler: func(ctx context.Context, _ connect.Spec, st connect.ServerStream) error {
				var req wrapperspb.StringValue
				if err := st.Receive(&req); err != nil {
					return err
				}
				info, _ := connect.CallInfoForServerContext(ctx)
				switch req.GetValue() {
				case "busy":
					return connect.NewError(connect.CodeUnavailable, "dependency down")
				case "own":
					info.ResponseTrailer().Set("Grpc-Retry-Pushback-Ms", "250")
					return connect.NewError(connect.CodeResourceExhausted, "quota")
				case "retryinfo":
					return connect.NewError(connect.CodeResourceExhausted, "quota").WithDetail(retryInfo)
				case "remote":
					return connect.NewError(connect.CodeUnavailable, "backend busy").WithRemote()
				case "overload":
					shed.ReportOverload(ctx)
					return connect.NewError(connect.CodeUnavailable, "pool full")
				}
				return st.Send(wrapperspb.String("hi"))
			}})
			cl := connect.NewClient(tr.new(t, srv))
			for range 30 {
				if _, err := call(cl, "ok"); err != nil {
					t.Fatal(err)
				}
			}
			trailer, err := call(cl, "busy")
			var ce *connect.Error
			if ms, aerr := strconv.Atoi(trailer.Get("Grpc-Retry-Pushback-Ms")); !errors.As(err, &ce) || ce.Code() != connect.CodeUnavailable || ce.Message() != "dependency down" || aerr != nil || ms < 0 {
				t.Errorf("a handler's unavailable went out as %v with pushback %q, want its code and message and a delay", err, trailer.Get("Grpc-Retry-Pushback-Ms"))
			}
			if trailer, _ := call(cl, "own"); len(trailer.Values("Grpc-Retry-Pushback-Ms")) != 1 || trailer.Get("Grpc-Retry-Pushback-Ms") != "250" {
				t.Errorf("the handler's own pushback went out as %q, want [250]", trailer.Values("Grpc-Retry-Pushback-Ms"))
			}
			if trailer, _ := call(cl, "retryinfo"); trailer.Get("Grpc-Retry-Pushback-Ms") != "" {
				t.Errorf("a handler's RetryInfo got the pushback %q too", trailer.Get("Grpc-Retry-Pushback-Ms"))
			}
			trailer, err = call(cl, "remote")
			if connect.CodeOf(err) != connect.CodeInternal || trailer.Get("Grpc-Retry-Pushback-Ms") != "" {
				t.Errorf("a backend's unavailable passed on went out as %v with pushback %q, want internal without one", err, trailer.Get("Grpc-Retry-Pushback-Ms"))
			}
			if st := s.Stats(); st.Limit != 100 || st.Refused != 1 {
				t.Fatalf("%+v, want the limit still 100 and 1 refusal spoken for", st)
			}
			call(cl, "overload")
			if got := s.Stats().Limit; got != 90 {
				t.Fatalf("limit %d after ReportOverload, want 90", got)
			}
		})
	}
}

// A handler waiting on its client holds no slot: with a limit of 1, a
// bidirectional stream whose client sends nothing leaves room for a call.
func TestWaitOnClientHoldsNoSlot(t *testing.T) {
	for _, tr := range transports {
		if tr.name == "grpcweb" {
			continue // gRPC-Web has no bidirectional streams
		}
		t.Run(tr.name, func(t *testing.T) {
			s := newShedder(t, 1)
			waiting := make(chan struct{})
			srv := connect.NewServer(connectshed.Interceptor(s))
			srv.Register(
				connect.Method{Spec: greet, Handler: func(_ context.Context, _ connect.Spec, st connect.ServerStream) error {
					var req wrapperspb.StringValue
					if err := st.Receive(&req); err != nil {
						return err
					}
					return st.Send(wrapperspb.String("hi"))
				}},
				connect.Method{Spec: chat, Handler: func(_ context.Context, _ connect.Spec, st connect.ServerStream) error {
					close(waiting)
					var req wrapperspb.StringValue
					for {
						if err := st.Receive(&req); err != nil {
							return nil
						}
					}
				}},
			)
			c := connect.NewClient(tr.new(t, srv))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			stream, err := c.CallClientStream(ctx, chat)
			if err != nil {
				t.Fatal(err)
			}
			if err := stream.SendHeaders(); err != nil {
				t.Fatal(err)
			}
			<-waiting
			// The stream's handler is in Receive, or about to be; give it
			// a moment to get there, then call.
			for deadline := time.Now().Add(10 * time.Second); s.Stats().InFlight != 0; {
				if time.Now().After(deadline) {
					t.Fatalf("stats %+v: the waiting stream still holds its slot", s.Stats())
				}
				time.Sleep(time.Millisecond)
			}
			if _, err := call(c, "x"); err != nil {
				t.Fatalf("a call beside a stream waiting on its client: %v", err)
			}
			if err := stream.CloseSend(); err != nil {
				t.Fatal(err)
			}
			if err := stream.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
