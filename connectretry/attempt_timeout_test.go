package connectretry_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// serverStreamHeadersThenQuiet makes every server stream send its
// headers and then go quiet for five timeouts before answering.
func serverStreamHeadersThenQuiet() handlers {
	return handlers{serverStream: func(ctx context.Context, _ int, _ *request, st *connect.ServerStream[msg]) error {
		st.ResponseHeader().Set("X-Early", "1")
		if err := st.Conn().Send(nil); err != nil {
			return err
		}
		select {
		case <-time.After(5 * attemptTimeout):
		case <-ctx.Done():
			return ctx.Err()
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

// TestPerAttemptTimeoutServerStream: a server stream whose first attempt
// hangs is cut and answered by its second, and a stream keeps the call's
// deadline on the wire (here none), not its attempt's.
func TestPerAttemptTimeoutServerStream(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, streamHangFirst(1), p.http2)
			warm(t, s, p, unary)
			c, _ := dial(t, s, p, retryConfig(t, 3, `"UNAVAILABLE"`, ""), connectretry.WithPerAttemptTimeout(countedTimeout))
			var n int
			st, err := c.serverStream.CallServerStream(connectretry.CountAttempts(context.Background(), &n), connect.NewRequest(wrapperspb.String("x")))
			if err != nil {
				t.Fatal(err)
			}
			if got := messages(t, st); got != "0,1,2" || n != 2 || !slices.Equal(s.previous(serverStream), []int{-1, 1}) {
				t.Fatalf("got %q after %d attempts, server saw grpc-previous-rpc-attempts %v; want 0,1,2 from attempt 2, [absent 1]", got, n, s.previous(serverStream))
			}
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
	s := startServer(t, serverStreamHeadersThenQuiet(), true)
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
			s := startServer(t, serverStreamHeadersThenQuiet(), p.http2)
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

// countedTimeout is the per-attempt timeout of the tests that count the
// attempts a server sees while some hang: each hung attempt takes that
// long, so their subtests run in parallel. It is long because an attempt
// that answers must beat it on a loaded machine, under -race: there, on
// 2 CPUs with eight CPU-bound processes and other test binaries, a
// server stream's first message took up to 270ms, one call at a time.
const countedTimeout = time.Second

// streamHangFirst makes the first n attempts of a call hang, without
// headers, until the client gives up on them; later ones send "0,1,2".
// An attempt's number is the one its client gave it
// (grpc-previous-rpc-attempts), so that an attempt cut before it reached
// the server does not shift which attempts hang.
func streamHangFirst(n int) handlers {
	return handlers{serverStream: func(ctx context.Context, _ int, req *request, st *connect.ServerStream[msg]) error {
		if connectretry.PreviousAttempts(req.Header()) < n {
			<-ctx.Done()
			return ctx.Err()
		}
		for k := range 3 {
			if err := st.Send(wrapperspb.String(fmt.Sprint(k))); err != nil {
				return err
			}
		}
		return nil
	}}
}

// warm makes one call of procedure (unary or serverStream, whichever the
// test's handlers answer at once) that no interceptor governs, then has
// the server forget it, so that the attempts a test counts find a
// connection made: a TLS handshake on a loaded machine, under -race, may
// take longer than a per-attempt timeout.
func warm(t *testing.T, s *server, p protocol, procedure string) {
	t.Helper()
	c := connect.NewClient[msg, msg](s.client, s.url+procedure, p.opts...)
	req := connect.NewRequest(wrapperspb.String("warm"))
	var err error
	if procedure == unary {
		_, err = c.CallUnary(context.Background(), req)
	} else {
		var st *connect.ServerStreamForClient[msg]
		if st, err = c.CallServerStream(context.Background(), req); err == nil {
			_, err = receiveAll(t, st)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	s.forget()
}

// overEveryTransport runs f for each protocol over each transport it
// runs on: HTTP/1.1 (not gRPC), HTTP/2 with TLS, and h2c. The subtests
// run in parallel, since each waits out per-attempt timeouts.
func overEveryTransport(t *testing.T, f func(t *testing.T, p protocol, tr transport)) {
	for _, p := range protocols {
		for _, tr := range []transport{overHTTP1, overH2, overH2C} {
			if p.name == "grpc" && tr == overHTTP1 {
				continue // gRPC needs HTTP/2
			}
			t.Run(p.name+"/"+tr.String(), func(t *testing.T) {
				t.Parallel()
				f(t, p, tr)
			})
		}
	}
}

// TestPerAttemptTimeoutServerStreamRetries: a server stream whose first
// two attempts hang is retried past each cut attempt, not only the
// first, and answered by the third, in every protocol over every
// transport.
func TestPerAttemptTimeoutServerStreamRetries(t *testing.T) {
	overEveryTransport(t, func(t *testing.T, p protocol, tr transport) {
		s := startServerOver(t, streamHangFirst(2), tr)
		warm(t, s, p, unary)
		c, _ := dial(t, s, p, retryConfig(t, 5, `"UNAVAILABLE"`, ""), connectretry.WithPerAttemptTimeout(countedTimeout))
		var n int
		st, err := c.serverStream.CallServerStream(connectretry.CountAttempts(context.Background(), &n), connect.NewRequest(wrapperspb.String("x")))
		if err != nil {
			t.Fatal(err)
		}
		got, err := receiveAll(t, st)
		if err != nil || strings.Join(got, ",") != "0,1,2" || n != 3 {
			t.Fatalf("got %q, %v after %d attempts; want 0,1,2 from attempt 3", got, err, n)
		}
		if got := s.previous(serverStream); !slices.Equal(got, []int{-1, 1, 2}) {
			t.Fatalf("server saw attempts with grpc-previous-rpc-attempts %v, want [absent 1 2]", got)
		}
	})
}

// TestPerAttemptTimeoutServerStreamEveryAttemptHangs: when every attempt
// of a server stream hangs, each is cut and retried up to maxAttempts,
// and the call ends DEADLINE_EXCEEDED from the per-attempt timeout, in
// every protocol over every transport, for short timeouts too (which may
// cut an attempt before it reaches the server, or while it connects).
func TestPerAttemptTimeoutServerStreamEveryAttemptHangs(t *testing.T) {
	const maxAttempts = 5
	for _, timeout := range []time.Duration{20 * time.Millisecond, attemptTimeout} {
		t.Run(timeout.String(), func(t *testing.T) {
			overEveryTransport(t, func(t *testing.T, p protocol, tr transport) {
				s := startServerOver(t, streamHangFirst(1<<30), tr)
				warm(t, s, p, unary)
				c, _ := dial(t, s, p, retryConfig(t, maxAttempts, `"UNAVAILABLE"`, ""), connectretry.WithPerAttemptTimeout(timeout))
				var n int
				st, err := c.serverStream.CallServerStream(connectretry.CountAttempts(context.Background(), &n), connect.NewRequest(wrapperspb.String("x")))
				if err != nil {
					t.Fatal(err)
				}
				got, err := receiveAll(t, st)
				if connect.CodeOf(err) != connect.CodeDeadlineExceeded || !errors.Is(err, rebound.ErrAttemptTimeout) || !errors.Is(err, rebound.ErrAttemptsExhausted) || n != maxAttempts {
					t.Fatalf("got %q, err %v after %d attempts; want deadline_exceeded from the per-attempt timeout, attempts exhausted after %d", got, err, n, maxAttempts)
				}
				// A short timeout may cut an attempt before the server
				// sees it, or while its request is on the way, so that a
				// later one overtakes it; those it saw are distinct
				// attempts of this call.
				seen := slices.Sorted(slices.Values(s.previous(serverStream)))
				if len(seen) > maxAttempts || len(slices.Compact(slices.Clone(seen))) != len(seen) || len(seen) > 0 && (seen[0] < -1 || seen[0] == 0 || seen[len(seen)-1] >= maxAttempts) {
					t.Fatalf("server saw attempts with grpc-previous-rpc-attempts %v, want distinct attempts of the call", s.previous(serverStream))
				}
			})
		})
	}
}

// answerBeforeDeadline makes every unary attempt end with code a little
// (countedTimeout/40, within the last twentieth in which an answer counts
// as the timeout's) before the deadline it received, as a server does
// whose clock sees the attempt's deadline pass first (Connect-Timeout-Ms
// is rounded down to the millisecond and starts when the request arrives;
// a proxy may keep a margin) and answers with a code of its own, such as
// the CANCELED of an aborted handler or of a reset HTTP/2 stream.
func answerBeforeDeadline(code connect.Code) handlers {
	return handlers{unary: func(ctx context.Context, _ int, _ *request) (*connect.Response[msg], error) {
		dl, ok := ctx.Deadline()
		if !ok {
			return nil, connect.NewError(connect.CodeInternal, errors.New("no deadline"))
		}
		select {
		case <-time.After(time.Until(dl) - countedTimeout/40):
			return nil, connect.NewError(code, errors.New("deadline"))
		case <-ctx.Done():
			return nil, connect.NewError(code, ctx.Err())
		}
	}}
}

// TestPerAttemptTimeoutUnaryServerAnswersFirst: when the server ends each
// attempt at the deadline the attempt carried, before the client's timer,
// the attempt was cut by its timeout whatever code the server gave: it is
// retried, and the call ends DEADLINE_EXCEEDED with ErrAttemptTimeout
// after maxAttempts, in every protocol.
func TestPerAttemptTimeoutUnaryServerAnswersFirst(t *testing.T) {
	const maxAttempts = 3
	for _, p := range protocols {
		for _, code := range []connect.Code{connect.CodeCanceled, connect.CodeUnavailable, connect.CodeDeadlineExceeded} {
			t.Run(p.name+"/"+code.String(), func(t *testing.T) {
				t.Parallel()
				s := startServer(t, answerBeforeDeadline(code), p.http2)
				warm(t, s, p, serverStream)
				c, _ := dial(t, s, p, retryConfig(t, maxAttempts, `"RESOURCE_EXHAUSTED"`, ""), connectretry.WithPerAttemptTimeout(countedTimeout))
				var n int
				_, err := call(connectretry.CountAttempts(context.Background(), &n), c.unary, "x")
				if connect.CodeOf(err) != connect.CodeDeadlineExceeded || !errors.Is(err, rebound.ErrAttemptTimeout) || !errors.Is(err, rebound.ErrAttemptsExhausted) {
					t.Fatalf("err %v, want deadline_exceeded from the per-attempt timeout, attempts exhausted", err)
				}
				if n != maxAttempts || s.count(unary) != maxAttempts {
					t.Fatalf("%d attempts, server saw %d; want %d", n, s.count(unary), maxAttempts)
				}
			})
		}
	}
}
