package connectretry_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/connectretry"
)

// attemptTimeout is short, so that hung attempts end quickly; tests
// assert counts and codes, never how long anything took.
const attemptTimeout = 100 * time.Millisecond

// hangFirstUnary hangs the first n unary calls until the server ends them
// and echoes the others; deadlines receives how long each call had left on
// its deadline (-1 for none).
func hangFirstUnary(n int, deadlines chan<- time.Duration) handlers {
	return handlers{unary: func(ctx context.Context, i int, req *request) (*connect.Response[msg], error) {
		if deadlines != nil {
			left := time.Duration(-1)
			if dl, ok := ctx.Deadline(); ok {
				left = time.Until(dl)
			}
			deadlines <- left
		}
		if i <= n {
			<-ctx.Done()
			return nil, connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
		}
		return connect.NewResponse(wrapperspb.String(req.Msg.GetValue())), nil
	}}
}

func TestPerAttemptTimeoutUnary(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			deadlines := make(chan time.Duration, 2)
			s := startServer(t, hangFirstUnary(1, deadlines), p.http2)
			i, err := connectretry.New(retryConfig(t, 3, `"UNAVAILABLE"`, ""), connectretry.WithPerAttemptTimeout(attemptTimeout))
			if err != nil {
				t.Fatal(err)
			}
			c := newClients(s, p, i)
			var n int
			resp, err := call(connectretry.CountAttempts(context.Background(), &n), c.unary, "x")
			if err != nil {
				t.Fatal(err)
			}
			if resp.Msg.GetValue() != "x" || n != 2 || s.count(unary) != 2 {
				t.Fatalf("%q after %d attempts (server saw %d), want x after 2", resp.Msg.GetValue(), n, s.count(unary))
			}
			// The server sees the per-attempt deadline, though the call
			// has none.
			for k := range 2 {
				if left := <-deadlines; left < 0 || left > attemptTimeout {
					t.Fatalf("attempt %d: server deadline %v away, want within %v", k+1, left, attemptTimeout)
				}
			}
			if st := i.Stats()[unary]; st.AttemptTimeouts != 1 {
				t.Fatalf("stats %+v, want 1 attempt timeout", st)
			}
		})
	}
}

func TestPerAttemptTimeoutUnaryEveryAttemptHangs(t *testing.T) {
	s := startServer(t, hangFirstUnary(1<<30, nil), false)
	c, _ := dial(t, s, connectProtocol, retryConfig(t, 2, `"UNAVAILABLE"`, ""), connectretry.WithPerAttemptTimeout(attemptTimeout))
	_, err := call(context.Background(), c.unary, "x")
	if connect.CodeOf(err) != connect.CodeDeadlineExceeded || !errors.Is(err, rebound.ErrAttemptTimeout) || !errors.Is(err, rebound.ErrAttemptsExhausted) {
		t.Fatalf("err %v, want deadline_exceeded from the per-attempt timeout, attempts exhausted", err)
	}
	if !strings.Contains(err.Error(), "per-attempt timeout (100ms)") {
		t.Fatalf("err %q does not name the per-attempt timeout", err)
	}
	if got := s.count(unary); got != 2 {
		t.Fatalf("server saw %d attempts, want 2", got)
	}
}

// serverStreamHangFirst makes the first server stream hang without
// sending anything, or, with headers, send its headers and then go quiet
// for five timeouts before answering.
func serverStreamHangFirst(headers bool) handlers {
	return handlers{serverStream: func(ctx context.Context, n int, req *request, st *connect.ServerStream[msg]) error {
		if n == 1 && !headers {
			<-ctx.Done()
			return ctx.Err()
		}
		if headers {
			st.ResponseHeader().Set("X-Early", "1")
			if err := st.Conn().Send(nil); err != nil {
				return err
			}
			select {
			case <-time.After(5 * attemptTimeout):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		for k := range 3 {
			if err := st.Send(wrapperspb.String(fmt.Sprint(k))); err != nil {
				return err
			}
		}
		return nil
	}}
}

// messages reads the stream to its end and closes it; it fails the test
// on an error.
func messages(t *testing.T, st *connect.ServerStreamForClient[msg]) string {
	t.Helper()
	got, err := receiveAll(t, st)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(got, ",")
}

func TestPerAttemptTimeoutServerStream(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			s := startServer(t, serverStreamHangFirst(false), p.http2)
			c, _ := dial(t, s, p, retryConfig(t, 3, `"UNAVAILABLE"`, ""), connectretry.WithPerAttemptTimeout(attemptTimeout))
			st, err := c.serverStream.CallServerStream(context.Background(), connect.NewRequest(wrapperspb.String("x")))
			if err != nil {
				t.Fatal(err)
			}
			if got := messages(t, st); got != "0,1,2" || s.count(serverStream) != 2 {
				t.Fatalf("got %q, server saw %d attempts; want 0,1,2 from attempt 2", got, s.count(serverStream))
			}
			// A stream keeps the call's deadline on the wire: here, none.
			for k, a := range s.seen(serverStream) {
				for _, h := range []string{"Connect-Timeout-Ms", "Grpc-Timeout"} {
					if v := a.header.Get(h); v != "" {
						t.Fatalf("attempt %d carried %s: %s", k+1, h, v)
					}
				}
			}
		})
	}
}

func TestPerAttemptTimeoutNeverCutsCommittedStream(t *testing.T) {
	s := startServer(t, serverStreamHangFirst(true), true)
	c, _ := dial(t, s, protocols[1], retryConfig(t, 3, `"UNAVAILABLE"`, ""), connectretry.WithPerAttemptTimeout(attemptTimeout))
	st, err := c.serverStream.CallServerStream(context.Background(), connect.NewRequest(wrapperspb.String("x")))
	if err != nil {
		t.Fatal(err)
	}
	// Reading the headers commits the stream, as the first message would.
	if st.ResponseHeader().Get("X-Early") != "1" {
		t.Fatalf("headers %v", st.ResponseHeader())
	}
	if got := messages(t, st); got != "0,1,2" || s.count(serverStream) != 1 {
		t.Fatalf("got %q, server saw %d attempts; want 0,1,2 from the one attempt", got, s.count(serverStream))
	}
}

// TestPerAttemptTimeoutHeadersStopTimer: response headers stop the timer
// though the caller only calls Receive: a stream that sends its headers
// and then goes quiet past the timeout is read to its end on the one
// attempt, in every protocol.
func TestPerAttemptTimeoutHeadersStopTimer(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			s := startServer(t, serverStreamHangFirst(true), p.http2)
			c, _ := dial(t, s, p, retryConfig(t, 3, `"UNAVAILABLE"`, ""), connectretry.WithPerAttemptTimeout(attemptTimeout))
			st, err := c.serverStream.CallServerStream(context.Background(), connect.NewRequest(wrapperspb.String("x")))
			if err != nil {
				t.Fatal(err)
			}
			if got := messages(t, st); got != "0,1,2" || s.count(serverStream) != 1 {
				t.Fatalf("got %q, server saw %d attempts; want 0,1,2 from the one attempt", got, s.count(serverStream))
			}
		})
	}
}

func TestWithPerAttemptTimeoutInvalid(t *testing.T) {
	_, err := connectretry.New(nil, connectretry.WithPerAttemptTimeout(0))
	if err == nil || !strings.Contains(err.Error(), "WithPerAttemptTimeout") {
		t.Fatalf("WithPerAttemptTimeout(0): %v, want an error naming it", err)
	}
}
