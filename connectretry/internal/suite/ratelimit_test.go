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
	"github.com/rebound-go/rebound/internal/adaptive"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/internal/limittest"
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
		// reach the server with it as a burst, keeps its turn and waits
		// out half a spacing (a new turn would be a whole spacing after
		// the last). Less when the first's answer has raised the rate
		// meanwhile, as in process, where it comes at once.
		clk.Advance(time.Second)
		if !clk.WaitPending(1) {
			t.Fatal("the second did not wait out half a spacing")
		}
		if sl := clk.Sleeps(); sl[len(sl)-1] <= 0 || sl[len(sl)-1]-(sl[1]-sl[0])/2 > time.Millisecond {
			t.Fatalf("waits %v: the second waits %v more, want at most half the spacing, %v", sl, sl[len(sl)-1], (sl[1]-sl[0])/2)
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

// TestAdaptiveThrottleBehindRateLimit: see grpcretry's. With the adaptive
// throttle and the rate limit both on, a call the rate limit keeps home
// (unary calls and server streams refused for their deadline, a call
// cancelled in its wait) counts in the throttle neither as a request nor
// as a refusal nor as an accept: its window holds the one call the server
// refused, and the next call goes. (The throttle counted the rate limit's
// refusals as the server's and kept the calls home itself.)
func TestAdaptiveThrottleBehindRateLimit(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		s, ans := scriptedServer(t, e)
		name := "behind-" + uniqueName(t)
		c, clk := limitedClients(t, e, s, nil, withServerName(name), withAdaptiveThrottle(rebound.AdaptiveThrottleConfig{}))
		th := adaptive.Throttle(name, rebound.AdaptiveThrottleConfig{})
		call := func(ctx context.Context) error {
			_, err := c.unary(ctx, "x", nil)
			return err
		}
		ans.Store(&answer{code: serviceconfig.ResourceExhausted})
		if err := call(context.Background()); e.codeOf(err) != serviceconfig.ResourceExhausted {
			t.Fatalf("got %v, want the server's resource_exhausted", err)
		}
		ans.Store(&answer{})
		// The next turn is over a second away: calls with 50ms are
		// refused.
		kept := 0 // by the throttle
		for i := range 20 {
			ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(50*time.Millisecond))
			var err error
			if i%2 == 0 {
				err = call(ctx)
			} else {
				var st stream
				if st, err = c.open(ctx, serverStream, "x", nil); err == nil {
					_, err = receiveAll(t, st)
				}
			}
			cancel()
			switch {
			case errors.Is(err, rebound.ErrRateLimited):
			case errors.Is(err, rebound.ErrRejectedLocally):
				kept++
			default:
				t.Fatalf("call %d: %v, want ErrRateLimited", i, err)
			}
		}
		if r, a := th.Counts(clk.Now()); r != 1 || a != 0 || kept != 0 {
			t.Fatalf("after the refusals the throttle counts %d requests and %d accepts and kept %d calls home, want 1, 0 and none: the server saw one call and refused it", r, a, kept)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- call(ctx) }()
		if !clk.WaitPending(1) {
			t.Fatal("the call did not wait for its turn")
		}
		cancel()
		if err := <-done; e.codeOf(err) != serviceconfig.Cancelled {
			t.Fatalf("cancelled wait: %v", err)
		}
		if r, a := th.Counts(clk.Now()); r != 1 || a != 0 {
			t.Fatalf("after a cancelled wait the throttle counts %d requests and %d accepts, want 1 and 0", r, a)
		}
		go func() { done <- call(context.Background()) }()
		if !clk.WaitPending(1) {
			t.Fatalf("the call did not wait for its turn: %v", <-done)
		}
		clk.Advance(2 * time.Second)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if n := s.count(unary); n != 2 {
			t.Fatalf("the server saw %d calls, want 2", n)
		}
	})
}

// TestAdaptiveThrottleStreamGivesTurnBack: a stream the adaptive throttle
// keeps home takes no turn of the rate limit: ten kept home in the rate
// limit's slow start leave its window open. (When a connect stream took
// its turn before the throttle's word, they kept their places in it:
// after six, a stream waited for an answer no stream in flight would
// give.)
func TestAdaptiveThrottleStreamGivesTurnBack(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		s, ans := scriptedServer(t, e)
		c, clk := limitedClients(t, e, s, nil, withAdaptiveThrottle(rebound.AdaptiveThrottleConfig{}))
		ans.Store(&answer{code: serviceconfig.Unavailable}) // not a throttle: the limit stays in its slow start
		for range 2 {
			if _, err := c.unary(context.Background(), "x", nil); e.codeOf(err) != serviceconfig.Unavailable {
				t.Fatalf("got %v, want the server's unavailable", err)
			}
		}
		for i := range 10 {
			done := make(chan error, 1)
			go func() {
				st, err := c.open(context.Background(), serverStream, "x", nil)
				if err == nil {
					_, err = receiveAll(t, st)
				}
				done <- err
			}()
			for waiting := false; ; waiting = clk.Pending() > 0 {
				if waiting {
					clk.Advance(time.Second) // let it go, to end the test
					<-done
					t.Fatalf("stream %d waited for a turn in the slow start", i)
				}
				select {
				case err := <-done:
					if !errors.Is(err, rebound.ErrRejectedLocally) || errors.Is(err, rebound.ErrRateLimited) {
						t.Fatalf("stream %d: %v, want the throttle's local rejection", i, err)
					}
				case <-time.After(time.Millisecond):
					continue
				}
				break
			}
		}
		if n := s.count(serverStream); n != 0 {
			t.Fatalf("the server saw %d streams, want 0", n)
		}
	})
}

// TestAdaptiveRateLimitRecovers: see httpretry's. A connect handler that
// accepts 20 calls a second (a burst of 2) for 2s (1s with -short) and answers the rest
// ResourceExhausted, then accepts everything; twenty callers on the real
// clock: the handler soon accepts more than 20 a second again. It takes
// seconds, and the gates are the engine's: -short runs it once.
func TestAdaptiveRateLimitRecovers(t *testing.T) {
	eachOnce(t, func(t *testing.T, e env) {
		lim := limittest.New(20, 2, limittest.Length())
		name := "recovers-" + uniqueName(t)
		s := e.start(t, handlers{unary: func(*call) (string, error) {
			if !lim.Allow() {
				return "", fail(serviceconfig.ResourceExhausted, "limited")
			}
			return "", nil
		}})
		c, _ := e.dialWith(t, s, nil, withServerName(name), withAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{}))
		took, refused := limittest.Recovery(t, lim, 20, 15*time.Second, func(ctx context.Context) error {
			_, err := c.unary(ctx, "x", nil)
			return err
		}, func() float64 { return ratelimit.Limiter(name, rebound.AdaptiveRateLimitConfig{}).Rate() })
		t.Logf("back above 20/s %v after the server stopped limiting; %d calls refused locally", took, refused)
	})
}
