package suite

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

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/internal/stretch"
	"github.com/rebound-go/rebound/serviceconfig"
)

func TestRetryUntilSuccess(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		srv := e.start(t, failFirst(2, serviceconfig.Unavailable))
		c, clk := e.dialAuto(t, srv, retryConfig(t, 4, `"UNAVAILABLE"`, ""))
		var n int
		r, err := c.unary(e.countAttempts(context.Background(), &n), "hi", http.Header{"X-Trace": {"t1"}})
		if err != nil {
			t.Fatal(err)
		}
		if r.value != "hi from attempt 3" {
			t.Fatalf("response %q", r.value)
		}
		if got := srv.previous(unary); !slices.Equal(got, []int{-1, 1, 2}) {
			t.Fatalf("server saw grpc-previous-rpc-attempts %v, want [absent 1 2]", got)
		}
		for i, a := range srv.seen(unary) {
			if a.payload != "hi" || a.header.Get("X-Trace") != "t1" {
				t.Fatalf("attempt %d carried %q with X-Trace %q", i+1, a.payload, a.header.Get("X-Trace"))
			}
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

func TestNotRetryableCode(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		srv := e.start(t, failFirst(5, serviceconfig.InvalidArgument))
		c, clk := e.dialAuto(t, srv, retryConfig(t, 4, `"UNAVAILABLE"`, ""))
		_, err := c.unary(context.Background(), "x", nil)
		if e.codeOf(err) != serviceconfig.InvalidArgument || srv.count(unary) != 1 {
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

func TestErrorCarriesLastAttempt(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		srv := e.start(t, handlers{unary: func(in *call) (string, error) {
			f := fail(serviceconfig.Unavailable, "attempt %d fails", in.n).with("X-Attempt", fmt.Sprint(in.n))
			f.details = []proto.Message{wrapperspb.String("detail")}
			return "", f
		}})
		c, _ := e.dialAuto(t, srv, retryConfig(t, 3, `"UNAVAILABLE"`, ""))
		r, err := c.unary(context.Background(), "x", nil)
		if e.codeOf(err) != serviceconfig.Unavailable {
			t.Fatalf("code %v, want the last attempt's", e.codeOf(err))
		}
		if got := r.meta.Get("X-Attempt"); got != "3" {
			t.Fatalf("metadata X-Attempt %q, want 3", got)
		}
		if !e.remote(err) {
			t.Fatal("the server's error is no longer the server's")
		}
		var re *rebound.Error
		if !errors.As(err, &re) || re.Attempts != 3 || !errors.Is(err, rebound.ErrAttemptsExhausted) {
			t.Fatalf("err %v: want 3 attempts, attempts exhausted", err)
		}
		if want := "rebound: gave up after 3 attempts (attempts exhausted): unavailable: attempt 3 fails"; re.Error() != want {
			t.Fatalf("rebound.Error says %q, want %q", re.Error(), want)
		}
		checkLastAttempt(t, e, err, "attempt 3 fails", "detail")
	})
}

func TestMaxAttemptsClamped(t *testing.T) {
	eachMajor(t, protocol{}, func(t *testing.T, e env) {
		for _, tc := range []struct {
			config int
			opts   []option
			want   int
		}{
			{10, nil, 5},
			{10, []option{withMaxAttemptsCap(3)}, 3},
			{4, []option{withMaxAttemptsCap(7)}, 4},
			{10, []option{withMaxAttemptsCap(7)}, 7},
		} {
			srv := e.start(t, failFirst(100, serviceconfig.Unavailable))
			c, _ := e.dialAuto(t, srv, retryConfig(t, tc.config, `"UNAVAILABLE"`, ""), tc.opts...)
			_, _ = c.unary(context.Background(), "x", nil)
			if got := srv.count(unary); got != tc.want {
				t.Errorf("maxAttempts %d with %d options: %d attempts, want %d", tc.config, len(tc.opts), got, tc.want)
			}
		}
	})
}

// pushbackHandler fails every unary call with UNAVAILABLE and the given
// pushback values, one list per call (nil: no pushback).
func pushbackHandler(values ...[]string) handlers {
	return handlers{unary: func(in *call) (string, error) {
		f := fail(serviceconfig.Unavailable, "busy")
		if in.n <= len(values) {
			for _, v := range values[in.n-1] {
				f.with("grpc-retry-pushback-ms", v)
			}
		}
		return "", f
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
		t.Run(tc.name, func(t *testing.T) {
			each(t, func(t *testing.T, e env) {
				srv := e.start(t, pushbackHandler(tc.values...))
				c, clk := e.dialAuto(t, srv, retryConfig(t, 4, `"UNAVAILABLE"`, ""))
				_, err := c.unary(context.Background(), "x", nil)
				if !errors.Is(err, tc.reason) || srv.count(unary) != tc.attempts {
					t.Fatalf("err %v after %d attempts, want %v after %d", err, srv.count(unary), tc.reason, tc.attempts)
				}
				// A zero delay makes no timer; drop zeros from the expectation.
				want := slices.DeleteFunc(slices.Clone(tc.sleeps), func(d time.Duration) bool { return d == 0 })
				if got := clk.Sleeps(); !slices.Equal(got, want) {
					t.Fatalf("sleeps %v, want %v", got, want)
				}
			})
		})
	}
}

func TestThrottlingAcrossCallsAndClients(t *testing.T) {
	eachMajor(t, protocol{}, func(t *testing.T, e env) {
		srv := e.start(t, failFirst(1000, serviceconfig.Unavailable))
		cfg := retryConfig(t, 5, `"UNAVAILABLE"`, `,"retryThrottling":{"maxTokens":6,"tokenRatio":0.5}`)
		name := withServerName(uniqueName(t))
		a, _ := e.dialAuto(t, srv, cfg, name)
		b, _ := e.major.dialAuto(t, srv, grpcwebHTTP1, cfg, name) // another interceptor and protocol, same server name
		ctx := context.Background()
		// Tokens 6, threshold 3. Call 1 on a: 6→5 retry, 5→4 retry, 4→3 stop.
		_, err := a.unary(ctx, "x", nil)
		if !errors.Is(err, rebound.ErrThrottled) || srv.count(unary) != 3 {
			t.Fatalf("call 1: %v after %d attempts, want throttled after 3", err, srv.count(unary))
		}
		// Call 2 on b shares the throttle: 3→2, no retry.
		_, err = b.unary(ctx, "x", nil)
		if !errors.Is(err, rebound.ErrThrottled) || srv.count(unary) != 4 {
			t.Fatalf("call 2: %v, total attempts %d, want throttled, 4", err, srv.count(unary))
		}
		// Successes add 0.5 each: 2 → 3.5 after three, above the threshold.
		srv.setHandlers(handlers{})
		for range 3 {
			if _, err := b.unary(ctx, "ok", nil); err != nil {
				t.Fatal(err)
			}
		}
		srv.setHandlers(pushbackHandler()) // always UNAVAILABLE
		// 3.5→2.5 and refused: the failure is counted before the throttle is
		// asked, so the call makes exactly one attempt.
		_, err = a.unary(ctx, "x", nil)
		if got := srv.count(unary); got != 1 || !errors.Is(err, rebound.ErrThrottled) {
			t.Fatalf("call after recovery: %d attempts, %v", got, err)
		}
	})
}

func TestNonRetryableFailuresDoNotThrottle(t *testing.T) {
	eachMajor(t, protocol{}, func(t *testing.T, e env) {
		srv := e.start(t, failFirst(1000, serviceconfig.InvalidArgument))
		cfg := retryConfig(t, 3, `"UNAVAILABLE"`, `,"retryThrottling":{"maxTokens":4,"tokenRatio":1}`)
		c, _ := e.dialAuto(t, srv, cfg, withServerName(uniqueName(t)))
		for range 5 {
			_, _ = c.unary(context.Background(), "x", nil)
		}
		srv.setHandlers(failFirst(1, serviceconfig.Unavailable))
		if _, err := c.unary(context.Background(), "x", nil); err != nil {
			t.Fatalf("retry refused after non-retryable failures: %v", err)
		}
		if got := srv.count(unary); got != 2 {
			t.Fatalf("%d attempts, want 2", got)
		}
	})
}

func TestDeadlineCoversAllAttempts(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		srv := e.start(t, failFirst(1000, serviceconfig.Unavailable))
		// Real clock: the backoff would be 9s, past the 5s deadline, so no
		// sleep may start.
		cfg := parse(t, fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"retryPolicy":{
			"maxAttempts":5,"initialBackoff":"10s","maxBackoff":"10s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`, service))
		c, _ := e.dialWith(t, srv, cfg, withRandom(clocktest.NewRand(0.9)))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := c.unary(ctx, "x", nil)
		if !errors.Is(err, rebound.ErrDeadline) || e.codeOf(err) != serviceconfig.Unavailable {
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

func TestDeadlineDuringAttempt(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		// The deadline must pass while the attempt is at the server. On a
		// busy machine the attempt may not get there before a short
		// deadline; the call ends all the same, and the test tries again
		// with a longer one.
		stretch.Run(t, 50*time.Millisecond, 7*time.Second, func(d time.Duration) error {
			// The handler outlasts the caller's deadline whatever its
			// own: a server that gave up first would make the failure
			// retryable. In process, where it runs on the caller's
			// context, it answers as that ends: too late for a retry.
			release := make(chan struct{})
			defer close(release)
			srv := e.start(t, handlers{unary: func(in *call) (string, error) {
				var done <-chan struct{}
				if e.p.over == inProcess {
					done = in.ctx.Done()
				}
				select {
				case <-release:
				case <-done:
				}
				return "", fail(serviceconfig.Unavailable, "too late")
			}})
			c, _ := e.dialAuto(t, srv, retryConfig(t, 5, `"UNAVAILABLE","DEADLINE_EXCEEDED"`, ""))
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			_, err := c.unary(ctx, "x", nil)
			if e.codeOf(err) != serviceconfig.DeadlineExceeded || !errors.Is(err, context.DeadlineExceeded) {
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

func TestMethodTimeoutApplied(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		// The server's deadline is the method's timeout, or the caller's
		// deadline when that is shorter. Each call must reach the server
		// and answer within its own: on a busy machine that takes longer,
		// and a call that ran out of time (or reached the server past its
		// deadline) is tried again with both twice as long, the method's
		// timeout four times the caller's deadline.
		stretch.Run(t, 500*time.Millisecond, 8*time.Second, func(d time.Duration) error {
			timeout := 4 * d
			cfg := parse(t, fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"timeout":"%gs","retryPolicy":{
				"maxAttempts":2,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`, service, timeout.Seconds()))
			type deadline struct {
				set  bool
				left time.Duration
			}
			seen := make(chan deadline, 1)
			srv := e.start(t, handlers{unary: func(in *call) (string, error) {
				dl, ok := in.ctx.Deadline()
				seen <- deadline{ok, time.Until(dl)}
				return "", nil
			}})
			c, _ := e.dialAuto(t, srv, cfg)
			check := func(ctx context.Context, limit time.Duration, whose string) error {
				t.Helper()
				_, err := c.unary(ctx, "x", nil)
				if err != nil {
					if e.codeOf(err) == serviceconfig.DeadlineExceeded {
						return fmt.Errorf("%s %v ran out: %v", whose, limit, err)
					}
					t.Fatal(err)
				}
				switch sd := <-seen; {
				case !sd.set:
					t.Fatalf("the server had no deadline, want %s %v", whose, limit)
				case sd.left > limit:
					t.Fatalf("server deadline in %v, want within %s %v", sd.left, whose, limit)
				case sd.left <= 0:
					return fmt.Errorf("%s %v had run out when the handler ran", whose, limit)
				}
				return nil
			}
			if err := check(context.Background(), timeout, "the method timeout"); err != nil {
				return err
			}
			// A caller deadline shorter than the method timeout wins.
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			return check(ctx, d, "the caller's deadline")
		})
	})
}

func TestRetriesDisabled(t *testing.T) {
	eachMajor(t, protocol{}, func(t *testing.T, e env) {
		srv := e.start(t, failFirst(1, serviceconfig.Unavailable))
		c, _ := e.dialAuto(t, srv, retryConfig(t, 4, `"UNAVAILABLE"`, ""), withRetriesDisabled())
		var n int
		_, err := c.unary(e.countAttempts(context.Background(), &n), "x", nil)
		if e.codeOf(err) != serviceconfig.Unavailable || n != 1 || srv.count(unary) != 1 {
			t.Fatalf("err %v, attempts %d, server %d; want one unavailable attempt", err, n, srv.count(unary))
		}
		var re *rebound.Error
		if errors.As(err, &re) {
			t.Fatal("a call without retries should return connect's error as is")
		}
	})
}

func TestMethodWithoutPolicyPassesThrough(t *testing.T) {
	other := `{"methodConfig":[{"name":[{"service":"other.Service"}],"retryPolicy":{
		"maxAttempts":4,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`
	each(t, func(t *testing.T, e env) {
		srv := e.start(t, handlers{})
		for _, cfg := range []struct {
			name string
			cfg  *serviceconfig.Config
		}{{"other service", parse(t, other)}, {"nil config", nil}} {
			srv.setHandlers(failFirst(1, serviceconfig.Unavailable))
			c, _ := e.dialAuto(t, srv, cfg.cfg)
			_, err := c.unary(context.Background(), "x", nil)
			if e.codeOf(err) != serviceconfig.Unavailable || srv.count(unary) != 1 {
				t.Fatalf("%s: err %v after %d attempts", cfg.name, err, srv.count(unary))
			}
		}
	})
}

func TestCallerCancellationNotRetried(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		srv := e.start(t, handlers{unary: func(in *call) (string, error) {
			cancel()
			<-in.ctx.Done()
			return "", fail(serviceconfig.Unavailable, "late")
		}})
		c, _ := e.dialAuto(t, srv, retryConfig(t, 4, `"UNAVAILABLE","CANCELLED"`, ""))
		_, err := c.unary(ctx, "x", nil)
		if e.codeOf(err) != serviceconfig.Cancelled || srv.count(unary) != 1 {
			t.Fatalf("err %v after %d attempts, want canceled after 1", err, srv.count(unary))
		}
	})
}

func TestConnectionRefusedRetried(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	for _, m := range majors {
		for _, p := range []protocol{connectHTTP1, grpcH2C} {
			t.Run(m.name+"/"+p.String(), func(t *testing.T) {
				srv := &server{url: "http://" + addr, client: &http.Client{Transport: &http.Transport{}}}
				if p.over == overH2C {
					protocols := new(http.Protocols)
					protocols.SetUnencryptedHTTP2(true)
					srv.client = &http.Client{Transport: &http.Transport{Protocols: protocols}}
				}
				t.Cleanup(srv.client.CloseIdleConnections)
				c, _ := m.dialAuto(t, srv, p, retryConfig(t, 3, `"UNAVAILABLE"`, ""))
				var n int
				_, err := c.unary(m.countAttempts(context.Background(), &n), "x", nil)
				if m.codeOf(err) != serviceconfig.Unavailable || n != 3 || !errors.Is(err, rebound.ErrAttemptsExhausted) {
					t.Fatalf("err %v after %d attempts, want unavailable after 3", err, n)
				}
				if m.remote(err) {
					t.Fatal("a refused connection is reported as the server's verdict")
				}
			})
		}
	}
}

func TestInvalidOptions(t *testing.T) {
	eachMajor(t, protocol{}, func(t *testing.T, e env) {
		for name, opt := range map[string]option{
			"max attempts 0":   withMaxAttemptsCap(0),
			"empty server":     withServerName(""),
			"nil clock":        withClock(nil),
			"nil random":       withRandom(nil),
			"nil meters":       withMeterProvider(nil),
			"nil logger":       withLogger(nil),
			"nil tracer":       withTracerProvider(nil),
			"buffer per > all": withBufferLimits(10, 20),
			"buffer zero":      withBufferLimits(0, 0),
			"per attempt 0":    withPerAttemptTimeout(0),
			"delay cap 0":      withRetryDelayCap(0),
			"classifier nil":   withClassifier(nil),
			"nil option":       {},
		} {
			if _, err := e.newInterceptor(nil, opt); err == nil || !strings.HasPrefix(err.Error(), "connectretry: ") {
				t.Errorf("%s: New gave %v", name, err)
			}
		}
		srv := e.start(t, handlers{})
		i := e.mustInterceptor(nil, withMaxAttemptsCap(-1))
		if i.Err() == nil {
			t.Fatal("NewInterceptor's Err is nil after an invalid option")
		}
		c := e.major.dial(t, srv, e.p, i)
		_, err := c.unary(context.Background(), "x", nil)
		if e.codeOf(err) != serviceconfig.Internal || !strings.Contains(err.Error(), "WithMaxAttemptsCap") || srv.count(unary) != 0 {
			t.Fatalf("unary: err %v, want internal naming the option, without reaching the server", err)
		}
		st, err := c.open(context.Background(), serverStream, "x", nil)
		if err == nil {
			_, err = receiveAll(t, st)
		}
		if e.codeOf(err) != serviceconfig.Internal || srv.count(serverStream) != 0 {
			t.Fatalf("stream: err %v, want internal without reaching the server", err)
		}
	})
}

func TestZeroInterceptorPassesThrough(t *testing.T) {
	eachMajor(t, protocol{}, func(t *testing.T, e env) {
		srv := e.start(t, failFirst(1, serviceconfig.Unavailable))
		c := e.major.dial(t, srv, e.p, e.zero())
		var n int
		_, err := c.unary(e.countAttempts(context.Background(), &n), "x", nil)
		if e.codeOf(err) != serviceconfig.Unavailable || n != 1 || srv.count(unary) != 1 {
			t.Fatalf("err %v, counted %d, server %d; want one unavailable attempt", err, n, srv.count(unary))
		}
		if len(e.zero().Stats()) != 0 {
			t.Fatal("the zero Interceptor keeps statistics")
		}
	})
}
