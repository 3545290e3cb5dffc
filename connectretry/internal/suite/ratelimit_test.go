package suite

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

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/internal/ratelimit"
	"github.com/rebound-go/rebound/serviceconfig"
)

// answer is a scripted result: a code (0 for OK) and a pushback trailer
// ("" for none).
type answer struct {
	code     code
	pushback string
}

// err returns the handler's error of the answer; nil for OK.
func (a *answer) err() error {
	if a.code == 0 {
		return nil
	}
	f := fail(a.code, "scripted")
	if a.pushback != "" {
		f.with("grpc-retry-pushback-ms", a.pushback)
	}
	return f
}

// scriptedServer answers every call with the answer a test sets.
func scriptedServer(t *testing.T, e env) (*server, *atomic.Pointer[answer]) {
	var a atomic.Pointer[answer]
	a.Store(&answer{})
	s := e.start(t, handlers{
		unary:        func(*call) (string, error) { return "", a.Load().err() },
		serverStream: func(*call, func(string) error) error { return a.Load().err() },
	})
	return s, &a
}

// limitedClients call s through rebound with a manual clock and an
// adaptive rate limit of their own server name. The clock is an hour
// ahead, so that a deadline set from it near a turn leaves the network
// time on a busy machine.
func limitedClients(t *testing.T, e env, s *server, cfg *serviceconfig.Config, opts ...option) (clients, *clocktest.Clock) {
	clk := clocktest.NewAhead()
	c, _ := e.dialWith(t, s, cfg, append([]option{withClock(clk), withRandom(clocktest.NewRand(0.5)),
		withServerName("ratelimit-" + uniqueName(t)),
		withAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{})}, opts...)...)
	return c, clk
}

// See grpcretry's TestAdaptiveRateLimit: nothing waits before the first
// throttle; then every call waits for its turn, without a lock; one whose
// turn is past its deadline fails at once, unsent; a cancelled wait gives
// its token back.
func TestAdaptiveRateLimit(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		s, ans := scriptedServer(t, e)
		c, clk := limitedClients(t, e, s, nil)
		ctx := context.Background()
		call := func(ctx context.Context) error {
			_, err := c.unary(ctx, "x", nil)
			return err
		}
		for range 3 {
			if err := call(ctx); err != nil {
				t.Fatal(err)
			}
		}
		ans.Store(&answer{code: serviceconfig.ResourceExhausted})
		if err := call(ctx); e.codeOf(err) != serviceconfig.ResourceExhausted {
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
		if e.codeOf(err) != serviceconfig.ResourceExhausted || !errors.Is(err, rebound.ErrRateLimited) || e.remote(err) {
			t.Fatalf("a call whose turn is past its deadline: %v, want a local resource_exhausted and ErrRateLimited", err)
		}
		if n := len(clk.Sleeps()); n != 2 {
			t.Fatalf("%d waits, want 2: the third must not wait", n)
		}
		// Both waits end at once: one goes, and the other, which would
		// reach the server with it as a burst, takes a new turn.
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
		if err := <-done; e.codeOf(err) != serviceconfig.Cancelled {
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
	})
}

// TestAdaptiveRateLimitThrottles: ResourceExhausted and any answer with
// pushback are throttles and start the limit; others are not.
func TestAdaptiveRateLimitThrottles(t *testing.T) {
	for _, c := range []struct {
		answer
		throttle bool
	}{
		{answer{serviceconfig.ResourceExhausted, ""}, true},
		{answer{serviceconfig.Unavailable, "1000"}, true},
		{answer{serviceconfig.Unavailable, "-1"}, true},
		{answer{serviceconfig.Unavailable, ""}, false},
		{answer{serviceconfig.Internal, ""}, false},
		{answer{}, false},
	} {
		t.Run(fmt.Sprint(c.code, "/", c.pushback), func(t *testing.T) {
			each(t, func(t *testing.T, e env) {
				s, ans := scriptedServer(t, e)
				ans.Store(&c.answer)
				cl, clk := limitedClients(t, e, s, nil)
				_, err := cl.unary(context.Background(), "x", nil)
				if (c.code == 0) != (err == nil) || err != nil && e.codeOf(err) != c.code {
					t.Fatalf("got %v, want %v", err, c.code)
				}
				ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(200*time.Millisecond))
				defer cancel()
				_, err = cl.unary(ctx, "x", nil)
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
		})
	}
}

// TestAdaptiveRateLimitClassifier: see grpcretry's. The classifier's word
// on throttling is the limit's, for retried and hedged calls and retried
// streams.
func TestAdaptiveRateLimitClassifier(t *testing.T) {
	mark := func(i rebound.RetryInfo) rebound.RetryInfo { i.SlowDown = true; return i }
	unmark := func(i rebound.RetryInfo) rebound.RetryInfo { i.SlowDown = false; return i }
	same := func(i rebound.RetryInfo) rebound.RetryInfo { return i }
	for _, c := range []struct {
		name     string
		hedged   bool
		stream   bool
		code     code
		given    bool // the built-in verdict's SlowDown mark
		judge    func(rebound.RetryInfo) rebound.RetryInfo
		throttle bool
	}{
		{"Unavailable marked", false, false, serviceconfig.Unavailable, false, mark, true},
		{"Unavailable as is", false, false, serviceconfig.Unavailable, false, same, false},
		{"ResourceExhausted unmarked", false, false, serviceconfig.ResourceExhausted, true, unmark, false},
		{"ResourceExhausted as is", false, false, serviceconfig.ResourceExhausted, true, same, true},
		{"hedged Internal marked", true, false, serviceconfig.Internal, false, mark, true},
		{"hedged ResourceExhausted unmarked", true, false, serviceconfig.ResourceExhausted, true, unmark, false},
		{"stream Unavailable marked", false, true, serviceconfig.Unavailable, false, mark, true},
		{"stream ResourceExhausted unmarked", false, true, serviceconfig.ResourceExhausted, true, unmark, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			each(t, func(t *testing.T, e env) {
				s, ans := scriptedServer(t, e)
				ans.Store(&answer{code: c.code})
				cfg := retryConfig(t, 2, `"ABORTED"`, "") // nothing here is retried
				if c.hedged {
					cfg = hedgeConfig(t, 2, "10s", `"UNAVAILABLE"`, "") // Internal and ResourceExhausted are fatal
				}
				var judged atomic.Int32
				cl, clk := limitedClients(t, e, s, cfg, withClassifier(func(_ failed, builtin rebound.RetryInfo) rebound.RetryInfo {
					if judged.Add(1) == 1 && builtin.SlowDown != c.given {
						t.Errorf("the built-in verdict's SlowDown is %v, want %v", builtin.SlowDown, c.given)
					}
					return c.judge(builtin)
				}))
				var err error
				if c.stream {
					var st stream
					if st, err = cl.open(context.Background(), serverStream, "x", nil); err == nil {
						_, err = receiveAll(t, st)
					}
				} else {
					_, err = cl.unary(context.Background(), "x", nil)
				}
				if e.codeOf(err) != c.code {
					t.Fatalf("got %v, want %v", err, c.code)
				}
				if judged.Load() != 1 {
					t.Fatalf("the classifier judged %d answers, want 1", judged.Load())
				}
				ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(200*time.Millisecond))
				defer cancel()
				_, err = cl.unary(ctx, "x", nil)
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
		})
	}
}

// TestAdaptiveRateLimitUnderPolicy: under a retry policy that retries
// ResourceExhausted, a call whose turn is past its deadline is not
// retried; streams wait for the same limit.
func TestAdaptiveRateLimitUnderPolicy(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		s, ans := scriptedServer(t, e)
		ans.Store(&answer{serviceconfig.ResourceExhausted, "-1"})
		c, clk := limitedClients(t, e, s, retryConfig(t, 3, `"RESOURCE_EXHAUSTED"`, ""))
		if _, err := c.unary(context.Background(), "x", nil); e.codeOf(err) != serviceconfig.ResourceExhausted {
			t.Fatal(err)
		}
		ans.Store(&answer{})
		ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(200*time.Millisecond))
		defer cancel()
		_, err := c.unary(ctx, "x", nil)
		if e.codeOf(err) != serviceconfig.ResourceExhausted || !errors.Is(err, rebound.ErrRateLimited) || !errors.Is(err, rebound.ErrThrottled) {
			t.Fatalf("%v, want resource_exhausted ending with ErrThrottled", err)
		}
		if n := s.count(unary); n != 1 || len(clk.Sleeps()) != 0 {
			t.Fatalf("server saw %d calls, %d waits; want 1, 0", n, len(clk.Sleeps()))
		}
		st, err := c.open(ctx, serverStream, "x", nil)
		if err == nil {
			_, err = receiveAll(t, st)
		}
		if !errors.Is(err, rebound.ErrRateLimited) {
			t.Fatalf("stream: %v, want ErrRateLimited", err)
		}
		if n := s.count(serverStream); n != 0 {
			t.Fatalf("server saw %d streams, want 0", n)
		}
	})
}

// TestAdaptiveRateLimitBadInput: a bad setting is an error naming the
// option and the field.
func TestAdaptiveRateLimitBadInput(t *testing.T) {
	eachMajor(t, protocol{}, func(t *testing.T, e env) {
		for field, c := range map[string]rebound.AdaptiveRateLimitConfig{
			"Beta":          {Beta: math.Inf(1)},
			"ScaleConstant": {ScaleConstant: -0.4},
			"Smoothing":     {Smoothing: math.NaN()},
			"MinRate":       {MinRate: -1},
		} {
			_, err := e.newInterceptor(nil, withAdaptiveRateLimit(c))
			if err == nil || !strings.Contains(err.Error(), "WithAdaptiveRateLimit") || !strings.Contains(err.Error(), "AdaptiveRateLimitConfig."+field) {
				t.Errorf("%s: %v, want an error naming the option and the field", field, err)
			}
		}
	})
}

// TestAdaptiveRateLimitBounded: an interceptor that calls ever new peers
// keeps the limiters of the last bounded.DefaultMax only; the others are
// released.
func TestAdaptiveRateLimitBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("makes 3,000 peers")
	}
	eachMajor(t, protocol{}, func(t *testing.T, e env) {
		s, _ := scriptedServer(t, e)
		i, err := e.newInterceptor(nil, withAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{MinRate: 0.75}))
		if err != nil {
			t.Fatal(err)
		}
		// Each peer address is a server name of its own; the calls go to
		// s through a client that rewrites the host.
		u, _ := url.Parse(s.url)
		rewriting := &http.Client{Transport: hostRewriter{s.client.Transport, u.Host}}
		const peers = 3000
		for n := range peers {
			peer := &server{url: fmt.Sprintf("http://p%d.ratelimit.test", n), client: rewriting}
			if _, err := e.major.dial(t, peer, e.p, i).unary(context.Background(), "x", nil); err != nil {
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
	})
}

// hostRewriter sends every request to host, whatever its own.
type hostRewriter struct {
	rt   http.RoundTripper
	host string
}

func (h hostRewriter) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.URL.Host, r.Host = h.host, h.host
	return h.rt.RoundTrip(r)
}
