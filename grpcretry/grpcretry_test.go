package grpcretry_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
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
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/internal/grpctest"
	"github.com/rebound-go/rebound/internal/paralleltest"
	"github.com/rebound-go/rebound/internal/testmain"
	"github.com/rebound-go/rebound/serviceconfig"
)

func TestMain(m *testing.M) {
	// The tests that run in parallel wait out timeouts, quota windows and
	// rate limits on the real clock: they wait, they hardly compute.
	paralleltest.Set()
	testmain.Run(m)
}

// retryConfig is a service config with a retry policy on the test service.
func retryConfig(t testing.TB, maxAttempts int, codes string, extra string) *serviceconfig.Config {
	t.Helper()
	return backoffConfig(t, maxAttempts, "0.1s", codes, extra)
}

// backoffConfig is retryConfig with an initial backoff of its own (and a
// maxBackoff ten times that). A test of a backoff that would pass the
// call's deadline uses minutes of both, so that the deadline is far
// longer than any attempt takes on a busy machine.
func backoffConfig(t testing.TB, maxAttempts int, backoff, codes string, extra string) *serviceconfig.Config {
	t.Helper()
	d, err := time.ParseDuration(backoff)
	if err != nil {
		t.Fatal(err)
	}
	js := fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"retryPolicy":{
		"maxAttempts":%d,"initialBackoff":%q,"maxBackoff":"%gs","backoffMultiplier":2,
		"retryableStatusCodes":[%s]}}]%s}`, grpctest.Service, maxAttempts, backoff, 10*d.Seconds(), codes, extra)
	cfg, err := serviceconfig.Parse([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// failFirst fails the first n attempts with code, then answers OK.
func failFirst(n int, code codes.Code) grpctest.Handlers {
	return grpctest.Handlers{Unary: func(ctx context.Context, i int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		if i <= n {
			return nil, status.Errorf(code, "attempt %d fails", i)
		}
		return &testpb.SimpleResponse{}, nil
	}}
}

// client dials srv through rebound with a fake clock that records sleeps.
func client(t testing.TB, srv *grpctest.Server, cfg *serviceconfig.Config, opts ...grpcretry.Option) (testpb.TestServiceClient, *clocktest.Clock) {
	t.Helper()
	tc, _, clk := statsClient(t, srv, cfg, opts...)
	return tc, clk
}

// defaultNameClient is client with the default server name, srv's
// address, that every client of srv with cfg shares a throttle under.
func defaultNameClient(t testing.TB, srv *grpctest.Server, cfg *serviceconfig.Config) testpb.TestServiceClient {
	t.Helper()
	c, err := grpcretry.New(cfg, grpcretry.WithClock(clocktest.NewAuto()), grpcretry.WithRandom(clocktest.NewRand(0.5)))
	if err != nil {
		t.Fatal(err)
	}
	return testpb.NewTestServiceClient(srv.Dial(t, c.DialOptions()...))
}

// clientSeq numbers the clients statsClient makes.
var clientSeq atomic.Int64

// statsClient is client with the grpcretry.Client too, for its Stats.
// Its throttle is its own: the server name it is kept under is unique
// (opts may set another). By default it would be srv's address, and the
// throttles are process-wide by server name and held until the garbage
// collector runs: a test whose server got the port of an earlier test's
// found that test's tokens spent, and gave up "throttled" on its first
// failure.
func statsClient(t testing.TB, srv *grpctest.Server, cfg *serviceconfig.Config, opts ...grpcretry.Option) (testpb.TestServiceClient, *grpcretry.Client, *clocktest.Clock) {
	t.Helper()
	clk := clocktest.NewAuto()
	name := grpcretry.WithServerName(fmt.Sprint(t.Name(), "-", clientSeq.Add(1)))
	c, err := grpcretry.New(cfg, append([]grpcretry.Option{name, grpcretry.WithClock(clk), grpcretry.WithRandom(clocktest.NewRand(0.5))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return testpb.NewTestServiceClient(srv.Dial(t, c.DialOptions()...)), c, clk
}

func previous(attempts []grpctest.Attempt) []int {
	var p []int
	for _, a := range attempts {
		p = append(p, a.Previous)
	}
	return p
}

func TestRetryUntilSuccess(t *testing.T) {
	srv := grpctest.Start(t, failFirst(2, codes.Unavailable))
	tc, clk := client(t, srv, retryConfig(t, 4, `"UNAVAILABLE"`, ""))
	var n int
	if _, err := tc.UnaryCall(context.Background(), grpctest.Request("x"), grpcretry.CountAttempts(&n)); err != nil {
		t.Fatal(err)
	}
	if got := previous(srv.Attempts(grpctest.UnaryCall)); !slices.Equal(got, []int{-1, 1, 2}) {
		t.Fatalf("server saw grpc-previous-rpc-attempts %v, want [absent 1 2]", got)
	}
	if n != 3 {
		t.Fatalf("Attempts reported %d, want 3", n)
	}
	// random(0, 0.1s) then random(0, 0.2s), at 0.5.
	if got := clk.Sleeps(); !slices.Equal(got, []time.Duration{50 * time.Millisecond, 100 * time.Millisecond}) {
		t.Fatalf("backoff %v, want [50ms 100ms]", got)
	}
}

func TestStatusCodesCaseInsensitiveAndNumeric(t *testing.T) {
	for _, codesJSON := range []string{`"unavailable"`, `"Unavailable"`, `14`} {
		srv := grpctest.Start(t, failFirst(1, codes.Unavailable))
		tc, _ := client(t, srv, retryConfig(t, 2, codesJSON, ""))
		if _, err := tc.UnaryCall(context.Background(), grpctest.Request("x")); err != nil {
			t.Fatalf("codes %s: %v", codesJSON, err)
		}
		if srv.Count(grpctest.UnaryCall) != 2 {
			t.Fatalf("codes %s: %d attempts, want 2", codesJSON, srv.Count(grpctest.UnaryCall))
		}
	}
}

func TestNotRetryableCode(t *testing.T) {
	srv := grpctest.Start(t, failFirst(5, codes.InvalidArgument))
	tc, clk := client(t, srv, retryConfig(t, 4, `"UNAVAILABLE"`, ""))
	_, err := tc.UnaryCall(context.Background(), grpctest.Request("x"))
	if status.Code(err) != codes.InvalidArgument || srv.Count(grpctest.UnaryCall) != 1 {
		t.Fatalf("err %v after %d attempts, want InvalidArgument after 1", err, srv.Count(grpctest.UnaryCall))
	}
	var ge *rebound.Error
	if !errors.As(err, &ge) || ge.Attempts != 1 || !errors.Is(err, rebound.ErrNotRetryable) {
		t.Fatalf("err %v: want *rebound.Error with 1 attempt, not retryable", err)
	}
	if len(clk.Sleeps()) != 0 {
		t.Fatal("slept before giving up")
	}
}

func TestAttemptsExhaustedError(t *testing.T) {
	srv := grpctest.Start(t, failFirst(10, codes.Unavailable))
	tc, _ := client(t, srv, retryConfig(t, 3, `"UNAVAILABLE"`, ""))
	_, err := tc.UnaryCall(context.Background(), grpctest.Request("x"))
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable || st.Message() != "attempt 3 fails" {
		t.Fatalf("status %v, want the last attempt's status unchanged", st)
	}
	var ge *rebound.Error
	if !errors.As(err, &ge) || ge.Attempts != 3 || !errors.Is(err, rebound.ErrAttemptsExhausted) {
		t.Fatalf("err %v: want 3 attempts, attempts exhausted", err)
	}
	want := "grpcretry: gave up after 3 attempts (attempts exhausted): rpc error: code = Unavailable desc = attempt 3 fails"
	if err.Error() != want {
		t.Fatalf("Error() = %q, want %q", err.Error(), want)
	}
}

func TestMaxAttemptsClamped(t *testing.T) {
	for _, tc := range []struct {
		config int
		opts   []grpcretry.Option
		want   int
	}{
		{10, nil, 5},
		{10, []grpcretry.Option{grpcretry.WithMaxAttemptsCap(3)}, 3},
		{4, []grpcretry.Option{grpcretry.WithMaxAttemptsCap(7)}, 4},
		{10, []grpcretry.Option{grpcretry.WithMaxAttemptsCap(7)}, 7},
	} {
		srv := grpctest.Start(t, failFirst(100, codes.Unavailable))
		c, _ := client(t, srv, retryConfig(t, tc.config, `"UNAVAILABLE"`, ""), tc.opts...)
		_, _ = c.UnaryCall(context.Background(), grpctest.Request("x"))
		if got := srv.Count(grpctest.UnaryCall); got != tc.want {
			t.Errorf("maxAttempts %d with %d options: %d attempts, want %d", tc.config, len(tc.opts), got, tc.want)
		}
	}
}

// pushbackHandler fails every attempt with UNAVAILABLE and the given
// pushback values, one list per attempt (nil: no header).
func pushbackHandler(values ...[]string) grpctest.Handlers {
	return grpctest.Handlers{Unary: func(ctx context.Context, i int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		if i <= len(values) && values[i-1] != nil {
			md := metadata.MD{}
			for _, v := range values[i-1] {
				md.Append("grpc-retry-pushback-ms", v)
			}
			if err := grpc.SetTrailer(ctx, md); err != nil {
				return nil, err
			}
		}
		return nil, status.Error(codes.Unavailable, "busy")
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
			srv := grpctest.Start(t, pushbackHandler(tc.values...))
			c, clk := client(t, srv, retryConfig(t, 4, `"UNAVAILABLE"`, ""))
			_, err := c.UnaryCall(context.Background(), grpctest.Request("x"))
			if !errors.Is(err, tc.reason) || srv.Count(grpctest.UnaryCall) != tc.attempts {
				t.Fatalf("err %v after %d attempts, want %v after %d", err, srv.Count(grpctest.UnaryCall), tc.reason, tc.attempts)
			}
			// A zero delay makes no timer; drop zeros from the expectation.
			want := slices.DeleteFunc(slices.Clone(tc.sleeps), func(d time.Duration) bool { return d == 0 })
			if got := clk.Sleeps(); !slices.Equal(got, want) {
				t.Fatalf("sleeps %v, want %v", got, want)
			}
		})
	}
}

func TestThrottlingAcrossCallsAndClientConns(t *testing.T) {
	srv := grpctest.Start(t, failFirst(1000, codes.Unavailable))
	cfg := retryConfig(t, 5, `"UNAVAILABLE"`, `,"retryThrottling":{"maxTokens":6,"tokenRatio":0.5}`)
	// Both keep their throttle under the default server name, srv's
	// address.
	a, b := defaultNameClient(t, srv, cfg), defaultNameClient(t, srv, cfg) // a second ClientConn to the same server name
	ctx := context.Background()
	// Tokens 6, threshold 3. Call 1 on a: 6→5 retry, 5→4 retry, 4→3 stop.
	_, err := a.UnaryCall(ctx, grpctest.Request("x"))
	if !errors.Is(err, rebound.ErrThrottled) || srv.Count(grpctest.UnaryCall) != 3 {
		t.Fatalf("call 1: %v after %d attempts, want throttled after 3", err, srv.Count(grpctest.UnaryCall))
	}
	// Call 2 on b shares the throttle: 3→2, no retry.
	_, err = b.UnaryCall(ctx, grpctest.Request("x"))
	if !errors.Is(err, rebound.ErrThrottled) || srv.Count(grpctest.UnaryCall) != 4 {
		t.Fatalf("call 2: %v, total attempts %d, want throttled, 4", err, srv.Count(grpctest.UnaryCall))
	}
	// Successes add 0.5 each: 2 → 3.5 after three, above the threshold.
	srv.SetHandlers(grpctest.Handlers{})
	for range 3 {
		if _, err := b.UnaryCall(ctx, grpctest.Request("ok")); err != nil {
			t.Fatal(err)
		}
	}
	srv.SetHandlers(pushbackHandler()) // always UNAVAILABLE
	before := srv.Count(grpctest.UnaryCall)
	// 3.5→2.5 and refused: the failure is counted before the throttle is
	// asked, so the call makes exactly one attempt.
	_, err = a.UnaryCall(ctx, grpctest.Request("x"))
	if got := srv.Count(grpctest.UnaryCall) - before; got != 1 || !errors.Is(err, rebound.ErrThrottled) {
		t.Fatalf("call after recovery: %d attempts, %v", got, err)
	}
}

func TestThrottleRecoversToRetry(t *testing.T) {
	srv := grpctest.Start(t, failFirst(1000, codes.Unavailable))
	cfg := retryConfig(t, 3, `"UNAVAILABLE"`, `,"retryThrottling":{"maxTokens":4,"tokenRatio":1}`)
	c, _ := client(t, srv, cfg)
	ctx := context.Background()
	_, _ = c.UnaryCall(ctx, grpctest.Request("x")) // 4→3 retry, 3→2 stop: 2 attempts
	if srv.Count(grpctest.UnaryCall) != 2 {
		t.Fatalf("%d attempts, want 2", srv.Count(grpctest.UnaryCall))
	}
	srv.SetHandlers(grpctest.Handlers{})
	for range 2 { // 2→4
		_, _ = c.UnaryCall(ctx, grpctest.Request("ok"))
	}
	srv.SetHandlers(failFirst(1000, codes.Unavailable)) // counts restart at 1
	before := srv.Count(grpctest.UnaryCall)
	_, _ = c.UnaryCall(ctx, grpctest.Request("x")) // 4→3 retry, 3→2 stop
	if got := srv.Count(grpctest.UnaryCall) - before; got != 2 {
		t.Fatalf("after recovery %d attempts, want 2", got)
	}
}

func TestNonRetryableFailuresDoNotThrottle(t *testing.T) {
	srv := grpctest.Start(t, failFirst(1000, codes.InvalidArgument))
	cfg := retryConfig(t, 3, `"UNAVAILABLE"`, `,"retryThrottling":{"maxTokens":4,"tokenRatio":1}`)
	c, _ := client(t, srv, cfg)
	for range 5 {
		_, _ = c.UnaryCall(context.Background(), grpctest.Request("x"))
	}
	srv.SetHandlers(failFirst(srv.Count(grpctest.UnaryCall)+1, codes.Unavailable))
	before := srv.Count(grpctest.UnaryCall)
	if _, err := c.UnaryCall(context.Background(), grpctest.Request("x")); err != nil {
		t.Fatalf("retry refused after non-retryable failures: %v", err)
	}
	if got := srv.Count(grpctest.UnaryCall) - before; got != 2 {
		t.Fatalf("%d attempts, want 2", got)
	}
}

func TestDeadlineCoversAllAttempts(t *testing.T) {
	srv := grpctest.Start(t, failFirst(1000, codes.Unavailable))
	cfg := backoffConfig(t, 5, "600s", `"UNAVAILABLE"`, "")
	// The backoff would be 9 minutes; the deadline is 1 minute away on
	// the clock (which stands still), so no wait may start: the call gives
	// up at once rather than sleep past its deadline. The first attempt
	// has that minute to fail.
	clk := clocktest.New()
	c, err := grpcretry.New(cfg, grpcretry.WithClock(clk), grpcretry.WithRandom(clocktest.NewRand(0.9)))
	if err != nil {
		t.Fatal(err)
	}
	tc := testpb.NewTestServiceClient(srv.Dial(t, c.DialOptions()...))
	ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(time.Minute))
	defer cancel()
	_, err = tc.UnaryCall(ctx, grpctest.Request("x"))
	if !errors.Is(err, rebound.ErrDeadline) || status.Code(err) != codes.Unavailable {
		t.Fatalf("err %v, want the last attempt's UNAVAILABLE and ErrDeadline", err)
	}
	if sleeps := clk.Sleeps(); len(sleeps) != 0 {
		t.Fatalf("waited %v past the deadline", sleeps)
	}
	if srv.Count(grpctest.UnaryCall) != 1 {
		t.Fatalf("%d attempts, want 1", srv.Count(grpctest.UnaryCall))
	}
}

// deadlineHandlers answers each unary call with a payload of the
// request's ResponseSize, and sends the time left to the call's deadline
// as the server saw it (-1 for none) on seen.
func deadlineHandlers(seen chan<- time.Duration) grpctest.Handlers {
	return grpctest.Handlers{Unary: func(ctx context.Context, _ int, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		dl, ok := ctx.Deadline()
		if !ok {
			seen <- -1
		} else {
			seen <- time.Until(dl)
		}
		return &testpb.SimpleResponse{Payload: &testpb.Payload{Body: make([]byte, req.GetResponseSize())}}, nil
	}}
}

func TestMethodTimeoutApplied(t *testing.T) {
	seen := make(chan time.Duration, 1)
	srv := grpctest.Start(t, deadlineHandlers(seen))
	js := fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"timeout":"2s","retryPolicy":{
		"maxAttempts":2,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`, grpctest.Service)
	cfg, err := serviceconfig.Parse([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	c, _ := client(t, srv, cfg)
	if _, err := c.UnaryCall(context.Background(), grpctest.Request("x")); err != nil {
		t.Fatal(err)
	}
	if d := <-seen; d <= 0 || d > 2*time.Second {
		t.Fatalf("server deadline in %v, want within the 2s method timeout", d)
	}
	// A caller deadline shorter than the method timeout wins.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := c.UnaryCall(ctx, grpctest.Request("x")); err != nil {
		t.Fatal(err)
	}
	if d := <-seen; d <= 0 || d > 500*time.Millisecond {
		t.Fatalf("server deadline in %v, want within the caller's 500ms", d)
	}
}

// A method config without a retry policy still applies its timeout and
// its message limits, as grpc-go's own service config would: the calls
// that need nothing of rebound go straight to the invoker, and these do
// not.
func TestMethodSettingsWithoutPolicy(t *testing.T) {
	seen := make(chan time.Duration, 1)
	srv := grpctest.Start(t, deadlineHandlers(seen))
	js := fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"timeout":"2s","maxResponseMessageBytes":1024}]}`, grpctest.Service)
	cfg, err := serviceconfig.Parse([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	c, _ := client(t, srv, cfg)
	if _, err := c.UnaryCall(context.Background(), &testpb.SimpleRequest{ResponseSize: 10}); err != nil {
		t.Fatal(err)
	}
	if d := <-seen; d <= 0 || d > 2*time.Second {
		t.Fatalf("server deadline in %v, want within the 2s method timeout", d)
	}
	_, err = c.UnaryCall(context.Background(), &testpb.SimpleRequest{ResponseSize: 4096})
	<-seen
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a 4 KiB response under a 1 KiB limit: %v, want RESOURCE_EXHAUSTED", err)
	}
}

func TestCommittedAfterHeaders(t *testing.T) {
	srv := grpctest.Start(t, grpctest.Handlers{Unary: func(ctx context.Context, _ int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		if err := grpc.SendHeader(ctx, metadata.Pairs("k", "v")); err != nil {
			return nil, err
		}
		return nil, status.Error(codes.Unavailable, "after headers")
	}})
	c, _ := client(t, srv, retryConfig(t, 4, `"UNAVAILABLE"`, ""))
	_, err := c.UnaryCall(context.Background(), grpctest.Request("x"))
	if !errors.Is(err, rebound.ErrCommitted) || srv.Count(grpctest.UnaryCall) != 1 {
		t.Fatalf("err %v after %d attempts, want committed after 1", err, srv.Count(grpctest.UnaryCall))
	}
}

func TestRetriesDisabled(t *testing.T) {
	srv := grpctest.Start(t, failFirst(1, codes.Unavailable))
	c, _ := client(t, srv, retryConfig(t, 4, `"UNAVAILABLE"`, ""), grpcretry.WithRetriesDisabled())
	var n int
	_, err := c.UnaryCall(context.Background(), grpctest.Request("x"), grpcretry.CountAttempts(&n))
	if status.Code(err) != codes.Unavailable || n != 1 || srv.Count(grpctest.UnaryCall) != 1 {
		t.Fatalf("err %v, attempts %d, server %d; want one UNAVAILABLE attempt", err, n, srv.Count(grpctest.UnaryCall))
	}
	var ge *rebound.Error
	if errors.As(err, &ge) {
		t.Fatal("a call without retries should return grpc-go's error as is")
	}
}

func TestMethodWithoutPolicyPassesThrough(t *testing.T) {
	srv := grpctest.Start(t, failFirst(1, codes.Unavailable))
	cfg, _ := serviceconfig.Parse([]byte(`{"methodConfig":[{"name":[{"service":"other.Service"}],"retryPolicy":{
		"maxAttempts":4,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`))
	c, _ := client(t, srv, cfg)
	_, err := c.UnaryCall(context.Background(), grpctest.Request("x"))
	if status.Code(err) != codes.Unavailable || srv.Count(grpctest.UnaryCall) != 1 {
		t.Fatalf("err %v after %d attempts", err, srv.Count(grpctest.UnaryCall))
	}
}

func TestRequestReplayedIdentically(t *testing.T) {
	srv := grpctest.Start(t, failFirst(2, codes.Unavailable))
	c, _ := client(t, srv, retryConfig(t, 4, `"UNAVAILABLE"`, ""))
	if _, err := c.UnaryCall(context.Background(), grpctest.Request("payload-123")); err != nil {
		t.Fatal(err)
	}
	for _, a := range srv.Attempts(grpctest.UnaryCall) {
		if a.Payload != "payload-123" {
			t.Fatalf("attempt %d carried %q", a.N, a.Payload)
		}
	}
}

func TestCallerCancellationNotRetried(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	srv := grpctest.Start(t, grpctest.Handlers{Unary: func(sctx context.Context, _ int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		cancel()
		<-sctx.Done()
		return nil, status.Error(codes.Unavailable, "late")
	}})
	c, _ := client(t, srv, retryConfig(t, 4, `"UNAVAILABLE","CANCELLED"`, ""))
	_, err := c.UnaryCall(ctx, grpctest.Request("x"))
	if status.Code(err) != codes.Canceled || srv.Count(grpctest.UnaryCall) != 1 {
		t.Fatalf("err %v after %d attempts, want Canceled after 1", err, srv.Count(grpctest.UnaryCall))
	}
}

func TestPreviousAttemptsOnServer(t *testing.T) {
	got := make(chan int, 3)
	srv := grpctest.Start(t, grpctest.Handlers{Unary: func(ctx context.Context, i int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		got <- grpcretry.PreviousAttempts(ctx)
		if i < 3 {
			return nil, status.Error(codes.Unavailable, "again")
		}
		return &testpb.SimpleResponse{}, nil
	}})
	c, _ := client(t, srv, retryConfig(t, 3, `"UNAVAILABLE"`, ""))
	if _, err := c.UnaryCall(context.Background(), grpctest.Request("x")); err != nil {
		t.Fatal(err)
	}
	if a, b, c := <-got, <-got, <-got; a != 0 || b != 1 || c != 2 {
		t.Fatalf("PreviousAttempts = %d, %d, %d; want 0, 1, 2", a, b, c)
	}
}

// Each retry's context is the caller's, with grpc-previous-rpc-attempts
// added to the caller's own outgoing metadata, if any: an interceptor
// inside rebound's sees the caller's values and headers on every attempt.
func TestRetryContextKeepsCallersValues(t *testing.T) {
	type key struct{}
	type seen struct {
		value    any
		user     []string
		previous []string
	}
	for _, withMD := range []bool{false, true} {
		srv := grpctest.Start(t, failFirst(2, codes.Unavailable))
		c, err := grpcretry.New(retryConfig(t, 3, `"UNAVAILABLE"`, ""), grpcretry.WithClock(clocktest.NewAuto()))
		if err != nil {
			t.Fatal(err)
		}
		var got []seen
		inner := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			md, _ := metadata.FromOutgoingContext(ctx)
			got = append(got, seen{ctx.Value(key{}), md["x-user"], md["grpc-previous-rpc-attempts"]})
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		tc := testpb.NewTestServiceClient(srv.Dial(t, append(c.DialOptions(), grpc.WithChainUnaryInterceptor(inner))...))
		ctx := context.WithValue(context.Background(), key{}, "v")
		var user []string
		if withMD {
			ctx, user = metadata.AppendToOutgoingContext(ctx, "x-user", "u"), []string{"u"}
		}
		if _, err := tc.UnaryCall(ctx, grpctest.Request("x")); err != nil {
			t.Fatal(err)
		}
		want := []seen{{"v", user, nil}, {"v", user, []string{"1"}}, {"v", user, []string{"2"}}}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("outgoing metadata %v: attempts saw %v, want %v", withMD, got, want)
		}
	}
}

func TestInvalidOptions(t *testing.T) {
	for name, opt := range map[string]grpcretry.Option{
		"max attempts 0":   grpcretry.WithMaxAttemptsCap(0),
		"buffer per > all": grpcretry.WithBufferLimits(10, 20),
		"buffer zero":      grpcretry.WithBufferLimits(0, 0),
		"empty server":     grpcretry.WithServerName(""),
		"nil clock":        grpcretry.WithClock(nil),
		"nil option":       nil,
	} {
		if _, err := grpcretry.New(nil, opt); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
	// The one-liner reports a bad option when the conn is made.
	srv := grpctest.Start(t, grpctest.Handlers{})
	_, err := grpc.NewClient(srv.Addr, append(grpcretry.DialOptions(nil, grpcretry.WithMaxAttemptsCap(-1)),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	// grpc-go frames it as its default service config, the only error of
	// grpc.NewClient a dial option can carry; the rest is rebound's own.
	const want = `policy "grpcretry.DialOptions": invalid option, not a service config: grpcretry: WithMaxAttemptsCap: n must be >= 1, got -1`
	if err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Fatalf("NewClient: %v, want the option's error, ending %s", err, want)
	}
	// Should a later default service config hide it, calls fail.
	cc := srv.Dial(t, append(grpcretry.DialOptions(nil, grpcretry.WithMaxAttemptsCap(-1)), grpc.WithDefaultServiceConfig(`{}`))...)
	_, err = testpb.NewTestServiceClient(cc).UnaryCall(context.Background(), grpctest.Request("x"))
	if status.Code(err) != codes.Internal || status.Convert(err).Message() != "grpcretry: WithMaxAttemptsCap: n must be >= 1, got -1" || srv.Count(grpctest.UnaryCall) != 0 {
		t.Fatalf("err %v, want Internal with the option's error, without reaching the server", err)
	}
}

func TestStreamsPassThrough(t *testing.T) {
	srv := grpctest.Start(t, grpctest.Handlers{ServerStream: func(_ int, _ *testpb.StreamingOutputCallRequest, s grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
		for i := range 3 {
			if err := s.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: []byte{byte(i)}}}); err != nil {
				return err
			}
		}
		return nil
	}})
	c, _ := client(t, srv, retryConfig(t, 4, `"UNAVAILABLE"`, ""))
	st, err := c.StreamingOutputCall(context.Background(), &testpb.StreamingOutputCallRequest{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		_, err := st.Recv()
		if err != nil {
			break
		}
		n++
	}
	if n != 3 {
		t.Fatalf("received %d messages, want 3", n)
	}
}

func TestOnFinishOncePerCall(t *testing.T) {
	srv := grpctest.Start(t, failFirst(2, codes.Unavailable))
	c, _ := client(t, srv, retryConfig(t, 4, `"UNAVAILABLE"`, ""))
	var calls []error
	if _, err := c.UnaryCall(context.Background(), grpctest.Request("x"), grpc.OnFinish(func(err error) { calls = append(calls, err) })); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 1 || calls[0] != nil || srv.Count(grpctest.UnaryCall) != 3 {
		t.Fatalf("OnFinish ran %d times (%v) for a call of %d attempts, want once with nil", len(calls), calls, srv.Count(grpctest.UnaryCall))
	}
}
