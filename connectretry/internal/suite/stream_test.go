package suite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/serviceconfig"
)

func TestServerStreamRetriedUntilFirstMessage(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		srv := e.start(t, streamFailFirst(2, serviceconfig.Unavailable))
		c, _ := e.dialAuto(t, srv, retryConfig(t, 4, `"UNAVAILABLE"`, ""))
		var n int
		st, err := c.open(e.countAttempts(context.Background(), &n), serverStream, "m", http.Header{"X-Trace": {"t1"}})
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

func TestServerStreamNotRetriedAfterFirstMessage(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		srv := e.start(t, handlers{serverStream: func(_ *call, send func(string) error) error {
			if err := send("first"); err != nil {
				return err
			}
			return fail(serviceconfig.Unavailable, "after a message")
		}})
		c, _ := e.dialAuto(t, srv, retryConfig(t, 4, `"UNAVAILABLE"`, ""))
		st, err := c.open(context.Background(), serverStream, "m", nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := receiveAll(t, st)
		if !slices.Equal(got, []string{"first"}) || e.codeOf(err) != serviceconfig.Unavailable {
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

func TestServerStreamGivesUp(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		srv := e.start(t, streamFailFirst(1000, serviceconfig.Unavailable))
		c, clk := e.dialAuto(t, srv, retryConfig(t, 3, `"UNAVAILABLE"`, ""))
		st, err := c.open(context.Background(), serverStream, "m", nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := receiveAll(t, st)
		var re *rebound.Error
		if len(got) != 0 || !errors.As(err, &re) || re.Attempts != 3 || !errors.Is(err, rebound.ErrAttemptsExhausted) {
			t.Fatalf("received %q, %v; want nothing, 3 attempts, exhausted", got, err)
		}
		if e.codeOf(err) != serviceconfig.Unavailable {
			t.Fatalf("err %v, want the last attempt's", err)
		}
		checkLastAttempt(t, e, err, "attempt 3 fails")
		if srv.count(serverStream) != 3 || len(clk.Sleeps()) != 2 {
			t.Fatalf("%d attempts, sleeps %v; want 3 attempts and 2 sleeps", srv.count(serverStream), clk.Sleeps())
		}
	})
}

func TestServerStreamPushbackStops(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		srv := e.start(t, handlers{serverStream: func(*call, func(string) error) error {
			return fail(serviceconfig.Unavailable, "busy").with("grpc-retry-pushback-ms", "-1")
		}})
		c, _ := e.dialAuto(t, srv, retryConfig(t, 3, `"UNAVAILABLE"`, ""))
		st, err := c.open(context.Background(), serverStream, "m", nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := receiveAll(t, st); !errors.Is(err, rebound.ErrPushback) || srv.count(serverStream) != 1 {
			t.Fatalf("err %v after %d attempts, want pushback after 1", err, srv.count(serverStream))
		}
	})
}

func TestServerStreamWithoutMessages(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		srv := e.start(t, handlers{serverStream: func(*call, func(string) error) error { return nil }})
		c, _ := e.dialAuto(t, srv, retryConfig(t, 3, `"UNAVAILABLE"`, ""))
		st, err := c.open(context.Background(), serverStream, "m", nil)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := receiveAll(t, st); len(got) != 0 || err != nil || srv.count(serverStream) != 1 {
			t.Fatalf("received %q, %v after %d attempts; want a clean end after 1", got, err, srv.count(serverStream))
		}
	})
}

// TestServerStreamHeaderCommits: in connect v1, an application that reads
// a stream's response header has seen that attempt's answer: the call is
// committed to it. (connect v2 shows headers only once Receive returns.)
func TestServerStreamHeaderCommits(t *testing.T) {
	e := env{v1, connectHTTP1}
	srv := e.start(t, streamFailFirst(1, serviceconfig.Unavailable))
	c, _ := e.dialAuto(t, srv, retryConfig(t, 3, `"UNAVAILABLE"`, ""))
	st, err := c.open(context.Background(), serverStream, "m", nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Header()
	if _, err := receiveAll(t, st); e.codeOf(err) != serviceconfig.Unavailable || srv.count(serverStream) != 1 {
		t.Fatalf("err %v after %d attempts, want unavailable after 1", err, srv.count(serverStream))
	}
}

// streamProtocols are the protocols in which a client or bidi stream
// runs: all three over HTTP/2 (h2c), where a stream is full duplex, and in
// process for v2.
func eachStream(t *testing.T, f func(t *testing.T, e env)) {
	t.Helper()
	for _, m := range majors {
		ps := []protocol{{"connect", overH2C}, grpcH2C, {"grpcweb", overH2C}}
		if slices.Contains(m.protocols, inprocess) {
			ps = append(ps, inprocess)
		}
		for _, p := range ps {
			e := env{m, p}
			t.Run(e.String(), func(t *testing.T) { f(t, e) })
		}
	}
}

// clientStreamFailFirst makes the first n client streams read every
// message and then fail with c; later ones answer with the messages
// joined.
func clientStreamFailFirst(n int, c code) handlers {
	return handlers{clientStream: func(in *call, recv func() (string, error)) (string, error) {
		got, err := recvAll(recv)
		if err != nil {
			return "", err
		}
		if in.n <= n {
			return "", fail(c, "attempt %d fails", in.n)
		}
		return fmt.Sprintf("%s from attempt %d", strings.Join(got, ","), in.n), nil
	}}
}

// TestClientStreamReplayed: every attempt of a client stream gets the
// messages the application sent, in order, then its close, and the third
// answers.
func TestClientStreamReplayed(t *testing.T) {
	eachStream(t, func(t *testing.T, e env) {
		srv := e.start(t, clientStreamFailFirst(2, serviceconfig.Unavailable))
		c, clk := e.dialAuto(t, srv, retryConfig(t, 4, `"UNAVAILABLE"`, ""))
		var n int
		st, err := c.open(e.countAttempts(context.Background(), &n), clientStream, "", http.Header{"X-Trace": {"t1"}})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range []string{"a", "b", "c"} {
			if err := st.Send(m); err != nil {
				t.Fatalf("Send %s: %v", m, err)
			}
		}
		if err := st.CloseSend(); err != nil {
			t.Fatal(err)
		}
		got, err := receiveAll(t, st)
		if err != nil || !slices.Equal(got, []string{"a,b,c from attempt 3"}) {
			t.Fatalf("received %q, %v; want the third attempt's answer", got, err)
		}
		if got := srv.payloads(clientStream); !slices.Equal(got, []string{"a,b,c", "a,b,c", "a,b,c"}) {
			t.Fatalf("attempts received %q, want a,b,c each", got)
		}
		if got := srv.previous(clientStream); !slices.Equal(got, []int{-1, 1, 2}) {
			t.Fatalf("server saw grpc-previous-rpc-attempts %v, want [absent 1 2]", got)
		}
		for i, a := range srv.seen(clientStream) {
			if a.header.Get("X-Trace") != "t1" {
				t.Fatalf("attempt %d lacks the request header", i+1)
			}
		}
		if n != 3 || len(clk.Sleeps()) != 2 {
			t.Fatalf("CountAttempts %d, sleeps %v; want 3 attempts, 2 sleeps", n, clk.Sleeps())
		}
	})
}

// TestBidiReplayedWhileSending: a bidi stream whose first attempt fails
// after reading two messages is retried while the application goes on
// sending: the second attempt gets all the messages sent, in order, and
// echoes them.
func TestBidiReplayedWhileSending(t *testing.T) {
	eachStream(t, func(t *testing.T, e env) {
		read2 := make(chan struct{})
		srv := e.start(t, handlers{bidi: func(in *call, recv func() (string, error), send func(string) error) error {
			if in.n == 1 {
				for range 2 {
					if _, err := recv(); err != nil {
						return err
					}
				}
				close(read2)
				return fail(serviceconfig.Unavailable, "failed after two messages")
			}
			for {
				m, err := recv()
				if errors.Is(err, io.EOF) {
					return nil
				}
				if err != nil {
					return err
				}
				if err := send(m); err != nil {
					return err
				}
			}
		}})
		c, _ := e.dialAuto(t, srv, retryConfig(t, 3, `"UNAVAILABLE"`, ""))
		var n int
		st, err := c.open(e.countAttempts(context.Background(), &n), bidiStream, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		received := make(chan []string, 1)
		go func() {
			got, _ := receiveAll(t, st)
			received <- got
		}()
		for _, m := range []string{"a", "b"} {
			if err := st.Send(m); err != nil {
				t.Fatalf("Send %s: %v", m, err)
			}
		}
		<-read2
		// The first attempt has failed, or is failing: these go to it, or
		// to the retry, which is sent them with the two before.
		for _, m := range []string{"c", "d"} {
			if err := st.Send(m); err != nil {
				t.Fatalf("Send %s: %v", m, err)
			}
		}
		if err := st.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if got := <-received; !slices.Equal(got, []string{"a", "b", "c", "d"}) {
			t.Fatalf("received %q, want a b c d echoed by the second attempt", got)
		}
		if got := srv.payloads(bidiStream); len(got) != 2 || got[1] != "a,b,c,d" {
			t.Fatalf("attempts received %q, want the second to get a,b,c,d", got)
		}
		if n != 2 {
			t.Fatalf("CountAttempts %d, want 2", n)
		}
	})
}

// TestBidiNotRetriedAfterFirstMessage: a bidi stream that has received a
// message is committed: its later failure is returned as it is, and what
// it kept is freed.
func TestBidiNotRetriedAfterFirstMessage(t *testing.T) {
	eachStream(t, func(t *testing.T, e env) {
		srv := e.start(t, handlers{bidi: func(_ *call, recv func() (string, error), send func(string) error) error {
			m, err := recv()
			if err != nil {
				return err
			}
			if err := send(m); err != nil {
				return err
			}
			if _, err := recv(); err != nil {
				return err
			}
			return fail(serviceconfig.Unavailable, "after a message")
		}})
		c, _ := e.dialAuto(t, srv, retryConfig(t, 3, `"UNAVAILABLE"`, ""))
		st, err := c.open(context.Background(), bidiStream, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send("a"); err != nil {
			t.Fatal(err)
		}
		if got, err := st.Receive(); err != nil || got != "a" {
			t.Fatalf("first message %q, %v", got, err)
		}
		if err := st.Send("b"); err != nil {
			t.Fatal(err)
		}
		_ = st.CloseSend()
		_, err = st.Receive()
		if e.codeOf(err) != serviceconfig.Unavailable || srv.count(bidiStream) != 1 {
			t.Fatalf("err %v after %d attempts, want unavailable after 1", err, srv.count(bidiStream))
		}
		var re *rebound.Error
		if errors.As(err, &re) {
			t.Fatalf("a committed stream's error should be connect's own, got %v", re)
		}
		_ = st.Close()
	})
}

// TestStreamBufferOverflowCommits: a message that would take a stream past
// its buffer limit is sent but commits the call: the attempt that fails
// after it is not retried. Below the limit, the same stream is.
func TestStreamBufferOverflowCommits(t *testing.T) {
	big := strings.Repeat("x", 600)
	for _, tc := range []struct {
		name     string
		perCall  int
		attempts int
	}{
		{"within the limit", 1 << 20, 2},
		{"over the limit", 1000, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachStream(t, func(t *testing.T, e env) {
				srv := e.start(t, clientStreamFailFirst(1, serviceconfig.Unavailable))
				c, _ := e.dialAuto(t, srv, retryConfig(t, 3, `"UNAVAILABLE"`, ""), withBufferLimits(16<<20, tc.perCall))
				st, err := c.open(context.Background(), clientStream, "", nil)
				if err != nil {
					t.Fatal(err)
				}
				for range 2 {
					if err := st.Send(big); err != nil && !errors.Is(err, io.EOF) {
						t.Fatal(err)
					}
				}
				_ = st.CloseSend()
				_, err = receiveAll(t, st)
				if got := srv.count(clientStream); got != tc.attempts {
					t.Fatalf("%d attempts, want %d (err %v)", got, tc.attempts, err)
				}
				if tc.attempts == 1 && (e.codeOf(err) != serviceconfig.Unavailable || errors.Is(err, rebound.ErrAttemptsExhausted)) {
					t.Fatalf("err %v, want the one attempt's unavailable", err)
				}
			})
		})
	}
}

// TestStreamsReleaseTheirBuffer: once streams commit or end, the
// interceptor holds none of their messages.
func TestStreamsReleaseTheirBuffer(t *testing.T) {
	eachStream(t, func(t *testing.T, e env) {
		srv := e.start(t, clientStreamFailFirst(1, serviceconfig.Unavailable))
		// A total just large enough for one call's messages: a leak would
		// make the next call overflow at once and so not be retried.
		c, _ := e.dialAuto(t, srv, retryConfig(t, 3, `"UNAVAILABLE"`, ""), withBufferLimits(4096, 4096))
		for k := range 5 {
			srv.setHandlers(clientStreamFailFirst(1, serviceconfig.Unavailable))
			st, err := c.open(context.Background(), clientStream, "", nil)
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if err := st.Send(strings.Repeat("y", 500)); err != nil {
					t.Fatal(err)
				}
			}
			_ = st.CloseSend()
			if _, err := receiveAll(t, st); err != nil || srv.count(clientStream) != 2 {
				t.Fatalf("call %d: %v after %d attempts, want success after 2", k+1, err, srv.count(clientStream))
			}
		}
	})
}
