package grpcretry_test

// Tests of A6 rules that an outside audit found broken (issue 12), one
// test per rule, each against a real grpc-go server.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/internal/grpctest"
	"github.com/rebound-go/rebound/internal/observe/observetest"
	"github.com/rebound-go/rebound/serviceconfig"
)

func parseConfig(t testing.TB, js string) *serviceconfig.Config {
	t.Helper()
	cfg, err := serviceconfig.Parse([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// A6 "Exponential Backoff": retry n waits random(0, min(initialBackoff *
// multiplier^(n-1), maxBackoff)), so a maxBackoff below initialBackoff caps
// the first retry's wait too.
func TestBackoffCappedBelowInitial(t *testing.T) {
	srv := grpctest.Start(t, failFirst(100, codes.Unavailable))
	cfg := parseConfig(t, fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"retryPolicy":{
		"maxAttempts":3,"initialBackoff":"2s","maxBackoff":"0.05s","backoffMultiplier":2,
		"retryableStatusCodes":["UNAVAILABLE"]}}]}`, grpctest.Service))
	clk := clocktest.NewAuto()
	c, err := grpcretry.New(cfg, grpcretry.WithClock(clk), grpcretry.WithRandom(clocktest.NewRand(0.99)))
	if err != nil {
		t.Fatal(err)
	}
	tc := testpb.NewTestServiceClient(srv.Dial(t, c.DialOptions()...))
	_, err = tc.UnaryCall(context.Background(), grpctest.Request("x"))
	if !errors.Is(err, rebound.ErrAttemptsExhausted) || status.Code(err) != codes.Unavailable {
		t.Fatalf("err = %v, want UNAVAILABLE after attempts exhausted", err)
	}
	if got := srv.Count(grpctest.UnaryCall); got != 3 {
		t.Fatalf("server saw %d attempts, want 3", got)
	}
	want := []time.Duration{49500 * time.Microsecond, 49500 * time.Microsecond}
	if got := clk.Sleeps(); !slices.Equal(got, want) {
		t.Fatalf("backoffs = %v, want %v (0.99 of maxBackoff)", got, want)
	}
}

// No config that Parse accepts may fail calls: a tokenRatio that truncates
// to 0.000, or one far above maxTokens, still makes a throttle.
func TestThrottleFromAnyParsedRatio(t *testing.T) {
	for _, ratio := range []string{"0.0001", "1e13", "1e300"} {
		t.Run(ratio, func(t *testing.T) {
			srv := grpctest.Start(t, failFirst(1, codes.Unavailable))
			cfg := retryConfig(t, 3, `"UNAVAILABLE"`, `,"retryThrottling":{"maxTokens":10,"tokenRatio":`+ratio+`}`)
			tc, _ := client(t, srv, cfg, grpcretry.WithServerName(fmt.Sprint(t.Name(), serverSeq.Add(1))))
			if _, err := tc.UnaryCall(context.Background(), grpctest.Request("x")); err != nil {
				t.Fatalf("call failed: %v", err)
			}
			if got := srv.Count(grpctest.UnaryCall); got != 2 {
				t.Fatalf("server saw %d attempts, want 2", got)
			}
		})
	}
}

// A call cancelled while it waits between attempts ends CANCELLED, as in
// grpc-go, not with the last attempt's status; its error still counts the
// attempts.
func TestCancelledDuringBackoff(t *testing.T) {
	cfg := retryConfig(t, 4, `"UNAVAILABLE"`, "")
	for _, kind := range []string{"unary", "server stream"} {
		t.Run(kind, func(t *testing.T) {
			srv := grpctest.Start(t, grpctest.Handlers{
				Unary: failFirst(100, codes.Unavailable).Unary,
				ServerStream: func(int, *testpb.StreamingOutputCallRequest, grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
					return status.Error(codes.Unavailable, "down")
				},
			})
			clk := clocktest.New()
			c, err := grpcretry.New(cfg, grpcretry.WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			tc := testpb.NewTestServiceClient(srv.Dial(t, c.DialOptions()...))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() {
				if clk.WaitPending(1) { // the first backoff has started
					cancel()
				}
			}()
			if kind == "unary" {
				_, err = tc.UnaryCall(ctx, grpctest.Request("x"))
			} else {
				var st grpc.ServerStreamingClient[testpb.StreamingOutputCallResponse]
				if st, err = tc.StreamingOutputCall(ctx, &testpb.StreamingOutputCallRequest{}); err == nil {
					_, err = st.Recv()
				}
			}
			if status.Code(err) != codes.Canceled || !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want CANCELLED with context.Canceled", err)
			}
			var re *rebound.Error
			if !errors.As(err, &re) || re.Attempts != 1 {
				t.Fatalf("err = %#v, want a *rebound.Error after 1 attempt", err)
			}
		})
	}
}

// A6 "Throttling": every outgoing RPC of a server name affects its
// token_count, whatever its method. Successes of methods without a policy
// refill the throttle, and their failures take a token only when pushback
// said not to retry. Here UnaryCall has no policy and StreamingOutputCall
// retries UNAVAILABLE, or the other way round.
func TestThrottleCountsCallsWithoutPolicy(t *testing.T) {
	for _, unpoliced := range []string{"unary", "server stream"} {
		t.Run(unpoliced, func(t *testing.T) {
			var fail, pushback atomic.Bool // how the method without a policy answers
			answer := func(ctx context.Context) error {
				if pushback.Load() {
					grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", "-1"))
				}
				if fail.Load() {
					return status.Error(codes.Unavailable, "down")
				}
				return nil
			}
			policed := grpctest.UnaryCall
			srv := grpctest.Start(t, grpctest.Handlers{
				Unary: func(ctx context.Context, _ int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
					if unpoliced == "unary" {
						return &testpb.SimpleResponse{}, answer(ctx)
					}
					return nil, status.Error(codes.Unavailable, "down")
				},
				ServerStream: func(_ int, _ *testpb.StreamingOutputCallRequest, st grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
					if unpoliced == "server stream" {
						return answer(st.Context())
					}
					return status.Error(codes.Unavailable, "down")
				},
			})
			method := "UnaryCall"
			if unpoliced == "unary" {
				method, policed = "StreamingOutputCall", grpctest.StreamingOutputCall
			}
			cfg := parseConfig(t, fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q,"method":%q}],"retryPolicy":{
				"maxAttempts":2,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,
				"retryableStatusCodes":["UNAVAILABLE"]}}],
				"retryThrottling":{"maxTokens":10,"tokenRatio":1}}`, grpctest.Service, method))
			tc, _ := client(t, srv, cfg, grpcretry.WithServerName(fmt.Sprint(t.Name(), serverSeq.Add(1))))
			callPoliced := func() int { // the attempts the server saw
				before := srv.Count(policed)
				if policed == grpctest.UnaryCall {
					_, _ = tc.UnaryCall(context.Background(), grpctest.Request("x"))
				} else if st, err := tc.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{}); err == nil {
					_, _ = st.Recv()
				}
				return srv.Count(policed) - before
			}
			callUnpoliced := func() {
				if unpoliced == "unary" {
					_, _ = tc.UnaryCall(context.Background(), grpctest.Request("x"))
				} else if st, err := tc.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{}); err == nil {
					_, _ = st.Recv()
				}
			}
			// 10 tokens: two failed calls of two attempts each, then one
			// attempt that leaves 5, the threshold.
			for _, want := range []int{2, 2, 1} {
				if got := callPoliced(); got != want {
					t.Fatalf("draining the throttle: a call made %d attempts, want %d", got, want)
				}
			}
			callUnpoliced() // each success adds 1: 7 tokens
			callUnpoliced()
			if got := callPoliced(); got != 2 {
				t.Fatalf("after successes without a policy, a call made %d attempts, want 2 (retried)", got)
			}
			// 5 tokens. Refill to 10, then fail without a policy.
			for range 5 {
				callUnpoliced()
			}
			fail.Store(true)
			for range 5 {
				callUnpoliced() // no pushback: not a failure for A6
			}
			if got := callPoliced(); got != 2 {
				t.Fatalf("after failures without pushback, a call made %d attempts, want 2", got)
			}
			// 8 tokens: three failures with pushback "stop" leave 5.
			pushback.Store(true)
			for range 3 {
				callUnpoliced()
			}
			if got := callPoliced(); got != 1 {
				t.Fatalf("after pushback stops, a call made %d attempts, want 1 (throttled)", got)
			}
		})
	}
}

// headerScript is a server whose unary attempts, numbered by the client,
// send response headers when the test says so, then wait for their
// verdict; "headers n" and "cancel n" report what attempt n did.
type headerScript struct {
	events  chan string
	headers [8]chan struct{}
	verdict [8]chan error
}

func newHeaderScript() *headerScript {
	s := &headerScript{events: make(chan string, 64)}
	for i := range s.verdict {
		s.headers[i], s.verdict[i] = make(chan struct{}, 1), make(chan error, 1)
	}
	return s
}

func (s *headerScript) handlers() grpctest.Handlers {
	return grpctest.Handlers{Unary: func(ctx context.Context, _ int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		n := grpcretry.PreviousAttempts(ctx) + 1
		s.events <- fmt.Sprint("start ", n)
		for {
			select {
			case <-s.headers[n]:
				if err := grpc.SendHeader(ctx, metadata.Pairs("from", fmt.Sprint(n))); err != nil {
					return nil, err
				}
				s.events <- fmt.Sprint("headers ", n)
			case err := <-s.verdict[n]:
				return &testpb.SimpleResponse{}, err
			case <-ctx.Done():
				s.events <- fmt.Sprint("cancel ", n)
				return nil, ctx.Err()
			}
		}
	}}
}

func (s *headerScript) expect(t *testing.T, want ...string) {
	t.Helper()
	var got []string
	for range want {
		select {
		case e := <-s.events:
			got = append(got, e)
		case <-time.After(10 * time.Second):
			t.Fatalf("events %v, still waiting for %v", got, want)
		}
	}
	slices.Sort(got)
	w := slices.Clone(want)
	slices.Sort(w)
	if !slices.Equal(got, w) {
		t.Fatalf("events %v, want %v", got, want)
	}
}

// A6 "When Retries are Valid": response headers commit a hedged unary
// call to their attempt at once: the other attempts are cancelled and no
// hedge follows, whatever the attempt's end.
func TestHedgeCommitsOnHeaders(t *testing.T) {
	t.Run("first attempt", func(t *testing.T) {
		s := newHeaderScript()
		srv := grpctest.Start(t, s.handlers())
		cc, clk := hedgeClient(t, srv, hedgeConfig(t, 3, "0.1s", ""), nil)
		p := start(t, context.Background(), cc, new(testpb.SimpleResponse))
		s.expect(t, "start 1")
		s.headers[1] <- struct{}{}
		s.expect(t, "headers 1")
		// The commit disarms the hedging timer: no hedge is ever due.
		if !clk.WaitPending(0) {
			t.Fatal("the hedging timer is still armed after the commit")
		}
		clk.Advance(time.Second)
		s.verdict[1] <- status.Error(codes.Unavailable, "after headers")
		p.check(codes.Unavailable, rebound.ErrCommitted, 1)
		if got := srv.Count(grpctest.UnaryCall); got != 1 {
			t.Fatalf("server saw %d attempts, want 1", got)
		}
	})
	t.Run("a hedge", func(t *testing.T) {
		s := newHeaderScript()
		srv := grpctest.Start(t, s.handlers())
		cc, clk := hedgeClient(t, srv, hedgeConfig(t, 3, "0.1s", ""), nil)
		p := start(t, context.Background(), cc, new(testpb.SimpleResponse))
		s.expect(t, "start 1")
		clk.WaitCreated(1)
		clk.Advance(100 * time.Millisecond)
		s.expect(t, "start 2")
		s.headers[2] <- struct{}{}
		s.expect(t, "headers 2", "cancel 1")
		if !clk.WaitPending(0) {
			t.Fatal("the hedging timer is still armed after the commit")
		}
		s.verdict[2] <- nil
		p.check(codes.OK, nil, 2)
		if got := p.header.Get("from"); len(got) != 1 || got[0] != "2" {
			t.Fatalf("header %v, want attempt 2's", p.header)
		}
		if got := srv.Count(grpctest.UnaryCall); got != 2 {
			t.Fatalf("server saw %d attempts, want 2", got)
		}
	})
}

// A hedge the throttle refuses shows in Stats, in the metrics and in the
// debug log, even when the attempt already sent then succeeds.
func TestRefusedHedgeCounted(t *testing.T) {
	for _, kind := range []string{"unary", "server stream"} {
		t.Run(kind, func(t *testing.T) {
			release := make(chan struct{})
			srv := grpctest.Start(t, grpctest.Handlers{
				Unary: func(context.Context, int, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
					<-release
					return &testpb.SimpleResponse{}, nil
				},
				ServerStream: func(_ int, _ *testpb.StreamingOutputCallRequest, st grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
					<-release
					return st.Send(&testpb.StreamingOutputCallResponse{})
				},
			})
			cfg := hedgeConfig(t, 3, "0.1s", throttling)
			reader := sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			defer mp.Shutdown(context.Background())
			logger, records := observetest.DebugLog(t)
			clk := clocktest.New()
			c, err := grpcretry.New(cfg, grpcretry.WithClock(clk), grpcretry.WithServerName(serverName(srv)),
				grpcretry.WithMeterProvider(mp), grpcretry.WithLogger(logger))
			if err != nil {
				t.Fatal(err)
			}
			cc := srv.Dial(t, c.DialOptions()...)
			th := throttleOf(t, srv, cfg)
			for range 5 { // 10 tokens down to 5: at the threshold, hedges are refused
				th.RecordFailure()
			}
			tc := testpb.NewTestServiceClient(cc)
			done := make(chan error, 1)
			method := grpctest.UnaryCall
			go func() {
				if kind == "unary" {
					_, err := tc.UnaryCall(context.Background(), grpctest.Request("x"))
					done <- err
					return
				}
				st, err := tc.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{})
				for err == nil {
					_, err = st.Recv()
				}
				if err == io.EOF {
					err = nil
				}
				done <- err
			}()
			if kind != "unary" {
				method = grpctest.StreamingOutputCall
			}
			if !clk.WaitCreated(1) {
				t.Fatal("no hedging timer")
			}
			clk.Advance(100 * time.Millisecond) // the second attempt is due, and refused
			// The refusal is logged by the call's hedging loop, which may
			// run after the timer has fired: released before then, the
			// first attempt could end the call first.
			refused := func() bool {
				for _, r := range records() {
					if r["msg"] == "rebound: throttled, hedge not sent" && r["method"] == method {
						return true
					}
				}
				return false
			}
			waitFor(t, refused)
			close(release)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if got := srv.Count(method); got != 1 {
				t.Fatalf("server saw %d attempts, want 1", got)
			}
			if s := c.Stats()[method]; s.Throttled != 1 || s.Calls != 1 {
				t.Fatalf("stats %+v, want 1 call, throttled once", s)
			}
			got := observetest.Collect(t, reader, "github.com/rebound-go/rebound/grpcretry")
			if n := observetest.Counter(t, got, "rebound.client.call.retries_throttled", "{retry}", "grpc", method, cc.CanonicalTarget()); n != 1 {
				t.Fatalf("retries_throttled = %d, want 1", n)
			}
			if n := len(records()); n != 1 {
				t.Fatalf("%d debug records, want only the refused hedge's: %v", n, records())
			}
		})
	}
}

// A6 "Memory Management": a unary or server-streaming request that does
// not fit the per-RPC limit, or what is left of the client's total, is
// sent once and never retried or hedged; the room it took is given back
// when the call ends.
func TestBufferLimitsOneMessageCalls(t *testing.T) {
	big, small := strings.Repeat("x", 8<<10), strings.Repeat("x", 100)
	unavailable := status.Error(codes.Unavailable, "down")
	cases := []struct {
		name   string
		config func(t testing.TB) *serviceconfig.Config
		call   func(tc testpb.TestServiceClient, body string) error
		method string
	}{
		{"unary retry", func(t testing.TB) *serviceconfig.Config { return retryConfig(t, 3, `"UNAVAILABLE"`, "") },
			func(tc testpb.TestServiceClient, body string) error {
				_, err := tc.UnaryCall(context.Background(), grpctest.Request(body))
				return err
			}, grpctest.UnaryCall},
		{"unary hedge", func(t testing.TB) *serviceconfig.Config { return hedgeConfig(t, 3, "0s", "") },
			func(tc testpb.TestServiceClient, body string) error {
				_, err := tc.UnaryCall(context.Background(), grpctest.Request(body))
				return err
			}, grpctest.UnaryCall},
		{"server stream retry", func(t testing.TB) *serviceconfig.Config { return retryConfig(t, 3, `"UNAVAILABLE"`, "") },
			func(tc testpb.TestServiceClient, body string) error {
				st, err := tc.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: []byte(body)}})
				if err == nil {
					_, err = st.Recv()
				}
				return err
			}, grpctest.StreamingOutputCall},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := grpctest.Start(t, grpctest.Handlers{
				Unary: func(context.Context, int, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
					return nil, unavailable
				},
				ServerStream: func(int, *testpb.StreamingOutputCallRequest, grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
					return unavailable
				},
			})
			c, err := grpcretry.New(tc.config(t), grpcretry.WithClock(clocktest.NewAuto()), grpcretry.WithBufferLimits(16<<10, 1<<10))
			if err != nil {
				t.Fatal(err)
			}
			client := testpb.NewTestServiceClient(srv.Dial(t, c.DialOptions()...))
			err = tc.call(client, big)
			if status.Code(err) != codes.Unavailable || !errors.Is(err, rebound.ErrCommitted) {
				t.Fatalf("8 KiB request under a 1 KiB limit: err = %v, want UNAVAILABLE, committed", err)
			}
			if got := srv.Count(tc.method); got != 1 {
				t.Fatalf("8 KiB request under a 1 KiB limit: server saw %d attempts, want 1", got)
			}
			_ = tc.call(client, small)
			if got := srv.Count(tc.method) - 1; got != 3 {
				t.Fatalf("100 B request: server saw %d attempts, want 3", got)
			}
		})
	}
}

// The whole-client limit counts the requests of the retried calls in
// flight from their first failure until they end: a call whose first
// attempt is still in flight holds no room, one waiting on its retry does.
func TestBufferLimitTotalReleased(t *testing.T) {
	holdFirst, holdRetry := make(chan struct{}), make(chan struct{})
	unavailable := status.Error(codes.Unavailable, "down")
	srv := grpctest.Start(t, grpctest.Handlers{Unary: func(ctx context.Context, _ int, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		switch string(req.GetPayload().GetBody()[:4]) {
		case "hld1": // held on its first attempt
			<-holdFirst
			return &testpb.SimpleResponse{}, nil
		case "hld2": // fails once, then held on its retry
			if grpcretry.PreviousAttempts(ctx) == 0 {
				return nil, unavailable
			}
			<-holdRetry
			return &testpb.SimpleResponse{}, nil
		}
		return nil, unavailable
	}})
	c, err := grpcretry.New(retryConfig(t, 2, `"UNAVAILABLE"`, ""), grpcretry.WithClock(clocktest.NewAuto()), grpcretry.WithBufferLimits(10<<10, 8<<10))
	if err != nil {
		t.Fatal(err)
	}
	tc := testpb.NewTestServiceClient(srv.Dial(t, c.DialOptions()...))
	body := strings.Repeat("x", 6<<10)
	call := func(prefix string) error {
		_, err := tc.UnaryCall(context.Background(), grpctest.Request(prefix+body))
		return err
	}
	held := make(chan error, 1)
	go func() { held <- call("hld1") }()
	waitFor(t, func() bool { return srv.Count(grpctest.UnaryCall) == 1 })
	// 6 KiB in a first attempt hold no room: another 6 KiB are retried.
	if err := call("fail"); !errors.Is(err, rebound.ErrAttemptsExhausted) || srv.Count(grpctest.UnaryCall) != 3 {
		t.Fatalf("while a first attempt is in flight: err = %v, %d attempts in all; want attempts exhausted after 2", err, srv.Count(grpctest.UnaryCall)-1)
	}
	close(holdFirst)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	go func() { held <- call("hld2") }()
	waitFor(t, func() bool { return srv.Count(grpctest.UnaryCall) == 5 })
	// 6 KiB are held for a retry: another 6 KiB do not fit the 10 KiB total.
	if err := call("fail"); !errors.Is(err, rebound.ErrCommitted) || srv.Count(grpctest.UnaryCall) != 6 {
		t.Fatalf("while 6 KiB wait on a retry: err = %v, %d attempts; want committed after 1", err, srv.Count(grpctest.UnaryCall)-5)
	}
	close(holdRetry)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	// Released: the same request is retried now.
	if err := call("fail"); !errors.Is(err, rebound.ErrAttemptsExhausted) || srv.Count(grpctest.UnaryCall) != 8 {
		t.Fatalf("after release: err = %v, %d attempts; want attempts exhausted after 2", err, srv.Count(grpctest.UnaryCall)-6)
	}
}

// grpc-go's TestRetryTransparentWhenCommitted: with one stream allowed per
// connection, a stream's retry waits to be opened behind another stream
// when its caller cancels. The call ends CANCELLED however the race falls
// (whether or not the retry attempt has been opened yet), and the stream's
// methods do not panic afterwards.
func TestStreamCancelledWhileRetryOpens(t *testing.T) {
	var first atomic.Bool
	srv := grpctest.Start(t, grpctest.Handlers{Bidi: func(_ int, st grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
		if first.CompareAndSwap(false, true) {
			return status.Error(codes.AlreadyExists, "first attempt fails and is retriable")
		}
		<-st.Context().Done()
		return st.Context().Err()
	}}, grpc.MaxConcurrentStreams(1))
	cfg := parseConfig(t, fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"waitForReady":true,"retryPolicy":{
		"maxAttempts":2,"initialBackoff":"0.1s","maxBackoff":"0.1s","backoffMultiplier":1,
		"retryableStatusCodes":["ALREADY_EXISTS"]}}]}`, grpctest.Service))
	clk := clocktest.New()
	c, err := grpcretry.New(cfg, grpcretry.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	tc := testpb.NewTestServiceClient(srv.Dial(t, c.DialOptions()...))
	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	stream1, err := tc.FullDuplexCall(ctx1)
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() {
		_, err := stream1.Recv()
		closed <- err
	}()
	if !clk.WaitPending(1) { // attempt 1 failed; the retry waits its backoff
		t.Fatal("no backoff")
	}
	// A second stream takes the connection's one stream.
	if _, err := tc.FullDuplexCall(ctx2); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return srv.Count(grpctest.FullDuplexCall) == 2 })
	clk.Advance(100 * time.Millisecond) // the retry is opened, and waits for the stream
	if !clk.WaitPending(0) {
		t.Fatal("the backoff did not end")
	}
	cancel1()
	err = <-closed
	if status.Code(err) != codes.Canceled || !errors.Is(err, context.Canceled) {
		t.Fatalf("stream 1 ended with %v, want CANCELLED", err)
	}
	_ = stream1.CloseSend()
	if _, err := stream1.Recv(); status.Code(err) != codes.Canceled {
		t.Fatalf("Recv after the end: %v, want CANCELLED again", err)
	}
	if err := stream1.Send(&testpb.StreamingOutputCallRequest{}); err != io.EOF {
		t.Fatalf("Send after the end: %v, want io.EOF", err)
	}
	if got := srv.Count(grpctest.FullDuplexCall); got != 2 {
		t.Fatalf("server saw %d streams, want 2: the retry never got the connection", got)
	}
}
