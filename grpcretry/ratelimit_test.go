package grpcretry_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/adaptive"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/internal/grpctest"
	"github.com/rebound-go/rebound/internal/limittest"
	"github.com/rebound-go/rebound/internal/ratelimit"
	"github.com/rebound-go/rebound/serviceconfig"
)

// answer is a scripted status: code and a pushback trailer ("" for none).
type answer struct {
	code     codes.Code
	pushback string
}

// scriptedServer answers every call with the answer a test sets.
func scriptedServer(t *testing.T) (*grpctest.Server, *atomic.Pointer[answer]) {
	var a atomic.Pointer[answer]
	a.Store(&answer{code: codes.OK})
	srv := grpctest.Start(t, grpctest.Handlers{
		Unary: func(ctx context.Context, _ int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
			ans := a.Load()
			if ans.pushback != "" {
				grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", ans.pushback))
			}
			if ans.code != codes.OK {
				return nil, status.Error(ans.code, "scripted")
			}
			return &testpb.SimpleResponse{}, nil
		},
		ServerStream: func(_ int, _ *testpb.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
			ans := a.Load()
			if ans.pushback != "" {
				s.SetTrailer(metadata.Pairs("grpc-retry-pushback-ms", ans.pushback))
			}
			if ans.code != codes.OK {
				return status.Error(ans.code, "scripted")
			}
			return nil
		},
	})
	return srv, &a
}

// limitedClient dials srv through rebound with a manual clock and an
// adaptive rate limit of its own server name. The clock is an hour ahead,
// so that a deadline set from it near a turn leaves the network time on a
// busy machine.
func limitedClient(t *testing.T, srv *grpctest.Server, cfg *serviceconfig.Config, opts ...grpcretry.Option) (testpb.TestServiceClient, *clocktest.Clock) {
	clk := clocktest.NewAhead()
	c, err := grpcretry.New(cfg, append([]grpcretry.Option{grpcretry.WithClock(clk), grpcretry.WithRandom(clocktest.NewRand(0.5)),
		grpcretry.WithServerName(fmt.Sprint("ratelimit-", t.Name(), time.Now().UnixNano())),
		grpcretry.WithAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return testpb.NewTestServiceClient(srv.Dial(t, c.DialOptions()...)), clk
}

// TestAdaptiveRateLimit: nothing waits before the server's first
// throttle; after it every call, its first attempt included, waits for
// its turn (without a lock: a second waits beside the first); one whose
// turn comes after its deadline fails at once, unsent, with
// RESOURCE_EXHAUSTED and ErrRateLimited; a cancelled wait gives its token
// back.
func TestAdaptiveRateLimit(t *testing.T) {
	srv, ans := scriptedServer(t)
	tc, clk := limitedClient(t, srv, nil)
	ctx := context.Background()
	call := func(ctx context.Context) error { _, err := tc.UnaryCall(ctx, grpctest.Request("x")); return err }
	for range 3 {
		if err := call(ctx); err != nil {
			t.Fatal(err)
		}
	}
	ans.Store(&answer{code: codes.ResourceExhausted})
	if err := call(ctx); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("got %v, want the server's RESOURCE_EXHAUSTED", err)
	}
	if n := len(clk.Sleeps()); n != 0 || srv.Count(grpctest.UnaryCall) != 4 {
		t.Fatalf("%d waits and %d calls before the limit, want 0 and 4", n, srv.Count(grpctest.UnaryCall))
	}
	ans.Store(&answer{code: codes.OK})

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
	if n := srv.Count(grpctest.UnaryCall); n != 4 {
		t.Fatalf("the server saw %d calls while they waited, want 4", n)
	}
	dctx, cancel := context.WithDeadline(ctx, clk.Now().Add(300*time.Millisecond))
	err := call(dctx)
	cancel()
	if status.Code(err) != codes.ResourceExhausted || !errors.Is(err, rebound.ErrRateLimited) {
		t.Fatalf("a call whose turn is past its deadline: %v, want RESOURCE_EXHAUSTED and ErrRateLimited", err)
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
	if n := srv.Count(grpctest.UnaryCall); n != 6 {
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
	if err := <-done; status.Code(err) != codes.Canceled {
		t.Fatalf("cancelled wait: %v, want CANCELLED", err)
	}
	go func() { done <- call(ctx) }()
	if !clk.WaitPending(1) {
		t.Fatal("the call did not wait")
	}
	s := clk.Sleeps()
	if a, b := s[len(s)-2], s[len(s)-1]; a != b || a <= 0 {
		t.Fatalf("waits %v then %v: the cancelled token was not given back", a, b)
	}
	clk.Advance(time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := srv.Count(grpctest.UnaryCall); n != 7+extra {
		t.Fatalf("the server saw %d calls, want %d", n, 7+extra)
	}
}

// TestAdaptiveRateLimitThrottles: RESOURCE_EXHAUSTED and any status with
// pushback are throttles and start the limit; others are not.
func TestAdaptiveRateLimitThrottles(t *testing.T) {
	for _, c := range []struct {
		answer
		throttle bool
	}{
		{answer{codes.ResourceExhausted, ""}, true},
		{answer{codes.ResourceExhausted, "1000"}, true},
		{answer{codes.Unavailable, "1000"}, true},
		{answer{codes.Unavailable, "-1"}, true},
		{answer{codes.Unavailable, ""}, false},
		{answer{codes.Internal, ""}, false},
		{answer{codes.OK, ""}, false},
	} {
		t.Run(fmt.Sprint(c.code, "/", c.pushback), func(t *testing.T) {
			srv, ans := scriptedServer(t)
			ans.Store(&c.answer)
			tc, clk := limitedClient(t, srv, nil)
			if _, err := tc.UnaryCall(context.Background(), grpctest.Request("x")); status.Code(err) != c.code {
				t.Fatalf("got %v, want %v", err, c.code)
			}
			ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(200*time.Millisecond))
			defer cancel()
			_, err := tc.UnaryCall(ctx, grpctest.Request("x"))
			if limited := errors.Is(err, rebound.ErrRateLimited); limited != c.throttle {
				t.Fatalf("next call: %v; throttle %v", err, c.throttle)
			}
			want := 2
			if c.throttle {
				want = 1
			}
			if n := srv.Count(grpctest.UnaryCall); n != want {
				t.Fatalf("the server saw %d calls, want %d", n, want)
			}
		})
	}
}

// TestAdaptiveRateLimitClassifier: the classifier's word on throttling
// is the limit's, for retried and hedged calls. UNAVAILABLE or INTERNAL
// that it marks as throttling starts the limit; RESOURCE_EXHAUSTED, which
// the built-in verdict it is given marks, does not once it unmarks it; a
// mark it leaves as it was is judged by the limit's own rules.
func TestAdaptiveRateLimitClassifier(t *testing.T) {
	mark := func(i rebound.RetryInfo) rebound.RetryInfo { i.SlowDown = true; return i }
	unmark := func(i rebound.RetryInfo) rebound.RetryInfo { i.SlowDown = false; return i }
	same := func(i rebound.RetryInfo) rebound.RetryInfo { return i }
	for _, c := range []struct {
		name     string
		hedged   bool
		stream   bool
		code     codes.Code
		given    bool // the built-in verdict's SlowDown mark
		judge    func(rebound.RetryInfo) rebound.RetryInfo
		throttle bool
	}{
		{"UNAVAILABLE marked", false, false, codes.Unavailable, false, mark, true},
		{"UNAVAILABLE as is", false, false, codes.Unavailable, false, same, false},
		{"RESOURCE_EXHAUSTED unmarked", false, false, codes.ResourceExhausted, true, unmark, false},
		{"RESOURCE_EXHAUSTED as is", false, false, codes.ResourceExhausted, true, same, true},
		{"hedged INTERNAL marked", true, false, codes.Internal, false, mark, true},
		{"hedged RESOURCE_EXHAUSTED unmarked", true, false, codes.ResourceExhausted, true, unmark, false},
		{"stream UNAVAILABLE marked", false, true, codes.Unavailable, false, mark, true},
		{"stream RESOURCE_EXHAUSTED unmarked", false, true, codes.ResourceExhausted, true, unmark, false},
		{"hedged stream INTERNAL marked", true, true, codes.Internal, false, mark, true},
		{"hedged stream RESOURCE_EXHAUSTED unmarked", true, true, codes.ResourceExhausted, true, unmark, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, ans := scriptedServer(t)
			ans.Store(&answer{code: c.code})
			cfg := retryConfig(t, 2, `"ABORTED"`, "") // nothing here is retried
			if c.hedged {
				cfg = hedgeConfig(t, 2, "10s", "") // INTERNAL and RESOURCE_EXHAUSTED are fatal
			}
			var judged atomic.Int32
			tc, clk := limitedClient(t, srv, cfg, grpcretry.WithClassifier(func(f grpcretry.Failure, builtin rebound.RetryInfo) rebound.RetryInfo {
				if judged.Add(1) == 1 && builtin.SlowDown != c.given {
					t.Errorf("the built-in verdict's SlowDown is %v, want %v", builtin.SlowDown, c.given)
				}
				return c.judge(builtin)
			}))
			var err error
			if c.stream {
				var st grpc.ServerStreamingClient[testpb.StreamingOutputCallResponse]
				if st, err = tc.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{}); err == nil {
					_, err = st.Recv()
				}
			} else {
				_, err = tc.UnaryCall(context.Background(), grpctest.Request("x"))
			}
			if status.Code(err) != c.code {
				t.Fatalf("got %v, want %v", err, c.code)
			}
			if judged.Load() != 1 {
				t.Fatalf("the classifier judged %d answers, want 1", judged.Load())
			}
			ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(200*time.Millisecond))
			defer cancel()
			_, err = tc.UnaryCall(ctx, grpctest.Request("x"))
			if limited := errors.Is(err, rebound.ErrRateLimited); limited != c.throttle {
				t.Fatalf("next call: %v; throttle %v", err, c.throttle)
			}
			want := 2
			if c.throttle {
				want = 1
			}
			if n := srv.Count(grpctest.UnaryCall) + srv.Count(grpctest.StreamingOutputCall); n != want {
				t.Fatalf("the server saw %d calls, want %d", n, want)
			}
		})
	}
}

// TestAdaptiveRateLimitUnderPolicy: under a retry policy that retries
// RESOURCE_EXHAUSTED, a call whose turn is past its deadline is not
// retried: it ends at once, without a backoff, with ErrThrottled. Streams
// wait for the same limit.
func TestAdaptiveRateLimitUnderPolicy(t *testing.T) {
	srv, ans := scriptedServer(t)
	ans.Store(&answer{codes.ResourceExhausted, "-1"}) // a throttle the policy does not retry
	tc, clk := limitedClient(t, srv, retryConfig(t, 3, `"RESOURCE_EXHAUSTED"`, ""))
	if _, err := tc.UnaryCall(context.Background(), grpctest.Request("x")); status.Code(err) != codes.ResourceExhausted {
		t.Fatal(err)
	}
	ans.Store(&answer{code: codes.OK})
	ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(200*time.Millisecond))
	defer cancel()
	var n int
	_, err := tc.UnaryCall(ctx, grpctest.Request("x"), grpcretry.CountAttempts(&n))
	if status.Code(err) != codes.ResourceExhausted || !errors.Is(err, rebound.ErrRateLimited) || !errors.Is(err, rebound.ErrThrottled) {
		t.Fatalf("%v, want RESOURCE_EXHAUSTED ending with ErrThrottled", err)
	}
	if c := srv.Count(grpctest.UnaryCall); c != 1 || n != 1 || len(clk.Sleeps()) != 0 {
		t.Fatalf("server saw %d calls, %d attempts, %d waits; want 1, 1, 0", c, n, len(clk.Sleeps()))
	}
	st, err := tc.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{})
	if err == nil {
		_, err = st.Recv()
	}
	if !errors.Is(err, rebound.ErrRateLimited) {
		t.Fatalf("stream: %v, want ErrRateLimited", err)
	}
	if n := srv.Count(grpctest.StreamingOutputCall); n != 0 {
		t.Fatalf("server saw %d streams, want 0", n)
	}
}

// TestAdaptiveRateLimitBadInput: a bad setting is an error naming the
// option and the field.
func TestAdaptiveRateLimitBadInput(t *testing.T) {
	for field, c := range map[string]rebound.AdaptiveRateLimitConfig{
		"Beta":          {Beta: 1.5},
		"ScaleConstant": {ScaleConstant: math.NaN()},
		"Smoothing":     {Smoothing: -1},
		"MinRate":       {MinRate: math.Inf(1)},
	} {
		_, err := grpcretry.New(nil, grpcretry.WithAdaptiveRateLimit(c))
		if err == nil || !strings.Contains(err.Error(), "WithAdaptiveRateLimit") || !strings.Contains(err.Error(), "AdaptiveRateLimitConfig."+field) {
			t.Errorf("%s: %v, want an error naming the option and the field", field, err)
		}
	}
}

// TestAdaptiveRateLimitBounded: the limiters of closed and dropped
// ClientConns are released, whatever the number of server names used.
func TestAdaptiveRateLimitBounded(t *testing.T) {
	srv, _ := scriptedServer(t)
	before := ratelimit.Count()
	for i := range 200 {
		c, err := grpcretry.New(nil, grpcretry.WithServerName(fmt.Sprint("bounded-", i, "-", time.Now().UnixNano())),
			grpcretry.WithAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{}))
		if err != nil {
			t.Fatal(err)
		}
		cc, err := grpc.NewClient(srv.Addr, append(c.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := testpb.NewTestServiceClient(cc).UnaryCall(context.Background(), grpctest.Request("x")); err != nil {
			t.Fatal(err)
		}
		cc.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for ratelimit.Count() > before+20 {
		if time.Now().After(deadline) {
			t.Fatalf("%d limiters kept after 200 closed conns, want at most %d", ratelimit.Count(), before+20)
		}
		runtime.GC()
		runtime.Gosched()
	}
}

// TestAdaptiveThrottleBehindRateLimit: with the adaptive throttle and the
// rate limit both on, a call the rate limit keeps home never reached the
// server, and the throttle counts it neither as a request nor as a
// refusal, nor, cancelled while it waited, as an accept: unary calls and
// streams refused for their deadline, a call cancelled in its wait. Its
// window holds the one call the server refused, and the next call goes.
// (The throttle counted the rate limit's refusals as the server's: from
// the second refusal on it kept the calls home itself, its window holding
// 21 requests, though the server had seen one call.)
func TestAdaptiveThrottleBehindRateLimit(t *testing.T) {
	srv, ans := scriptedServer(t)
	name := fmt.Sprint("behind-", time.Now().UnixNano())
	tc, clk := limitedClient(t, srv, nil, grpcretry.WithServerName(name), grpcretry.WithAdaptiveThrottle(rebound.AdaptiveThrottleConfig{}))
	th := adaptive.Throttle(name, rebound.AdaptiveThrottleConfig{})
	ans.Store(&answer{code: codes.ResourceExhausted})
	if _, err := tc.UnaryCall(context.Background(), grpctest.Request("x")); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("got %v, want the server's RESOURCE_EXHAUSTED", err)
	}
	ans.Store(&answer{code: codes.OK})
	// The next turn is over a second away: calls with 50ms are refused.
	kept := 0 // by the throttle
	for i := range 20 {
		ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(50*time.Millisecond))
		var err error
		if i%2 == 0 {
			_, err = tc.UnaryCall(ctx, grpctest.Request("x"))
		} else {
			var s grpc.ServerStreamingClient[testpb.StreamingOutputCallResponse]
			if s, err = tc.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{}); err == nil {
				_, err = s.Recv()
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
	go func() { _, err := tc.UnaryCall(ctx, grpctest.Request("x")); done <- err }()
	if !clk.WaitPending(1) {
		t.Fatal("the call did not wait for its turn")
	}
	cancel()
	if err := <-done; status.Code(err) != codes.Canceled {
		t.Fatalf("cancelled wait: %v", err)
	}
	if r, a := th.Counts(clk.Now()); r != 1 || a != 0 {
		t.Fatalf("after a cancelled wait the throttle counts %d requests and %d accepts, want 1 and 0", r, a)
	}
	go func() { _, err := tc.UnaryCall(context.Background(), grpctest.Request("x")); done <- err }()
	if !clk.WaitPending(1) {
		t.Fatalf("the call did not wait for its turn: %v", <-done)
	}
	clk.Advance(2 * time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := srv.Count(grpctest.UnaryCall); n != 2 {
		t.Fatalf("the server saw %d calls, want 2", n)
	}
}

// TestAdaptiveRateLimitRecovers: see httpretry's. A grpc-go server on
// 127.0.0.1 that accepts 20 calls a second (a burst of 2) for 2s (1s with -short) and
// answers the rest RESOURCE_EXHAUSTED, then accepts everything; twenty
// callers on the real clock: the server soon accepts more than 20 a
// second again.
func TestAdaptiveRateLimitRecovers(t *testing.T) {
	t.Parallel()
	lim := limittest.New(20, 2, limittest.Length())
	name := fmt.Sprint("recovers-", time.Now().UnixNano())
	srv := grpctest.Start(t, grpctest.Handlers{
		Unary: func(context.Context, int, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
			if !lim.Allow() {
				return nil, status.Error(codes.ResourceExhausted, "limited")
			}
			return &testpb.SimpleResponse{}, nil
		},
	})
	c, err := grpcretry.New(nil, grpcretry.WithServerName(name),
		grpcretry.WithAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{}))
	if err != nil {
		t.Fatal(err)
	}
	tc := testpb.NewTestServiceClient(srv.Dial(t, c.DialOptions()...))
	took, refused := limittest.Recovery(t, lim, 20, 15*time.Second, func(ctx context.Context) error {
		_, err := tc.UnaryCall(ctx, grpctest.Request("x"))
		return err
	}, func() float64 { return ratelimit.Limiter(name, rebound.AdaptiveRateLimitConfig{}).Rate() })
	t.Logf("back above 20/s %v after the server stopped limiting; %d calls refused locally", took, refused)
}
