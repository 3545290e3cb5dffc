package httpretry_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/httpretry"
	"github.com/rebound-go/rebound/internal/adaptive"
	"github.com/rebound-go/rebound/internal/bounded"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/internal/limittest"
	"github.com/rebound-go/rebound/internal/ratelimit"
)

// scripted is an httptest.Server whose answer is set by the test: a status
// and a Retry-After ("" for none). It counts the requests it saw.
type scripted struct {
	*httptest.Server
	seen       atomic.Int32
	mu         sync.Mutex
	status     int
	retryAfter string
}

func newScripted(t *testing.T) *scripted {
	s := &scripted{status: http.StatusOK}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.seen.Add(1)
		s.mu.Lock()
		status, ra := s.status, s.retryAfter
		s.mu.Unlock()
		if ra != "" {
			w.Header().Set("Retry-After", ra)
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *scripted) answer(status int, retryAfter string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status, s.retryAfter = status, retryAfter
}

func rlGet(ctx context.Context, c *http.Client, url string) (int, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestAdaptiveRateLimit: nothing waits before the host's first throttle;
// after it every request, its first attempt included, waits for its turn
// (without a lock: a second waits beside the first); one whose turn comes
// after its deadline fails at once, unsent, with ErrRateLimited; a
// cancelled wait gives its token back.
func TestAdaptiveRateLimit(t *testing.T) {
	srv := newScripted(t)
	clk := clocktest.NewAhead() // deadlines from it leave the network an hour
	client := &http.Client{Transport: httpretry.NewTransport(srv.Client().Transport,
		httpretry.WithClock(clk), httpretry.WithMaxAttempts(1), httpretry.WithAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{}))}
	ctx := context.Background()
	for range 3 {
		if code, err := rlGet(ctx, client, srv.URL); err != nil || code != 200 {
			t.Fatalf("before any throttle: %d, %v", code, err)
		}
	}
	srv.answer(http.StatusTooManyRequests, "2")
	if code, _ := rlGet(ctx, client, srv.URL); code != http.StatusTooManyRequests {
		t.Fatalf("got %d, want the 429", code)
	}
	if n := len(clk.Sleeps()); n != 0 || srv.seen.Load() != 4 {
		t.Fatalf("%d waits and %d requests before the limit, want 0 and 4", n, srv.seen.Load())
	}
	srv.answer(http.StatusOK, "")

	// Two requests wait side by side; neither reaches the server yet.
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if code, err := rlGet(ctx, client, srv.URL); err != nil || code != 200 {
				t.Errorf("paced request: %d, %v", code, err)
			}
		})
	}
	if !clk.WaitPending(2) {
		t.Fatal("the requests did not both wait for their turn")
	}
	if n := srv.seen.Load(); n != 4 {
		t.Fatalf("the server saw %d requests while they waited, want 4", n)
	}
	// A third whose turn is past its deadline fails at once, unsent.
	dctx, cancel := context.WithDeadline(ctx, clk.Now().Add(300*time.Millisecond))
	_, err := rlGet(dctx, client, srv.URL)
	cancel()
	if !errors.Is(err, rebound.ErrRateLimited) || !errors.Is(err, rebound.ErrThrottled) {
		t.Fatalf("a request whose turn is past its deadline: %v, want ErrRateLimited", err)
	}
	if n := len(clk.Sleeps()); n != 2 {
		t.Fatalf("%d waits, want 2: the third must not wait", n)
	}
	// Both waits end at once: one goes, and the other, which would reach
	// the server with it as a burst, keeps its turn and waits out half a
	// spacing (a new turn would be a whole spacing after the last).
	clk.Advance(time.Second)
	if !clk.WaitPending(1) {
		t.Fatal("the second did not wait out half a spacing")
	}
	if s := clk.Sleeps(); (s[1]-s[0])/2-s[len(s)-1] > time.Millisecond || s[len(s)-1]-(s[1]-s[0])/2 > time.Millisecond {
		t.Fatalf("waits %v: the second waits %v more, want half the spacing, %v", s, s[len(s)-1], (s[1]-s[0])/2)
	}
	clk.Advance(time.Second)
	wg.Wait()
	if n := srv.seen.Load(); n != 6 {
		t.Fatalf("the server saw %d requests, want 6", n)
	}

	// A cancelled wait gives its token back: the next request waits as
	// long as the cancelled one would have.
	// Take what the bucket holds, so that the next request waits.
	extra := int32(0)
	for {
		dctx, cancel := context.WithDeadline(ctx, clk.Now().Add(100*time.Millisecond))
		_, err := rlGet(dctx, client, srv.URL)
		cancel()
		if err != nil {
			break
		}
		extra++
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { _, err := rlGet(cctx, client, srv.URL); done <- err }()
	if !clk.WaitPending(1) {
		t.Fatal("the request did not wait")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
	go func() { _, err := rlGet(ctx, client, srv.URL); done <- err }()
	if !clk.WaitPending(1) {
		t.Fatal("the request did not wait")
	}
	s := clk.Sleeps()
	if a, b := s[len(s)-2], s[len(s)-1]; a != b || a <= 0 {
		t.Fatalf("waits %v then %v: the cancelled token was not given back", a, b)
	}
	clk.Advance(time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := srv.seen.Load(); n != 7+extra {
		t.Fatalf("the server saw %d requests, want %d", n, 7+extra)
	}
}

// TestAdaptiveRateLimitThrottles: 429 and 503 with Retry-After are
// throttles and start the limit; 503 without Retry-After and 500 are not.
func TestAdaptiveRateLimitThrottles(t *testing.T) {
	for _, c := range []struct {
		status     int
		retryAfter string
		throttle   bool
	}{
		{http.StatusTooManyRequests, "", true},
		{http.StatusTooManyRequests, "1", true},
		{http.StatusServiceUnavailable, "1", true},
		{http.StatusServiceUnavailable, "", false},
		{http.StatusInternalServerError, "1", false},
		{http.StatusOK, "", false},
	} {
		t.Run(fmt.Sprint(c.status, "/", c.retryAfter), func(t *testing.T) {
			srv := newScripted(t)
			srv.answer(c.status, c.retryAfter)
			clk := clocktest.NewAhead() // deadlines from it leave the network an hour
			client := &http.Client{Transport: httpretry.NewTransport(srv.Client().Transport,
				httpretry.WithClock(clk), httpretry.WithMaxAttempts(1), httpretry.WithAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{}))}
			if code, err := rlGet(context.Background(), client, srv.URL); err != nil || code != c.status {
				t.Fatalf("%d, %v", code, err)
			}
			// The limiter starts at the first throttle: the next request
			// has to wait for its turn (over a second), which its deadline does not
			// allow.
			ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(200*time.Millisecond))
			defer cancel()
			_, err := rlGet(ctx, client, srv.URL)
			if limited := errors.Is(err, rebound.ErrRateLimited); limited != c.throttle {
				t.Fatalf("next request: %v; throttle %v", err, c.throttle)
			}
			if want := 1 + map[bool]int32{true: 0, false: 1}[c.throttle]; srv.seen.Load() != want {
				t.Fatalf("the server saw %d requests, want %d", srv.seen.Load(), want)
			}
		})
	}
}

// TestAdaptiveRateLimitClassifier: the classifier's word on throttling
// is the limit's. A 503 without Retry-After that it marks as throttling
// starts the limit; a 429, or a 503 with Retry-After, that it unmarks
// does not; one it leaves as it was is judged by the limit's own rules.
func TestAdaptiveRateLimitClassifier(t *testing.T) {
	for _, c := range []struct {
		name       string
		status     int
		retryAfter string
		mark       func(rebound.RetryInfo) rebound.RetryInfo
		throttle   bool
	}{
		{"503 marked", http.StatusServiceUnavailable, "", func(i rebound.RetryInfo) rebound.RetryInfo { i.SlowDown = true; return i }, true},
		{"503 as is", http.StatusServiceUnavailable, "", func(i rebound.RetryInfo) rebound.RetryInfo { return i }, false},
		{"429 unmarked", http.StatusTooManyRequests, "", func(i rebound.RetryInfo) rebound.RetryInfo { i.SlowDown = false; return i }, false},
		{"429 as is", http.StatusTooManyRequests, "", func(i rebound.RetryInfo) rebound.RetryInfo { return i }, true},
		{"503 with Retry-After unmarked", http.StatusServiceUnavailable, "1", func(i rebound.RetryInfo) rebound.RetryInfo { i.SlowDown = false; return i }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := newScripted(t)
			srv.answer(c.status, c.retryAfter)
			clk := clocktest.NewAhead() // deadlines from it leave the network an hour
			var judged atomic.Int32
			client := &http.Client{Transport: httpretry.NewTransport(srv.Client().Transport,
				httpretry.WithClock(clk), httpretry.WithMaxAttempts(1), httpretry.WithAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{}),
				httpretry.WithClassifier(func(f httpretry.Failure, builtin rebound.RetryInfo) rebound.RetryInfo {
					judged.Add(1)
					return c.mark(builtin)
				}))}
			if code, err := rlGet(context.Background(), client, srv.URL); err != nil || code != c.status {
				t.Fatalf("%d, %v", code, err)
			}
			if judged.Load() != 1 {
				t.Fatalf("the classifier judged %d answers, want 1", judged.Load())
			}
			ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(200*time.Millisecond))
			defer cancel()
			_, err := rlGet(ctx, client, srv.URL)
			if limited := errors.Is(err, rebound.ErrRateLimited); limited != c.throttle {
				t.Fatalf("next request: %v; throttle %v", err, c.throttle)
			}
			if want := 1 + map[bool]int32{true: 0, false: 1}[c.throttle]; srv.seen.Load() != want {
				t.Fatalf("the server saw %d requests, want %d", srv.seen.Load(), want)
			}
		})
	}
}

// TestAdaptiveRateLimitBadInput: a bad setting is an error naming the
// option and the field.
func TestAdaptiveRateLimitBadInput(t *testing.T) {
	for field, c := range map[string]rebound.AdaptiveRateLimitConfig{
		"Beta":          {Beta: math.NaN()},
		"ScaleConstant": {ScaleConstant: -1},
		"Smoothing":     {Smoothing: math.Inf(1)},
		"MinRate":       {MinRate: -0.5},
	} {
		_, err := httpretry.New(nil, httpretry.WithAdaptiveRateLimit(c))
		if err == nil || !strings.Contains(err.Error(), "WithAdaptiveRateLimit") || !strings.Contains(err.Error(), "AdaptiveRateLimitConfig."+field) {
			t.Errorf("%s: %v, want an error naming the option and the field", field, err)
		}
	}
}

// TestAdaptiveRateLimitBounded: a Transport that calls ever new hosts
// keeps the limiters of the last bounded.DefaultMax only; the others are
// released. It calls three times as many hosts, or with -short one and a
// half (still 512 more than the bound, each a connection of its own).
func TestAdaptiveRateLimitBounded(t *testing.T) {
	srv := newScripted(t)
	addr := srv.Listener.Addr().String()
	base := &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: httpretry.NewTransport(base, httpretry.WithAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{MinRate: 1.25}))}
	hosts := 3 * bounded.DefaultMax
	if testing.Short() {
		hosts = bounded.DefaultMax * 3 / 2
	}
	for i := range hosts {
		if _, err := rlGet(context.Background(), client, fmt.Sprintf("http://h%d.ratelimit.test/", i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := srv.seen.Load(); int(n) != hosts {
		t.Fatalf("the server saw %d requests, want %d", n, hosts)
	}
	deadline := time.Now().Add(10 * time.Second)
	for ratelimit.Count() > bounded.DefaultMax+64 {
		if time.Now().After(deadline) {
			t.Fatalf("%d limiters kept after %d hosts, want at most about %d", ratelimit.Count(), hosts, bounded.DefaultMax)
		}
		runtime.GC()
		runtime.Gosched()
	}
	runtime.KeepAlive(client)
}

// BenchmarkAdaptiveRateLimitSlowStart is what the rate limit's slow start
// costs a server that is not limited, once per host: each op starts a
// fresh server (a new host, so a new limiter) and makes 100 GETs from 20
// goroutines that start together, with and without the limit. The
// difference is the slow start's cost (the window opens from 4 as answers
// come back).
func BenchmarkAdaptiveRateLimitSlowStart(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "without"
		if on {
			name = "with"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
				base := &http.Transport{MaxIdleConnsPerHost: 20}
				var opts []httpretry.Option
				if on {
					opts = append(opts, httpretry.WithAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{}))
				}
				c := &http.Client{Transport: httpretry.NewTransport(base, opts...)}
				var wg sync.WaitGroup
				start := make(chan struct{})
				for range 20 {
					wg.Go(func() {
						<-start
						for range 5 {
							if _, err := rlGet(context.Background(), c, srv.URL); err != nil {
								b.Error(err)
							}
						}
					})
				}
				b.StartTimer()
				close(start)
				wg.Wait()
				b.StopTimer()
				base.CloseIdleConnections()
				srv.Close()
				b.StartTimer()
			}
		})
	}
}

// TestAdaptiveThrottleBehindRateLimit: as grpcretry's. With the adaptive
// throttle and the rate limit both on, a request the rate limit keeps
// home (refused for its deadline, or cancelled in its wait) counts in the
// throttle neither as a request nor as a refusal nor as an accept; the
// next request goes. (The throttle counted the rate limit's refusals as
// the host's and kept the requests home itself.)
func TestAdaptiveThrottleBehindRateLimit(t *testing.T) {
	srv := newScripted(t)
	clk := clocktest.New()
	client := &http.Client{Transport: httpretry.NewTransport(srv.Client().Transport,
		httpretry.WithClock(clk), httpretry.WithRandom(clocktest.NewRand(0.5)), httpretry.WithMaxAttempts(1),
		httpretry.WithAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{}), httpretry.WithAdaptiveThrottle(rebound.AdaptiveThrottleConfig{}))}
	u, _ := url.Parse(srv.URL)
	th := adaptive.Throttle(u.Host, rebound.AdaptiveThrottleConfig{})
	srv.answer(http.StatusTooManyRequests, "")
	if code, err := rlGet(context.Background(), client, srv.URL); err != nil || code != http.StatusTooManyRequests {
		t.Fatalf("%d, %v; want the 429", code, err)
	}
	srv.answer(http.StatusOK, "")
	// The next turn is over a second away: requests with 50ms are refused.
	kept := 0 // by the throttle
	for i := range 20 {
		ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(50*time.Millisecond))
		_, err := rlGet(ctx, client, srv.URL)
		cancel()
		switch {
		case errors.Is(err, rebound.ErrRateLimited):
		case errors.Is(err, rebound.ErrRejectedLocally):
			kept++
		default:
			t.Fatalf("request %d: %v, want ErrRateLimited", i, err)
		}
	}
	if r, a := th.Counts(clk.Now()); r != 1 || a != 0 || kept != 0 {
		t.Fatalf("after the refusals the throttle counts %d requests and %d accepts and kept %d requests home, want 1, 0 and none: the host saw one request and refused it", r, a, kept)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { _, err := rlGet(ctx, client, srv.URL); done <- err }()
	if !clk.WaitPending(1) {
		t.Fatal("the request did not wait for its turn")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
	if r, a := th.Counts(clk.Now()); r != 1 || a != 0 {
		t.Fatalf("after a cancelled wait the throttle counts %d requests and %d accepts, want 1 and 0", r, a)
	}
	go func() { _, err := rlGet(context.Background(), client, srv.URL); done <- err }()
	if !clk.WaitPending(1) {
		t.Fatalf("the request did not wait for its turn: %v", <-done)
	}
	clk.Advance(2 * time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := srv.seen.Load(); n != 2 {
		t.Fatalf("the host saw %d requests, want 2", n)
	}
}

// TestAdaptiveRateLimitRecovers: on the real clock, under whatever load
// the machine has (CI runs it with -race), twenty callers calling back to
// back with 1s deadlines, and trying again at once when the rate limit
// refuses them, against an httptest server that accepts 20 a second (a
// burst of 2) for 2s (1s with -short) and then everything: the server soon accepts more
// than 20 a second again (the rate is back at the rate of its last cut
// 2.5s after it, and climbs on; fifteen seconds allows for a loaded
// machine). (Under -race on a loaded machine the client sent nothing from
// the third second on, refusing ten thousand calls a second: the
// refusals ran the queue ahead of every deadline.)
func TestAdaptiveRateLimitRecovers(t *testing.T) {
	t.Parallel()
	lim := limittest.New(20, 2, limittest.Length())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !lim.Allow() {
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	base := &http.Transport{MaxIdleConnsPerHost: 20}
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: httpretry.NewTransport(base, httpretry.WithMaxAttempts(1),
		httpretry.WithAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{}))}
	took, refused := limittest.Recovery(t, lim, 20, 15*time.Second, func(ctx context.Context) error {
		_, err := rlGet(ctx, client, srv.URL)
		return err
	}, func() float64 {
		u, _ := url.Parse(srv.URL)
		return ratelimit.Limiter(u.Host, rebound.AdaptiveRateLimitConfig{}).Rate()
	})
	t.Logf("back above 20/s %v after the server stopped limiting; %d calls refused locally", took, refused)
}
