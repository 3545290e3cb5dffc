package connectretry_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/connectretry"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/internal/stretch"
	"github.com/rebound-go/rebound/serviceconfig"
)

func TestRetryUntilSuccess(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			srv := startServer(t, failFirst(2, connect.CodeUnavailable), p.http2)
			c, clk := dial(t, srv, p, retryConfig(t, 4, `"UNAVAILABLE"`, ""))
			var n int
			resp, err := call(connectretry.CountAttempts(context.Background(), &n), c.unary, "hi")
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.Msg.GetValue(); got != "hi from attempt 3" {
				t.Fatalf("response %q", got)
			}
			if got := srv.previous(unary); !slices.Equal(got, []int{-1, 1, 2}) {
				t.Fatalf("server saw grpc-previous-rpc-attempts %v, want [absent 1 2]", got)
			}
			if n != 3 {
				t.Fatalf("CountAttempts reported %d, want 3", n)
			}
			// random(0, 0.1s) then random(0, 0.2s), at 0.5.
			if got := clk.Sleeps(); !slices.Equal(got, []time.Duration{50 * time.Millisecond, 100 * time.Millisecond}) {
				t.Fatalf("backoff %v, want [50ms 100ms]", got)
			}
		})
	}
}

func TestNotRetryableCode(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			srv := startServer(t, failFirst(5, connect.CodeInvalidArgument), p.http2)
			c, clk := dial(t, srv, p, retryConfig(t, 4, `"UNAVAILABLE"`, ""))
			_, err := call(context.Background(), c.unary, "x")
			if connect.CodeOf(err) != connect.CodeInvalidArgument || srv.count(unary) != 1 {
				t.Fatalf("err %v after %d attempts, want invalid_argument after 1", err, srv.count(unary))
			}
			var re *rebound.Error
			if !errors.As(err, &re) || re.Attempts != 1 || !errors.Is(err, rebound.ErrNotRetryable) {
				t.Fatalf("err %v: want *rebound.Error with 1 attempt, not retryable", err)
			}
			if len(clk.Sleeps()) != 0 {
				t.Fatal("slept before giving up")
			}
		})
	}
}

func TestErrorCarriesLastAttempt(t *testing.T) {
	detail, err := connect.NewErrorDetail(wrapperspb.String("detail"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			srv := startServer(t, handlers{unary: func(_ context.Context, n int, _ *request) (*connect.Response[msg], error) {
				e := connect.NewError(connect.CodeUnavailable, fmt.Errorf("attempt %d fails", n))
				e.AddDetail(detail)
				e.Meta().Set("X-Attempt", fmt.Sprint(n))
				return nil, e
			}}, p.http2)
			c, _ := dial(t, srv, p, retryConfig(t, 3, `"UNAVAILABLE"`, ""))
			_, err := call(context.Background(), c.unary, "x")
			ce, ok := err.(*connect.Error)
			if !ok {
				t.Fatalf("err is %T, want *connect.Error", err)
			}
			if ce.Code() != connect.CodeUnavailable || ce.Message() != "attempt 3 fails" || err.Error() != "unavailable: attempt 3 fails" {
				t.Fatalf("code %v, message %q, text %q: want the last attempt's", ce.Code(), ce.Message(), err)
			}
			if got := ce.Meta().Get("X-Attempt"); got != "3" {
				t.Fatalf("metadata X-Attempt %q, want 3", got)
			}
			if len(ce.Details()) != 1 {
				t.Fatalf("%d details, want 1", len(ce.Details()))
			}
			if v, err := ce.Details()[0].Value(); err != nil || v.(*wrapperspb.StringValue).GetValue() != "detail" {
				t.Fatalf("detail %v, %v", v, err)
			}
			if !connect.IsWireError(err) {
				t.Fatal("the server's error is no longer a wire error")
			}
			var re *rebound.Error
			if !errors.As(err, &re) || re.Attempts != 3 || !errors.Is(err, rebound.ErrAttemptsExhausted) {
				t.Fatalf("err %v: want 3 attempts, attempts exhausted", err)
			}
			want := "rebound: gave up after 3 attempts (attempts exhausted): unavailable: attempt 3 fails"
			if re.Error() != want {
				t.Fatalf("Error() = %q, want %q", re.Error(), want)
			}
		})
	}
}

func TestMaxAttemptsClamped(t *testing.T) {
	for _, tc := range []struct {
		config int
		opts   []connectretry.Option
		want   int
	}{
		{10, nil, 5},
		{10, []connectretry.Option{connectretry.WithMaxAttempts(3)}, 3},
		{4, []connectretry.Option{connectretry.WithMaxAttempts(7)}, 4},
		{10, []connectretry.Option{connectretry.WithMaxAttempts(7)}, 7},
	} {
		srv := startServer(t, failFirst(100, connect.CodeUnavailable), false)
		c, _ := dial(t, srv, connectProtocol, retryConfig(t, tc.config, `"UNAVAILABLE"`, ""), tc.opts...)
		_, _ = call(context.Background(), c.unary, "x")
		if got := srv.count(unary); got != tc.want {
			t.Errorf("maxAttempts %d with %d options: %d attempts, want %d", tc.config, len(tc.opts), got, tc.want)
		}
	}
}

// pushbackHandler fails every unary call with UNAVAILABLE and the given
// pushback values, one list per call (nil: no pushback).
func pushbackHandler(values ...[]string) handlers {
	return handlers{unary: func(_ context.Context, n int, _ *request) (*connect.Response[msg], error) {
		e := connect.NewError(connect.CodeUnavailable, errors.New("busy"))
		if n <= len(values) {
			for _, v := range values[n-1] {
				e.Meta().Add("grpc-retry-pushback-ms", v)
			}
		}
		return nil, e
	}}
}

func TestPushback(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name     string
		values   [][]string
		attempts int
		sleeps   []time.Duration
		reason   error
	}{
		{"exact delay then backoff from the start", [][]string{nil, {"250"}, nil, nil}, 4, []time.Duration{50 * ms, 250 * ms, 50 * ms}, rebound.ErrAttemptsExhausted},
		{"zero", [][]string{{"0"}}, 4, []time.Duration{0, 50 * ms, 100 * ms}, rebound.ErrAttemptsExhausted},
		{"negative stops", [][]string{{"-1"}}, 1, nil, rebound.ErrPushback},
		{"garbage stops", [][]string{{"soon"}}, 1, nil, rebound.ErrPushback},
		{"leading zero stops", [][]string{{"0250"}}, 1, nil, rebound.ErrPushback},
		{"repeated stops", [][]string{{"10", "10"}}, 1, nil, rebound.ErrPushback},
	} {
		for _, p := range protocols {
			t.Run(tc.name+"/"+p.name, func(t *testing.T) {
				srv := startServer(t, pushbackHandler(tc.values...), p.http2)
				c, clk := dial(t, srv, p, retryConfig(t, 4, `"UNAVAILABLE"`, ""))
				_, err := call(context.Background(), c.unary, "x")
				if !errors.Is(err, tc.reason) || srv.count(unary) != tc.attempts {
					t.Fatalf("err %v after %d attempts, want %v after %d", err, srv.count(unary), tc.reason, tc.attempts)
				}
				// A zero delay makes no timer; drop zeros from the expectation.
				want := slices.DeleteFunc(slices.Clone(tc.sleeps), func(d time.Duration) bool { return d == 0 })
				if got := clk.Sleeps(); !slices.Equal(got, want) {
					t.Fatalf("sleeps %v, want %v", got, want)
				}
			})
		}
	}
}

func TestThrottlingAcrossCallsAndClients(t *testing.T) {
	srv := startServer(t, failFirst(1000, connect.CodeUnavailable), false)
	cfg := retryConfig(t, 5, `"UNAVAILABLE"`, `,"retryThrottling":{"maxTokens":6,"tokenRatio":0.5}`)
	a, _ := dial(t, srv, connectProtocol, cfg)
	b, _ := dial(t, srv, protocols[2], cfg) // another interceptor and protocol, same server name
	ctx := context.Background()
	// Tokens 6, threshold 3. Call 1 on a: 6→5 retry, 5→4 retry, 4→3 stop.
	_, err := call(ctx, a.unary, "x")
	if !errors.Is(err, rebound.ErrThrottled) || srv.count(unary) != 3 {
		t.Fatalf("call 1: %v after %d attempts, want throttled after 3", err, srv.count(unary))
	}
	// Call 2 on b shares the throttle: 3→2, no retry.
	_, err = call(ctx, b.unary, "x")
	if !errors.Is(err, rebound.ErrThrottled) || srv.count(unary) != 4 {
		t.Fatalf("call 2: %v, total attempts %d, want throttled, 4", err, srv.count(unary))
	}
	// Successes add 0.5 each: 2 → 3.5 after three, above the threshold.
	srv.setHandlers(handlers{})
	for range 3 {
		if _, err := call(ctx, b.unary, "ok"); err != nil {
			t.Fatal(err)
		}
	}
	srv.setHandlers(pushbackHandler()) // always UNAVAILABLE
	// 3.5→2.5 and refused: the failure is counted before the throttle is
	// asked, so the call makes exactly one attempt.
	_, err = call(ctx, a.unary, "x")
	if got := srv.count(unary); got != 1 || !errors.Is(err, rebound.ErrThrottled) {
		t.Fatalf("call after recovery: %d attempts, %v", got, err)
	}
}

func TestNonRetryableFailuresDoNotThrottle(t *testing.T) {
	srv := startServer(t, failFirst(1000, connect.CodeInvalidArgument), false)
	cfg := retryConfig(t, 3, `"UNAVAILABLE"`, `,"retryThrottling":{"maxTokens":4,"tokenRatio":1}`)
	c, _ := dial(t, srv, connectProtocol, cfg)
	for range 5 {
		_, _ = call(context.Background(), c.unary, "x")
	}
	srv.setHandlers(failFirst(1, connect.CodeUnavailable))
	if _, err := call(context.Background(), c.unary, "x"); err != nil {
		t.Fatalf("retry refused after non-retryable failures: %v", err)
	}
	if got := srv.count(unary); got != 2 {
		t.Fatalf("%d attempts, want 2", got)
	}
}

func TestDeadlineCoversAllAttempts(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			srv := startServer(t, failFirst(1000, connect.CodeUnavailable), p.http2)
			// Real clock: the backoff would be 9s, past the 5s deadline, so no
			// sleep may start.
			cfg := parse(t, fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"retryPolicy":{
				"maxAttempts":5,"initialBackoff":"10s","maxBackoff":"10s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`, service))
			i, err := connectretry.New(cfg, connectretry.WithRandom(clocktest.NewRand(0.9)))
			if err != nil {
				t.Fatal(err)
			}
			c := newClients(srv, p, i)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err = call(ctx, c.unary, "x")
			if !errors.Is(err, rebound.ErrDeadline) || connect.CodeOf(err) != connect.CodeUnavailable {
				t.Fatalf("err %v, want the last attempt's unavailable and ErrDeadline", err)
			}
			if ctx.Err() != nil {
				t.Fatal("returned after the deadline")
			}
			if srv.count(unary) != 1 {
				t.Fatalf("%d attempts, want 1", srv.count(unary))
			}
		})
	}
}

func TestDeadlineDuringAttempt(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			// The deadline must pass while the attempt is at the server.
			// On a busy machine the attempt may not get there before a
			// short deadline; the call ends all the same, and the test
			// tries again with a longer one.
			stretch.Run(t, 50*time.Millisecond, 7*time.Second, func(d time.Duration) error {
				// The handler outlasts the caller's deadline whatever its
				// own: a server that gave up first would make the failure
				// retryable.
				release := make(chan struct{})
				defer close(release)
				srv := startServer(t, handlers{unary: func(context.Context, int, *request) (*connect.Response[msg], error) {
					<-release
					return nil, connect.NewError(connect.CodeUnavailable, errors.New("too late"))
				}}, p.http2)
				c, _ := dial(t, srv, p, retryConfig(t, 5, `"UNAVAILABLE","DEADLINE_EXCEEDED"`, ""))
				ctx, cancel := context.WithTimeout(context.Background(), d)
				defer cancel()
				_, err := call(ctx, c.unary, "x")
				if connect.CodeOf(err) != connect.CodeDeadlineExceeded || !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("err %v, want deadline_exceeded", err)
				}
				switch n := srv.count(unary); {
				case n == 0:
					return errors.New("the attempt did not reach the server before the deadline")
				case n > 1:
					t.Fatalf("%d attempts, want 1", n)
				}
				return nil
			})
		})
	}
}

func TestMethodTimeoutApplied(t *testing.T) {
	seen := make(chan time.Duration, 1)
	srv := startServer(t, handlers{unary: func(ctx context.Context, _ int, _ *request) (*connect.Response[msg], error) {
		dl, ok := ctx.Deadline()
		if !ok {
			seen <- -1
		} else {
			seen <- time.Until(dl)
		}
		return connect.NewResponse(&msg{}), nil
	}}, true)
	cfg := parse(t, fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"timeout":"2s","retryPolicy":{
		"maxAttempts":2,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`, service))
	for _, p := range protocols {
		c, _ := dial(t, srv, p, cfg)
		if _, err := call(context.Background(), c.unary, "x"); err != nil {
			t.Fatal(err)
		}
		if d := <-seen; d <= 0 || d > 2*time.Second {
			t.Fatalf("%s: server deadline in %v, want within the 2s method timeout", p.name, d)
		}
		// A caller deadline shorter than the method timeout wins.
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		if _, err := call(ctx, c.unary, "x"); err != nil {
			t.Fatal(err)
		}
		cancel()
		if d := <-seen; d <= 0 || d > 500*time.Millisecond {
			t.Fatalf("%s: server deadline in %v, want within the caller's 500ms", p.name, d)
		}
	}
}

func TestRetriesDisabled(t *testing.T) {
	srv := startServer(t, failFirst(1, connect.CodeUnavailable), false)
	c, _ := dial(t, srv, connectProtocol, retryConfig(t, 4, `"UNAVAILABLE"`, ""), connectretry.WithRetriesDisabled())
	var n int
	_, err := call(connectretry.CountAttempts(context.Background(), &n), c.unary, "x")
	if connect.CodeOf(err) != connect.CodeUnavailable || n != 1 || srv.count(unary) != 1 {
		t.Fatalf("err %v, attempts %d, server %d; want one unavailable attempt", err, n, srv.count(unary))
	}
	var re *rebound.Error
	if errors.As(err, &re) {
		t.Fatal("a call without retries should return connect's error as is")
	}
}

func TestMethodWithoutPolicyPassesThrough(t *testing.T) {
	srv := startServer(t, failFirst(1, connect.CodeUnavailable), false)
	cfg := parse(t, `{"methodConfig":[{"name":[{"service":"other.Service"}],"retryPolicy":{
		"maxAttempts":4,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`)
	for _, cfg := range []struct {
		name string
		cfg  *serviceconfig.Config
	}{{"other service", cfg}, {"nil config", nil}} {
		srv.setHandlers(failFirst(1, connect.CodeUnavailable))
		c, _ := dial(t, srv, connectProtocol, cfg.cfg)
		_, err := call(context.Background(), c.unary, "x")
		if connect.CodeOf(err) != connect.CodeUnavailable || srv.count(unary) != 1 {
			t.Fatalf("%s: err %v after %d attempts", cfg.name, err, srv.count(unary))
		}
	}
}

func TestRequestReplayedNotModified(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			srv := startServer(t, failFirst(2, connect.CodeUnavailable), p.http2)
			c, _ := dial(t, srv, p, retryConfig(t, 4, `"UNAVAILABLE"`, ""))
			req := connect.NewRequest(wrapperspb.String("payload-123"))
			req.Header().Set("X-Trace", "t1")
			if _, err := c.unary.CallUnary(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			for i, a := range srv.seen(unary) {
				if a.payload != "payload-123" || a.header.Get("X-Trace") != "t1" {
					t.Fatalf("attempt %d carried %q with X-Trace %q", i+1, a.payload, a.header.Get("X-Trace"))
				}
			}
			if v := req.Header().Values("Grpc-Previous-Rpc-Attempts"); v != nil {
				t.Fatalf("the caller's request gained grpc-previous-rpc-attempts %v", v)
			}
			if req.HTTPMethod() != http.MethodPost {
				t.Fatalf("request HTTP method %q, want POST", req.HTTPMethod())
			}
		})
	}
}

func TestHTTPGetRetried(t *testing.T) {
	srv := startServer(t, failFirst(2, connect.CodeUnavailable), false)
	i, err := connectretry.New(retryConfig(t, 4, `"UNAVAILABLE"`, ""), connectretry.WithClock(clocktest.NewAuto()))
	if err != nil {
		t.Fatal(err)
	}
	c := newClients(srv, connectProtocol, i, connect.WithHTTPGet(), connect.WithIdempotency(connect.IdempotencyNoSideEffects))
	req := connect.NewRequest(wrapperspb.String("q"))
	resp, err := c.unary.CallUnary(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Msg.GetValue() != "q from attempt 3" || req.HTTPMethod() != http.MethodGet {
		t.Fatalf("response %q sent with %s, want the third attempt's, with GET", resp.Msg.GetValue(), req.HTTPMethod())
	}
	if got := srv.previous(unary); !slices.Equal(got, []int{-1, 1, 2}) {
		t.Fatalf("server saw grpc-previous-rpc-attempts %v, want [absent 1 2]", got)
	}
}

func TestCallInfoDescribesLastAttempt(t *testing.T) {
	srv := startServer(t, handlers{unary: func(_ context.Context, n int, _ *request) (*connect.Response[msg], error) {
		if n < 3 {
			e := connect.NewError(connect.CodeUnavailable, errors.New("again"))
			e.Meta().Set("Attempt", fmt.Sprint(n))
			return nil, e
		}
		resp := connect.NewResponse(&msg{})
		resp.Header().Set("Attempt", fmt.Sprint(n))
		return resp, nil
	}}, true)
	c, _ := dial(t, srv, protocols[1], retryConfig(t, 4, `"UNAVAILABLE"`, ""))
	ctx, info := connect.NewClientContext(context.Background())
	info.RequestHeader().Set("X-From-Call-Info", "yes")
	if _, err := call(ctx, c.unary, "x"); err != nil {
		t.Fatal(err)
	}
	if got := info.ResponseHeader().Get("Attempt"); got != "3" {
		t.Fatalf("CallInfo response header Attempt %q, want 3", got)
	}
	for i, a := range srv.seen(unary) {
		if a.header.Get("X-From-Call-Info") != "yes" {
			t.Fatalf("attempt %d lacks the CallInfo's request header", i+1)
		}
	}
}

func TestCallerCancellationNotRetried(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := startServer(t, handlers{unary: func(sctx context.Context, _ int, _ *request) (*connect.Response[msg], error) {
		cancel()
		<-sctx.Done()
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("late"))
	}}, false)
	c, _ := dial(t, srv, connectProtocol, retryConfig(t, 4, `"UNAVAILABLE","CANCELLED"`, ""))
	_, err := call(ctx, c.unary, "x")
	if connect.CodeOf(err) != connect.CodeCanceled || srv.count(unary) != 1 {
		t.Fatalf("err %v after %d attempts, want canceled after 1", err, srv.count(unary))
	}
}

func TestConnectionRefusedRetried(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	clk := clocktest.NewAuto()
	i, err := connectretry.New(retryConfig(t, 3, `"UNAVAILABLE"`, ""), connectretry.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	c := connect.NewClient[msg, msg](&http.Client{Transport: tr}, "http://"+addr+unary, connect.WithInterceptors(i))
	var n int
	_, err = call(connectretry.CountAttempts(context.Background(), &n), c, "x")
	if connect.CodeOf(err) != connect.CodeUnavailable || n != 3 || !errors.Is(err, rebound.ErrAttemptsExhausted) {
		t.Fatalf("err %v after %d attempts, want unavailable after 3", err, n)
	}
}

func TestPreviousAttempts(t *testing.T) {
	for _, tc := range []struct {
		values []string
		want   int
	}{
		{nil, 0}, {[]string{"2"}, 2}, {[]string{"-1"}, 0}, {[]string{"x"}, 0}, {[]string{"1", "2"}, 0},
	} {
		h := http.Header{}
		for _, v := range tc.values {
			h.Add("grpc-previous-rpc-attempts", v)
		}
		if got := connectretry.PreviousAttempts(h); got != tc.want {
			t.Errorf("PreviousAttempts(%v) = %d, want %d", tc.values, got, tc.want)
		}
	}
}

func TestInvalidOptions(t *testing.T) {
	for name, opt := range map[string]connectretry.Option{
		"max attempts 0": connectretry.WithMaxAttempts(0),
		"empty server":   connectretry.WithServerName(""),
		"nil clock":      connectretry.WithClock(nil),
		"nil random":     connectretry.WithRandom(nil),
		"nil meters":     connectretry.WithMeterProvider(nil),
		"nil logger":     connectretry.WithLogger(nil),
		"nil option":     nil,
	} {
		if _, err := connectretry.New(nil, opt); err == nil || !strings.HasPrefix(err.Error(), "connectretry: ") {
			t.Errorf("%s: New gave %v", name, err)
		}
	}
	srv := startServer(t, handlers{}, false)
	c := newClients(srv, connectProtocol, connectretry.NewInterceptor(nil, connectretry.WithMaxAttempts(-1)))
	_, err := call(context.Background(), c.unary, "x")
	if connect.CodeOf(err) != connect.CodeInternal || !strings.Contains(err.Error(), "WithMaxAttempts") || srv.count(unary) != 0 {
		t.Fatalf("unary: err %v, want internal naming the option, without reaching the server", err)
	}
	_, err = c.serverStream.CallServerStream(context.Background(), connect.NewRequest(wrapperspb.String("x")))
	if connect.CodeOf(err) != connect.CodeInternal || srv.count(serverStream) != 0 {
		t.Fatalf("stream: err %v, want internal without reaching the server", err)
	}
}

func TestZeroInterceptorPassesThrough(t *testing.T) {
	srv := startServer(t, failFirst(1, connect.CodeUnavailable), false)
	c := newClients(srv, connectProtocol, &connectretry.Interceptor{})
	var n int
	_, err := call(connectretry.CountAttempts(context.Background(), &n), c.unary, "x")
	if connect.CodeOf(err) != connect.CodeUnavailable || n != 1 || srv.count(unary) != 1 {
		t.Fatalf("err %v, counted %d, server %d; want one unavailable attempt", err, n, srv.count(unary))
	}
}

func FuzzPreviousAttempts(f *testing.F) {
	for _, s := range []string{"0", "1", "4", "-1", "+2", "007", "99999999999999999999", "x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		h := http.Header{"Grpc-Previous-Rpc-Attempts": {v}}
		n := connectretry.PreviousAttempts(h)
		if n < 0 {
			t.Fatalf("PreviousAttempts(%q) = %d, want >= 0", v, n)
		}
		if n > 0 && strings.TrimLeft(strings.TrimPrefix(v, "+"), "0") != fmt.Sprint(n) {
			t.Fatalf("PreviousAttempts(%q) = %d, not the header's value", v, n)
		}
	})
}
