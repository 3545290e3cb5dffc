package connectretry_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/connectretry"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/serviceconfig"
)

// dialManual is dial with a clock that moves only when the test says.
func dialManual(t testing.TB, s *server, p protocol, cfg *serviceconfig.Config, opts ...connectretry.Option) (clients, *clocktest.Clock) {
	t.Helper()
	clk := clocktest.New()
	i, err := connectretry.New(cfg, append([]connectretry.Option{connectretry.WithClock(clk)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return newClients(s, p, i), clk
}

func TestHedgeFirstSuccessWins(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			started := make(chan struct{})
			canceled := make(chan struct{})
			srv := startServer(t, handlers{unary: func(ctx context.Context, n int, _ *request) (*connect.Response[msg], error) {
				if n == 1 {
					// A straggler: it answers only once the hedge has won.
					close(started)
					<-ctx.Done()
					close(canceled)
					return nil, connect.NewError(connect.CodeCanceled, ctx.Err())
				}
				return connect.NewResponse(wrapperspb.String(fmt.Sprint("hedge ", n))), nil
			}}, p.http2)
			c, clk := dialManual(t, srv, p, hedgeConfig(t, 3, "0.1s", `"UNAVAILABLE"`, ""))
			type result struct {
				resp *connect.Response[msg]
				err  error
				n    int
			}
			done := make(chan result, 1)
			req := connect.NewRequest(wrapperspb.String("x"))
			go func() {
				var n int
				resp, err := c.unary.CallUnary(connectretry.CountAttempts(context.Background(), &n), req)
				done <- result{resp, err, n}
			}()
			<-started
			if !clk.WaitPending(1) {
				t.Fatal("no hedge was scheduled")
			}
			clk.Advance(100 * time.Millisecond)
			r := <-done
			if r.err != nil {
				t.Fatal(r.err)
			}
			if got := r.resp.Msg.GetValue(); got != "hedge 2" {
				t.Fatalf("got %q, want the hedge's answer", got)
			}
			select {
			case <-canceled:
			case <-time.After(10 * time.Second):
				t.Fatal("the losing attempt was not cancelled")
			}
			if got := srv.previous(unary); !slices.Equal(got, []int{-1, 1}) {
				t.Fatalf("server saw grpc-previous-rpc-attempts %v, want [absent 1]", got)
			}
			if r.n != 2 {
				t.Fatalf("CountAttempts reported %d, want 2", r.n)
			}
			if req.HTTPMethod() != http.MethodPost || req.Header().Get("Grpc-Previous-Rpc-Attempts") != "" {
				t.Fatalf("caller's request: method %q, header %v", req.HTTPMethod(), req.Header())
			}
		})
	}
}

func TestHedgeNonFatalSendsNextAtOnce(t *testing.T) {
	srv := startServer(t, failFirst(1000, connect.CodeUnavailable), true)
	// The clock never moves: every hedge after the first is sent because
	// the one before failed with a non-fatal code.
	c, _ := dialManual(t, srv, protocols[1], hedgeConfig(t, 3, "10s", `"UNAVAILABLE"`, ""))
	_, err := call(context.Background(), c.unary, "x")
	var re *rebound.Error
	if !errors.As(err, &re) || re.Attempts != 3 || !errors.Is(err, rebound.ErrAttemptsExhausted) || connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("err %v, want unavailable after 3 attempts, attempts exhausted", err)
	}
	if srv.count(unary) != 3 {
		t.Fatalf("server saw %d attempts, want 3", srv.count(unary))
	}
}

func TestHedgeFatalCodeStops(t *testing.T) {
	srv := startServer(t, failFirst(1000, connect.CodeInvalidArgument), false)
	c, _ := dialManual(t, srv, connectProtocol, hedgeConfig(t, 3, "10s", `"UNAVAILABLE"`, ""))
	_, err := call(context.Background(), c.unary, "x")
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !errors.Is(err, rebound.ErrNotRetryable) || srv.count(unary) != 1 {
		t.Fatalf("err %v after %d attempts, want invalid_argument, not retryable, after 1", err, srv.count(unary))
	}
}

func TestHedgePushback(t *testing.T) {
	t.Run("stop", func(t *testing.T) {
		srv := startServer(t, pushbackHandler([]string{"-1"}), false)
		c, _ := dialManual(t, srv, connectProtocol, hedgeConfig(t, 3, "10s", `"UNAVAILABLE"`, ""))
		_, err := call(context.Background(), c.unary, "x")
		if !errors.Is(err, rebound.ErrPushback) || srv.count(unary) != 1 {
			t.Fatalf("err %v after %d attempts, want pushback after 1", err, srv.count(unary))
		}
	})
	t.Run("delay", func(t *testing.T) {
		srv := startServer(t, pushbackHandler([]string{"250"}), true)
		c, clk := dialManual(t, srv, protocols[1], hedgeConfig(t, 2, "10s", `"UNAVAILABLE"`, ""))
		done := make(chan error, 1)
		go func() {
			_, err := call(context.Background(), c.unary, "x")
			done <- err
		}()
		// The pushback replaces the 10s hedging delay by 250ms.
		if !clk.WaitCreated(2) {
			t.Fatal("no hedge was scheduled after the pushback")
		}
		if got := clk.Sleeps(); !slices.Equal(got, []time.Duration{10 * time.Second, 250 * time.Millisecond}) {
			t.Fatalf("timers %v, want [10s 250ms]", got)
		}
		if srv.count(unary) != 1 {
			t.Fatalf("%d attempts before the pushback delay, want 1", srv.count(unary))
		}
		clk.Advance(250 * time.Millisecond)
		if err := <-done; !errors.Is(err, rebound.ErrAttemptsExhausted) || srv.count(unary) != 2 {
			t.Fatalf("err %v after %d attempts, want exhausted after 2", err, srv.count(unary))
		}
	})
}

func TestHedgeThrottled(t *testing.T) {
	srv := startServer(t, failFirst(1000, connect.CodeUnavailable), false)
	// Tokens 4, threshold 2: the first call's two failures leave 2, at the
	// threshold, so its third hedge and any hedge of the next call are not
	// sent.
	cfg := hedgeConfig(t, 3, "10s", `"UNAVAILABLE"`, `,"retryThrottling":{"maxTokens":4,"tokenRatio":0.1}`)
	c, _ := dialManual(t, srv, connectProtocol, cfg)
	_, err := call(context.Background(), c.unary, "x")
	if !errors.Is(err, rebound.ErrThrottled) || srv.count(unary) != 2 {
		t.Fatalf("call 1: err %v after %d attempts, want throttled after 2", err, srv.count(unary))
	}
	_, err = call(context.Background(), c.unary, "x")
	if !errors.Is(err, rebound.ErrThrottled) || srv.count(unary) != 3 {
		t.Fatalf("call 2: err %v, %d attempts in all, want throttled, 3", err, srv.count(unary))
	}
}

func TestHedgeHidesCallInfo(t *testing.T) {
	srv := startServer(t, handlers{unary: func(_ context.Context, n int, _ *request) (*connect.Response[msg], error) {
		if n < 3 {
			return nil, connect.NewError(connect.CodeUnavailable, errors.New("again"))
		}
		resp := connect.NewResponse(&msg{})
		resp.Header().Set("Attempt", fmt.Sprint(n))
		return resp, nil
	}}, true)
	// All three attempts at once: connect would record each on the
	// CallInfo concurrently.
	c, _ := dialManual(t, srv, protocols[1], hedgeConfig(t, 3, "0s", `"UNAVAILABLE"`, ""))
	ctx, info := connect.NewClientContext(context.Background())
	info.RequestHeader().Set("X-From-Call-Info", "yes")
	resp, err := call(ctx, c.unary, "x")
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header().Get("Attempt") != "3" {
		t.Fatalf("response header Attempt %q, want 3", resp.Header().Get("Attempt"))
	}
	if info.ResponseHeader() != nil {
		t.Fatalf("CallInfo response header %v, want none for a hedged call", info.ResponseHeader())
	}
	for i, a := range srv.seen(unary) {
		if a.header.Get("X-From-Call-Info") != "yes" {
			t.Fatalf("attempt %d lacks the CallInfo's request header", i+1)
		}
	}
}
