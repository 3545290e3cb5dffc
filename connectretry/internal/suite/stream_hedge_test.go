package suite

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/serviceconfig"
)

// straggler makes the first attempt of every call hang until it is
// cancelled, telling started when it does; others answer at once with
// answer, given the request's payload.
func straggler(started chan<- struct{}, canceled chan<- struct{}) handlers {
	hang := func(in *call) error {
		close(started)
		<-in.ctx.Done()
		close(canceled)
		return in.ctx.Err()
	}
	return handlers{
		serverStream: func(in *call, send func(string) error) error {
			if in.n == 1 {
				return hang(in)
			}
			for j := range 2 {
				if err := send(fmt.Sprintf("%s %d/%d", in.value, in.n, j)); err != nil {
					return err
				}
			}
			return nil
		},
		clientStream: func(in *call, recv func() (string, error)) (string, error) {
			got, err := recvAll(recv)
			if err != nil {
				return "", err
			}
			if in.n == 1 {
				return "", hang(in)
			}
			return fmt.Sprintf("%s from attempt %d", strings.Join(got, ","), in.n), nil
		},
	}
}

// TestHedgedServerStream: a server stream whose first attempt straggles is
// hedged after the hedging delay; the hedge's messages are the call's and
// the straggler is cancelled.
func TestHedgedServerStream(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		started, canceled := make(chan struct{}), make(chan struct{})
		s := e.start(t, straggler(started, canceled))
		c, clk := e.dialManual(t, s, hedgeConfig(t, 3, "0.1s", `"UNAVAILABLE"`, ""))
		var n int
		st, err := c.open(e.countAttempts(context.Background(), &n), serverStream, "m", nil)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			<-started
			if clk.WaitPending(1) {
				clk.Advance(100 * time.Millisecond)
			}
		}()
		got, err := receiveAll(t, st)
		if err != nil || !slices.Equal(got, []string{"m 2/0", "m 2/1"}) {
			t.Fatalf("received %q, %v; want the hedge's messages", got, err)
		}
		select {
		case <-canceled:
		case <-time.After(10 * time.Second):
			t.Fatal("the straggler was not cancelled")
		}
		if got := s.previous(serverStream); !slices.Equal(got, []int{-1, 1}) || n != 2 {
			t.Fatalf("server saw grpc-previous-rpc-attempts %v, counted %d; want [absent 1], 2", got, n)
		}
		for k, a := range s.seen(serverStream) {
			if a.payload != "m" {
				t.Fatalf("attempt %d carried %q", k+1, a.payload)
			}
		}
	})
}

// TestHedgedClientStream: a client stream hedged once its request is
// complete: the hedge is sent every message again, and its answer is the
// call's.
func TestHedgedClientStream(t *testing.T) {
	eachStream(t, func(t *testing.T, e env) {
		started, canceled := make(chan struct{}), make(chan struct{})
		s := e.start(t, straggler(started, canceled))
		c, clk := e.dialManual(t, s, hedgeConfig(t, 3, "0.1s", `"UNAVAILABLE"`, ""))
		st, err := c.open(context.Background(), clientStream, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range []string{"a", "b", "c"} {
			if err := st.Send(m); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.CloseSend(); err != nil {
			t.Fatal(err)
		}
		go func() {
			<-started
			if clk.WaitPending(1) {
				clk.Advance(100 * time.Millisecond)
			}
		}()
		got, err := receiveAll(t, st)
		if err != nil || !slices.Equal(got, []string{"a,b,c from attempt 2"}) {
			t.Fatalf("received %q, %v; want the hedge's answer", got, err)
		}
		<-canceled
		if got := s.payloads(clientStream); !slices.Equal(got, []string{"a,b,c", "a,b,c"}) {
			t.Fatalf("attempts received %q, want a,b,c each", got)
		}
	})
}

// TestHedgedStreamNonFatal: a non-fatal failure sends the next hedge at
// once (the clock never moves), and a fatal one ends the call.
func TestHedgedStreamNonFatal(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		s := e.start(t, streamFailFirst(2, serviceconfig.Unavailable))
		c, _ := e.dialManual(t, s, hedgeConfig(t, 3, "10s", `"UNAVAILABLE"`, ""))
		st, err := c.open(context.Background(), serverStream, "m", nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := receiveAll(t, st)
		if err != nil || !slices.Equal(got, []string{"m 3/0", "m 3/1", "m 3/2"}) || s.count(serverStream) != 3 {
			t.Fatalf("received %q, %v after %d attempts; want the third's", got, err, s.count(serverStream))
		}

		s.setHandlers(streamFailFirst(1000, serviceconfig.InvalidArgument))
		st, err = c.open(context.Background(), serverStream, "m", nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = receiveAll(t, st)
		if e.codeOf(err) != serviceconfig.InvalidArgument || !errors.Is(err, rebound.ErrNotRetryable) || s.count(serverStream) != 1 {
			t.Fatalf("err %v after %d attempts, want invalid_argument, not retryable, after 1", err, s.count(serverStream))
		}
	})
}

// TestHedgedStreamThrottled: the budget refuses hedges as for unary calls.
func TestHedgedStreamThrottled(t *testing.T) {
	eachMajor(t, protocol{}, func(t *testing.T, e env) {
		s := e.start(t, streamFailFirst(1000, serviceconfig.Unavailable))
		cfg := hedgeConfig(t, 3, "10s", `"UNAVAILABLE"`, `,"retryThrottling":{"maxTokens":4,"tokenRatio":0.1}`)
		c, _ := e.dialManual(t, s, cfg, withServerName(uniqueName(t)))
		st, err := c.open(context.Background(), serverStream, "m", nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := receiveAll(t, st); !errors.Is(err, rebound.ErrThrottled) || s.count(serverStream) != 2 {
			t.Fatalf("err %v after %d attempts, want throttled after 2", err, s.count(serverStream))
		}
	})
}

// TestHedgedBidiStillSending: a stream still sending when it first
// receives is not hedged: its one attempt is the call's.
func TestHedgedBidiStillSending(t *testing.T) {
	eachStream(t, func(t *testing.T, e env) {
		s := e.start(t, handlers{bidi: func(in *call, recv func() (string, error), send func(string) error) error {
			if _, err := recv(); err != nil {
				return err
			}
			return fail(serviceconfig.Unavailable, "fails")
		}})
		c, _ := e.dialManual(t, s, hedgeConfig(t, 3, "0s", `"UNAVAILABLE"`, ""))
		var n int
		st, err := c.open(e.countAttempts(context.Background(), &n), bidiStream, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send("a"); err != nil {
			t.Fatal(err)
		}
		_, err = st.Receive()
		if e.codeOf(err) != serviceconfig.Unavailable || s.count(bidiStream) != 1 || n != 1 {
			t.Fatalf("err %v after %d attempts (counted %d), want unavailable after 1", err, s.count(bidiStream), n)
		}
		_ = st.CloseSend()
		_ = st.Close()
	})
}

// TestHedgedStreamStats: a hedged stream counts its hedges.
func TestHedgedStreamStats(t *testing.T) {
	eachMajor(t, protocol{}, func(t *testing.T, e env) {
		s := e.start(t, streamFailFirst(1, serviceconfig.Unavailable))
		c, i := e.dialWith(t, s, hedgeConfig(t, 3, "10s", `"UNAVAILABLE"`, ""))
		st, err := c.open(context.Background(), serverStream, "m", nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := receiveAll(t, st); err != nil {
			t.Fatal(err)
		}
		want := rebound.MethodStats{Calls: 1, Hedges: rebound.AttemptStats{Attempts: 1, Histogram: [8]uint64{1}}}
		if got := i.Stats()[serverStream]; got != want {
			t.Fatalf("stats %+v, want %+v", got, want)
		}
	})
}
