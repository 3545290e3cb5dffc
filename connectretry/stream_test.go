package connectretry_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/connectretry"
)

// streamFailFirst fails the first n server-stream calls with code before
// any message, then sends three messages.
func streamFailFirst(n int, code connect.Code) handlers {
	return handlers{serverStream: func(_ context.Context, i int, req *request, s *connect.ServerStream[msg]) error {
		if i <= n {
			return connect.NewError(code, fmt.Errorf("attempt %d fails", i))
		}
		for j := range 3 {
			if err := s.Send(wrapperspb.String(fmt.Sprintf("%s %d/%d", req.Msg.GetValue(), i, j))); err != nil {
				return err
			}
		}
		return nil
	}}
}

// receiveAll reads the stream to its end and closes it.
func receiveAll(t testing.TB, st *connect.ServerStreamForClient[msg]) ([]string, error) {
	t.Helper()
	var got []string
	for st.Receive() {
		got = append(got, st.Msg().GetValue())
	}
	err := st.Err()
	if cerr := st.Close(); cerr != nil && err == nil {
		t.Fatalf("Close: %v", cerr)
	}
	return got, err
}

func TestServerStreamRetriedUntilFirstMessage(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			srv := startServer(t, streamFailFirst(2, connect.CodeUnavailable), p.http2)
			c, _ := dial(t, srv, p, retryConfig(t, 4, `"UNAVAILABLE"`, ""))
			var n int
			req := connect.NewRequest(wrapperspb.String("m"))
			req.Header().Set("X-Trace", "t1")
			st, err := c.serverStream.CallServerStream(connectretry.CountAttempts(context.Background(), &n), req)
			if err != nil {
				t.Fatal(err)
			}
			got, err := receiveAll(t, st)
			if err != nil {
				t.Fatal(err)
			}
			if want := []string{"m 3/0", "m 3/1", "m 3/2"}; !slices.Equal(got, want) {
				t.Fatalf("received %q, want %q", got, want)
			}
			if got := srv.previous(serverStream); !slices.Equal(got, []int{-1, 1, 2}) {
				t.Fatalf("server saw grpc-previous-rpc-attempts %v, want [absent 1 2]", got)
			}
			for i, a := range srv.seen(serverStream) {
				if a.payload != "m" || a.header.Get("X-Trace") != "t1" {
					t.Fatalf("attempt %d carried %q with X-Trace %q", i+1, a.payload, a.header.Get("X-Trace"))
				}
			}
			if n != 3 {
				t.Fatalf("CountAttempts reported %d, want 3", n)
			}
		})
	}
}

func TestServerStreamNotRetriedAfterFirstMessage(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			srv := startServer(t, handlers{serverStream: func(_ context.Context, _ int, _ *request, s *connect.ServerStream[msg]) error {
				if err := s.Send(wrapperspb.String("first")); err != nil {
					return err
				}
				return connect.NewError(connect.CodeUnavailable, errors.New("after a message"))
			}}, p.http2)
			c, _ := dial(t, srv, p, retryConfig(t, 4, `"UNAVAILABLE"`, ""))
			st, err := c.serverStream.CallServerStream(context.Background(), connect.NewRequest(wrapperspb.String("m")))
			if err != nil {
				t.Fatal(err)
			}
			got, err := receiveAll(t, st)
			if !slices.Equal(got, []string{"first"}) || connect.CodeOf(err) != connect.CodeUnavailable {
				t.Fatalf("received %q, %v; want the first message, then unavailable", got, err)
			}
			var re *rebound.Error
			if errors.As(err, &re) {
				t.Fatalf("a committed stream's error should be connect's own, got %v", re)
			}
			if srv.count(serverStream) != 1 {
				t.Fatalf("%d attempts, want 1", srv.count(serverStream))
			}
		})
	}
}

func TestServerStreamGivesUp(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			srv := startServer(t, streamFailFirst(1000, connect.CodeUnavailable), p.http2)
			c, clk := dial(t, srv, p, retryConfig(t, 3, `"UNAVAILABLE"`, ""))
			st, err := c.serverStream.CallServerStream(context.Background(), connect.NewRequest(wrapperspb.String("m")))
			if err != nil {
				t.Fatal(err)
			}
			got, err := receiveAll(t, st)
			var re *rebound.Error
			if len(got) != 0 || !errors.As(err, &re) || re.Attempts != 3 || !errors.Is(err, rebound.ErrAttemptsExhausted) {
				t.Fatalf("received %q, %v; want nothing, 3 attempts, exhausted", got, err)
			}
			if connect.CodeOf(err) != connect.CodeUnavailable || err.Error() != "unavailable: attempt 3 fails" {
				t.Fatalf("err %v, want the last attempt's", err)
			}
			if srv.count(serverStream) != 3 || len(clk.Sleeps()) != 2 {
				t.Fatalf("%d attempts, sleeps %v; want 3 attempts and 2 sleeps", srv.count(serverStream), clk.Sleeps())
			}
		})
	}
}

func TestServerStreamPushbackStops(t *testing.T) {
	srv := startServer(t, handlers{serverStream: func(context.Context, int, *request, *connect.ServerStream[msg]) error {
		e := connect.NewError(connect.CodeUnavailable, errors.New("busy"))
		e.Meta().Set("grpc-retry-pushback-ms", "-1")
		return e
	}}, true)
	c, _ := dial(t, srv, protocols[1], retryConfig(t, 3, `"UNAVAILABLE"`, ""))
	st, err := c.serverStream.CallServerStream(context.Background(), connect.NewRequest(wrapperspb.String("m")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := receiveAll(t, st); !errors.Is(err, rebound.ErrPushback) || srv.count(serverStream) != 1 {
		t.Fatalf("err %v after %d attempts, want pushback after 1", err, srv.count(serverStream))
	}
}

func TestServerStreamWithoutMessages(t *testing.T) {
	srv := startServer(t, handlers{serverStream: func(context.Context, int, *request, *connect.ServerStream[msg]) error {
		return nil
	}}, false)
	c, _ := dial(t, srv, connectProtocol, retryConfig(t, 3, `"UNAVAILABLE"`, ""))
	st, err := c.serverStream.CallServerStream(context.Background(), connect.NewRequest(wrapperspb.String("m")))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := receiveAll(t, st); len(got) != 0 || err != nil || srv.count(serverStream) != 1 {
		t.Fatalf("received %q, %v after %d attempts; want a clean end after 1", got, err, srv.count(serverStream))
	}
}

func TestServerStreamHeaderCommits(t *testing.T) {
	srv := startServer(t, streamFailFirst(1, connect.CodeUnavailable), false)
	c, _ := dial(t, srv, connectProtocol, retryConfig(t, 3, `"UNAVAILABLE"`, ""))
	st, err := c.serverStream.CallServerStream(context.Background(), connect.NewRequest(wrapperspb.String("m")))
	if err != nil {
		t.Fatal(err)
	}
	// The application has seen this attempt's header: it is the answer.
	_ = st.ResponseHeader()
	if _, err := receiveAll(t, st); connect.CodeOf(err) != connect.CodeUnavailable || srv.count(serverStream) != 1 {
		t.Fatalf("err %v after %d attempts, want unavailable after 1", err, srv.count(serverStream))
	}
}

func TestServerStreamHedgingPolicyNotApplied(t *testing.T) {
	srv := startServer(t, streamFailFirst(1, connect.CodeUnavailable), false)
	c, _ := dialManual(t, srv, connectProtocol, hedgeConfig(t, 3, "0s", `"UNAVAILABLE"`, ""))
	st, err := c.serverStream.CallServerStream(context.Background(), connect.NewRequest(wrapperspb.String("m")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := receiveAll(t, st); connect.CodeOf(err) != connect.CodeUnavailable || srv.count(serverStream) != 1 {
		t.Fatalf("err %v after %d attempts, want unavailable after 1", err, srv.count(serverStream))
	}
}

// Client and bidirectional streams are retried like server streams: each
// attempt is sent the messages again (the suite in internal/suite checks
// what each attempt receives).
func TestClientAndBidiStreamsRetried(t *testing.T) {
	srv := startServer(t, handlers{}, true)
	c, _ := dial(t, srv, protocols[1], retryConfig(t, 4, `"UNAVAILABLE"`, ""))
	ctx := context.Background()

	var n int
	cs := c.clientStream.CallClientStream(connectretry.CountAttempts(ctx, &n))
	for range 2 {
		if err := cs.Send(wrapperspb.String("m")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.CloseAndReceive(); connect.CodeOf(err) != connect.CodeUnavailable || srv.count(clientStream) != 4 || n != 4 {
		t.Fatalf("client stream: err %v after %d attempts (counted %d), want unavailable after 4", err, srv.count(clientStream), n)
	}

	bs := c.bidi.CallBidiStream(ctx)
	if err := bs.Send(wrapperspb.String("m")); err != nil {
		t.Fatal(err)
	}
	if err := bs.CloseRequest(); err != nil {
		t.Fatal(err)
	}
	if _, err := bs.Receive(); connect.CodeOf(err) != connect.CodeUnavailable || srv.count(bidiStream) != 4 {
		t.Fatalf("bidi stream: err %v after %d attempts, want unavailable after 4", err, srv.count(bidiStream))
	}
	if err := bs.CloseResponse(); err != nil {
		t.Fatal(err)
	}
}
