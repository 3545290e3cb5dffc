package connectretry_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/connectretry"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/internal/ratelimit"
	"github.com/rebound-go/rebound/serviceconfig"
)

// answer is a scripted result: a code (0 for OK) and a pushback trailer
// ("" for none).
type answer struct {
	code     connect.Code
	pushback string
}

// scriptedServer answers every call with the answer a test sets.
func scriptedServer(t *testing.T) (*server, *atomic.Pointer[answer]) {
	var a atomic.Pointer[answer]
	a.Store(&answer{})
	s := startServer(t, handlers{unary: func(context.Context, int, *request) (*connect.Response[msg], error) {
		ans := a.Load()
		if ans.code == 0 {
			return connect.NewResponse(&msg{}), nil
		}
		e := connect.NewError(ans.code, errors.New("scripted"))
		if ans.pushback != "" {
			e.Meta().Set("grpc-retry-pushback-ms", ans.pushback)
		}
		return nil, e
	}, serverStream: func(context.Context, int, *request, *connect.ServerStream[msg]) error {
		ans := a.Load()
		if ans.code == 0 {
			return nil
		}
		e := connect.NewError(ans.code, errors.New("scripted"))
		if ans.pushback != "" {
			e.Meta().Set("grpc-retry-pushback-ms", ans.pushback)
		}
		return e
	}}, false)
	return s, &a
}

// limitedClients call s through rebound with a manual clock and an
// adaptive rate limit of their own server name. The clock is an hour
// ahead, so that a deadline set from it near a turn leaves the network
// time on a busy machine.
func limitedClients(t *testing.T, s *server, cfg *serviceconfig.Config, opts ...connectretry.Option) (clients, *clocktest.Clock) {
	clk := clocktest.NewAhead()
	i, err := connectretry.New(cfg, append([]connectretry.Option{connectretry.WithClock(clk), connectretry.WithRandom(clocktest.NewRand(0.5)),
		connectretry.WithServerName(fmt.Sprint("ratelimit-", t.Name(), time.Now().UnixNano())),
		connectretry.WithAdaptiveRateLimit(rebound.AdaptiveRateLimit{})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return newClients(s, connectProtocol, i), clk
}

// See grpcretry's TestAdaptiveRateLimit: nothing waits before the first
// throttle; then every call waits for its turn, without a lock; one whose
// turn is past its deadline fails at once, unsent; a cancelled wait gives
// its token back.
func TestAdaptiveRateLimit(t *testing.T) {
	s, ans := scriptedServer(t)
	c, clk := limitedClients(t, s, nil)
	ctx := context.Background()
	call := func(ctx context.Context) error {
		_, err := c.unary.CallUnary(ctx, connect.NewRequest(&msg{Value: "x"}))
		return err
	}
	for range 3 {
		if err := call(ctx); err != nil {
			t.Fatal(err)
		}
	}
	ans.Store(&answer{code: connect.CodeResourceExhausted})
	if err := call(ctx); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("got %v, want the server's resource_exhausted", err)
	}
	if n := len(clk.Sleeps()); n != 0 || s.count(unary) != 4 {
		t.Fatalf("%d waits and %d calls before the limit, want 0 and 4", n, s.count(unary))
	}
	ans.Store(&answer{})

	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if err := call(ctx); err != nil {
				t.Errorf("paced call: %v", err)
			}
		})
	}
	if !clk.WaitPending(2) {
		t.Fatal("the calls did not both wait for their turn")
	}
	if n := s.count(unary); n != 4 {
		t.Fatalf("the server saw %d calls while they waited, want 4", n)
	}
	dctx, cancel := context.WithDeadline(ctx, clk.Now().Add(300*time.Millisecond))
	err := call(dctx)
	cancel()
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !errors.Is(err, rebound.ErrRateLimited) {
		t.Fatalf("a call whose turn is past its deadline: %v, want resource_exhausted and ErrRateLimited", err)
	}
	if n := len(clk.Sleeps()); n != 2 {
		t.Fatalf("%d waits, want 2: the third must not wait", n)
	}
	// Both waits end at once: one goes, and the other, which would reach
	// the server with it as a burst, takes a new turn.
	clk.Advance(time.Second)
	if !clk.WaitPending(1) {
		t.Fatal("the second did not take a new turn")
	}
	clk.Advance(time.Second)
	wg.Wait()
	if n := s.count(unary); n != 6 {
		t.Fatalf("the server saw %d calls, want 6", n)
	}

	// Take what the bucket holds, so that the next call waits.
	extra := 0
	for {
		dctx, cancel := context.WithDeadline(ctx, clk.Now().Add(100*time.Millisecond))
		err := call(dctx)
		cancel()
		if err != nil {
			break
		}
		extra++
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- call(cctx) }()
	if !clk.WaitPending(1) {
		t.Fatal("the call did not wait")
	}
	cancel()
	if err := <-done; connect.CodeOf(err) != connect.CodeCanceled {
		t.Fatalf("cancelled wait: %v, want canceled", err)
	}
	go func() { done <- call(ctx) }()
	if !clk.WaitPending(1) {
		t.Fatal("the call did not wait")
	}
	sl := clk.Sleeps()
	if a, b := sl[len(sl)-2], sl[len(sl)-1]; a != b || a <= 0 {
		t.Fatalf("waits %v then %v: the cancelled token was not given back", a, b)
	}
	clk.Advance(time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := s.count(unary); n != 7+extra {
		t.Fatalf("the server saw %d calls, want %d", n, 7+extra)
	}
}

// TestAdaptiveRateLimitThrottles: ResourceExhausted and any answer with
// pushback are throttles and start the limit; others are not.
func TestAdaptiveRateLimitThrottles(t *testing.T) {
	for _, c := range []struct {
		answer
		throttle bool
	}{
		{answer{connect.CodeResourceExhausted, ""}, true},
		{answer{connect.CodeUnavailable, "1000"}, true},
		{answer{connect.CodeUnavailable, "-1"}, true},
		{answer{connect.CodeUnavailable, ""}, false},
		{answer{connect.CodeInternal, ""}, false},
		{answer{}, false},
	} {
		t.Run(fmt.Sprint(c.code, "/", c.pushback), func(t *testing.T) {
			s, ans := scriptedServer(t)
			ans.Store(&c.answer)
			cl, clk := limitedClients(t, s, nil)
			_, err := cl.unary.CallUnary(context.Background(), connect.NewRequest(&msg{Value: "x"}))
			if (c.code == 0) != (err == nil) || err != nil && connect.CodeOf(err) != c.code {
				t.Fatalf("got %v, want %v", err, c.code)
			}
			ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(200*time.Millisecond))
			defer cancel()
			_, err = cl.unary.CallUnary(ctx, connect.NewRequest(&msg{Value: "x"}))
			if limited := errors.Is(err, rebound.ErrRateLimited); limited != c.throttle {
				t.Fatalf("next call: %v; throttle %v", err, c.throttle)
			}
			want := 2
			if c.throttle {
				want = 1
			}
			if n := s.count(unary); n != want {
				t.Fatalf("the server saw %d calls, want %d", n, want)
			}
		})
	}
}

// TestAdaptiveRateLimitClassifier: see grpcretry's. The classifier's
// word on throttling is the limit's, for retried and hedged calls and
// retried server streams.
func TestAdaptiveRateLimitClassifier(t *testing.T) {
	mark := func(i rebound.RetryInfo) rebound.RetryInfo { i.Throttle = true; return i }
	unmark := func(i rebound.RetryInfo) rebound.RetryInfo { i.Throttle = false; return i }
	same := func(i rebound.RetryInfo) rebound.RetryInfo { return i }
	for _, c := range []struct {
		name     string
		hedged   bool
		stream   bool
		code     connect.Code
		given    bool // the built-in verdict's Throttle mark
		judge    func(rebound.RetryInfo) rebound.RetryInfo
		throttle bool
	}{
		{"Unavailable marked", false, false, connect.CodeUnavailable, false, mark, true},
		{"Unavailable as is", false, false, connect.CodeUnavailable, false, same, false},
		{"ResourceExhausted unmarked", false, false, connect.CodeResourceExhausted, true, unmark, false},
		{"ResourceExhausted as is", false, false, connect.CodeResourceExhausted, true, same, true},
		{"hedged Internal marked", true, false, connect.CodeInternal, false, mark, true},
		{"hedged ResourceExhausted unmarked", true, false, connect.CodeResourceExhausted, true, unmark, false},
		{"stream Unavailable marked", false, true, connect.CodeUnavailable, false, mark, true},
		{"stream ResourceExhausted unmarked", false, true, connect.CodeResourceExhausted, true, unmark, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, ans := scriptedServer(t)
			ans.Store(&answer{code: c.code})
			cfg := retryConfig(t, 2, `"ABORTED"`, "") // nothing here is retried
			if c.hedged {
				cfg = hedgeConfig(t, 2, "10s", `"UNAVAILABLE"`, "") // Internal and ResourceExhausted are fatal
			}
			var judged atomic.Int32
			cl, clk := limitedClients(t, s, cfg, connectretry.WithClassifier(func(f connectretry.Failure, builtin rebound.RetryInfo) rebound.RetryInfo {
				if judged.Add(1) == 1 && builtin.Throttle != c.given {
					t.Errorf("the built-in verdict's Throttle is %v, want %v", builtin.Throttle, c.given)
				}
				return c.judge(builtin)
			}))
			var err error
			if c.stream {
				var st *connect.ServerStreamForClient[msg]
				if st, err = cl.serverStream.CallServerStream(context.Background(), connect.NewRequest(&msg{Value: "x"})); err == nil {
					for st.Receive() {
					}
					err = st.Err()
					_ = st.Close()
				}
			} else {
				_, err = cl.unary.CallUnary(context.Background(), connect.NewRequest(&msg{Value: "x"}))
			}
			if connect.CodeOf(err) != c.code {
				t.Fatalf("got %v, want %v", err, c.code)
			}
			if judged.Load() != 1 {
				t.Fatalf("the classifier judged %d answers, want 1", judged.Load())
			}
			ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(200*time.Millisecond))
			defer cancel()
			_, err = cl.unary.CallUnary(ctx, connect.NewRequest(&msg{Value: "x"}))
			if limited := errors.Is(err, rebound.ErrRateLimited); limited != c.throttle {
				t.Fatalf("next call: %v; throttle %v", err, c.throttle)
			}
			want := 2
			if c.throttle {
				want = 1
			}
			if n := s.count(unary) + s.count(serverStream); n != want {
				t.Fatalf("the server saw %d calls, want %d", n, want)
			}
		})
	}
}

// TestAdaptiveRateLimitUnderPolicy: under a retry policy that retries
// ResourceExhausted, a call whose turn is past its deadline is not
// retried; streams wait for the same limit.
func TestAdaptiveRateLimitUnderPolicy(t *testing.T) {
	s, ans := scriptedServer(t)
	ans.Store(&answer{connect.CodeResourceExhausted, "-1"})
	c, clk := limitedClients(t, s, retryConfig(t, 3, `"RESOURCE_EXHAUSTED"`, ""))
	if _, err := c.unary.CallUnary(context.Background(), connect.NewRequest(&msg{Value: "x"})); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatal(err)
	}
	ans.Store(&answer{})
	ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(200*time.Millisecond))
	defer cancel()
	_, err := c.unary.CallUnary(ctx, connect.NewRequest(&msg{Value: "x"}))
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !errors.Is(err, rebound.ErrRateLimited) || !errors.Is(err, rebound.ErrThrottled) {
		t.Fatalf("%v, want resource_exhausted ending with ErrThrottled", err)
	}
	if n := s.count(unary); n != 1 || len(clk.Sleeps()) != 0 {
		t.Fatalf("server saw %d calls, %d waits; want 1, 0", n, len(clk.Sleeps()))
	}
	st, err := c.serverStream.CallServerStream(ctx, connect.NewRequest(&msg{Value: "x"}))
	if err == nil {
		for st.Receive() {
		}
		err = st.Err()
		st.Close()
	}
	if !errors.Is(err, rebound.ErrRateLimited) {
		t.Fatalf("stream: %v, want ErrRateLimited", err)
	}
	if n := s.count(serverStream); n != 0 {
		t.Fatalf("server saw %d streams, want 0", n)
	}
}

// TestAdaptiveRateLimitBadInput: a bad setting is an error naming the
// option and the field.
func TestAdaptiveRateLimitBadInput(t *testing.T) {
	for field, c := range map[string]rebound.AdaptiveRateLimit{
		"Beta":          {Beta: math.Inf(1)},
		"ScaleConstant": {ScaleConstant: -0.4},
		"Smoothing":     {Smoothing: math.NaN()},
		"MinRate":       {MinRate: -1},
	} {
		_, err := connectretry.New(nil, connectretry.WithAdaptiveRateLimit(c))
		if err == nil || !strings.Contains(err.Error(), "WithAdaptiveRateLimit") || !strings.Contains(err.Error(), "AdaptiveRateLimit."+field) {
			t.Errorf("%s: %v, want an error naming the option and the field", field, err)
		}
	}
}

// TestAdaptiveRateLimitBounded: an interceptor that calls ever new peers
// keeps the limiters of the last bounded.DefaultMax only; the others are
// released.
func TestAdaptiveRateLimitBounded(t *testing.T) {
	s, _ := scriptedServer(t)
	i, err := connectretry.New(nil, connectretry.WithAdaptiveRateLimit(rebound.AdaptiveRateLimit{MinRate: 0.75}))
	if err != nil {
		t.Fatal(err)
	}
	// Each peer address is a server name of its own; the calls go to s
	// through a client that rewrites the host.
	const peers = 3000
	for n := range peers {
		cl := connect.NewClient[msg, msg](hostRewriter{s.client, s.url}, fmt.Sprintf("http://p%d.ratelimit.test%s", n, unary), connect.WithInterceptors(i))
		if _, err := cl.CallUnary(context.Background(), connect.NewRequest(&msg{Value: "x"})); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for ratelimit.Count() > 1024+64 {
		if time.Now().After(deadline) {
			t.Fatalf("%d limiters kept after %d peers", ratelimit.Count(), peers)
		}
		runtime.GC()
		runtime.Gosched()
	}
	runtime.KeepAlive(i)
}

// hostRewriter sends every request to the server of url, whatever its
// host.
type hostRewriter struct {
	c   *http.Client
	url string
}

func (h hostRewriter) Do(r *http.Request) (*http.Response, error) {
	u, _ := url.Parse(h.url)
	r = r.Clone(r.Context())
	r.URL.Host, r.Host = u.Host, u.Host
	return h.c.Do(r)
}
