package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go/budget"
	"github.com/failsafe-go/failsafe-go/failsafegrpc"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/retry"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/serviceconfig"
)

// maxAttempts is every library's limit, the first attempt included.
const maxAttempts = 4

// unaryParallelism is b.SetParallelism's factor in the budget case:
// GOMAXPROCS×4 calls in flight contend for each library's budget.
const unaryParallelism = 4

// retryServiceConfig is the service config that grpc-go's own retry and
// rebound both read: maxAttempts, UNAVAILABLE only, and the smallest
// backoff either accepts (1ns; rebound's full jitter truncates it to 0, so
// it does not wait; grpc-go's ±20% jitter gives 0 or 1ns and it always
// arms a timer). throttled adds A6 retryThrottling sized so that it never
// refuses at the budget case's failures (10 calls: -1 + 10×0.2 tokens):
// every library then makes the same attempts and the budget's bookkeeping
// runs on every call.
func retryServiceConfig(throttled bool) string {
	sc := fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"retryPolicy":{
		"maxAttempts":%d,"initialBackoff":"0.000000001s","maxBackoff":"0.000000001s",
		"backoffMultiplier":1,"retryableStatusCodes":["UNAVAILABLE"]}}]`, testService, maxAttempts)
	if throttled {
		sc += `,"retryThrottling":{"maxTokens":100,"tokenRatio":0.2}`
	}
	return sc + "}"
}

// hedgeServiceConfig is rebound's hedgingPolicy for the same methods:
// maxAttempts, UNAVAILABLE non-fatal (the next hedge goes at once), and a
// hedgingDelay of 1s that no call here reaches, so that a call that
// succeeds at once never hedges: what a hedged call costs when its hedge
// does not fire.
func hedgeServiceConfig() string {
	return fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"hedgingPolicy":{
		"maxAttempts":%d,"hedgingDelay":"1s","nonFatalStatusCodes":["UNAVAILABLE"]}}]}`, testService, maxAttempts)
}

// A unaryCase is one row of BenchmarkUnary.
type unaryCase struct {
	name string
	// failEvery k > 0 makes the first attempt of every k-th call fail
	// with UNAVAILABLE (see flakyServer).
	failEvery int32
	// budget turns on each library's retry budget, and makes the calls
	// from b.RunParallel.
	budget bool
}

var unaryCases = []unaryCase{
	{name: "success"},
	// Every call is UNAVAILABLE, then OK.
	{name: "retry-once", failEvery: 1},
	{name: "budget-parallel", failEvery: 10, budget: true},
}

// attempts is the exact number of attempts that calls calls make.
func (c unaryCase) attempts(calls int) int64 {
	if c.failEvery == 0 {
		return int64(calls)
	}
	return int64(calls + calls/int(c.failEvery))
}

// A grpcLib is one contender of BenchmarkUnary: options returns its dial
// options for a case, or false when it cannot do the case.
type grpcLib struct {
	name    string
	options func(tb testing.TB, c unaryCase) ([]grpc.DialOption, bool)
}

// grpcLibs lists rebound first so that benchstat compares the others with
// it.
var grpcLibs = []grpcLib{
	{"rebound", func(tb testing.TB, c unaryCase) ([]grpc.DialOption, bool) {
		return reboundClient(tb, c).DialOptions(), true
	}},
	// rebound under a hedgingPolicy (no peer hedges unary gRPC calls;
	// grpc-go parses hedgingPolicy but does not act on it).
	{"rebound-hedge", func(tb testing.TB, c unaryCase) ([]grpc.DialOption, bool) {
		return reboundHedgeClient(tb).DialOptions(), !c.budget
	}},
	// bare grpc-go does not retry: it can only do the success case.
	{"bare", func(_ testing.TB, c unaryCase) ([]grpc.DialOption, bool) {
		return []grpc.DialOption{grpc.WithDisableRetry()}, c.failEvery == 0
	}},
	// bare grpc-go with a stats handler that does nothing: the floor of
	// any library that watches a call's events (a hedged call's response
	// headers, say), since grpc-go builds every event of every call on a
	// conn that has a stats handler.
	{"bare-stats", func(_ testing.TB, c unaryCase) ([]grpc.DialOption, bool) {
		return []grpc.DialOption{grpc.WithDisableRetry(), grpc.WithStatsHandler(noopStats{})}, c.failEvery == 0
	}},
	// grpc-go's own A6 retry, throttled per ClientConn.
	{"grpc-retry", func(_ testing.TB, c unaryCase) ([]grpc.DialOption, bool) {
		return []grpc.DialOption{grpc.WithDefaultServiceConfig(retryServiceConfig(c.budget))}, true
	}},
	// go-grpc-middleware v2 has no retry budget.
	{"middleware", func(_ testing.TB, c unaryCase) ([]grpc.DialOption, bool) {
		return []grpc.DialOption{grpc.WithDisableRetry(), grpc.WithChainUnaryInterceptor(middlewareInterceptor())}, !c.budget
	}},
	{"failsafe", func(_ testing.TB, c unaryCase) ([]grpc.DialOption, bool) {
		return []grpc.DialOption{grpc.WithDisableRetry(), grpc.WithChainUnaryInterceptor(failsafeInterceptor(c.budget))}, true
	}},
}

// noopStats is a stats handler that does nothing.
type noopStats struct{}

func (noopStats) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (noopStats) HandleRPC(context.Context, stats.RPCStats)                         {}
func (noopStats) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (noopStats) HandleConn(context.Context, stats.ConnStats)                       {}

// reboundClient reads retryServiceConfig into a grpcretry.Client.
func reboundClient(tb testing.TB, c unaryCase) *grpcretry.Client {
	cfg, err := serviceconfig.Parse([]byte(retryServiceConfig(c.budget)))
	if err != nil {
		tb.Fatal(err)
	}
	cl, err := grpcretry.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return cl
}

// reboundHedgeClient reads hedgeServiceConfig into a grpcretry.Client.
func reboundHedgeClient(tb testing.TB) *grpcretry.Client {
	cfg, err := serviceconfig.Parse([]byte(hedgeServiceConfig()))
	if err != nil {
		tb.Fatal(err)
	}
	cl, err := grpcretry.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return cl
}

// middlewareInterceptor is go-grpc-middleware v2's retry, whose WithMax
// counts every attempt, the first included.
func middlewareInterceptor() grpc.UnaryClientInterceptor {
	noWait := func(context.Context, uint) time.Duration { return 0 }
	return retry.UnaryClientInterceptor(retry.WithMax(maxAttempts), retry.WithCodes(codes.Unavailable), retry.WithBackoff(noWait))
}

// failsafeInterceptor is failsafe-go's retry policy (no delay by default)
// through failsafegrpc. Its budget limits the share of in-flight
// executions that are retries, here at most all of them, so that it never
// refuses.
func failsafeInterceptor(withBudget bool) grpc.UnaryClientInterceptor {
	rp := retrypolicy.NewBuilder[any]().
		HandleIf(func(_ any, err error) bool { return status.Code(err) == codes.Unavailable }).
		WithMaxAttempts(maxAttempts).
		ReturnLastFailure()
	if withBudget {
		rp = rp.WithBudget(budget.NewBuilder().WithMaxRate(1).Build())
	}
	return failsafegrpc.NewUnaryClientInterceptor[any](rp.Build())
}

// unaryClient dials srv with lib's options for c and makes one successful
// call, so that the connection is up; false when lib cannot do c.
func unaryClient(tb testing.TB, srv *flakyServer, lib grpcLib, c unaryCase) (testpb.TestServiceClient, bool) {
	tb.Helper()
	opts, ok := lib.options(tb, c)
	if !ok {
		return nil, false
	}
	tc := srv.dial(tb, opts...)
	srv.reset(0, false)
	if _, err := tc.UnaryCall(context.Background(), &testpb.SimpleRequest{}); err != nil {
		tb.Fatal(err)
	}
	return tc, true
}

// BenchmarkUnary compares unary calls through each library against one
// grpc-go server on 127.0.0.1: success on the first attempt, one retry
// (UNAVAILABLE then OK, no backoff), and calls from b.RunParallel through
// each library's retry budget while the server fails the first attempt
// of 10% of the calls.
// Besides time and allocations it reports the attempts per call, which are
// exactly the same for every library.
func BenchmarkUnary(b *testing.B) {
	srv := startFlakyServer(b)
	for _, c := range unaryCases {
		for _, lib := range grpcLibs {
			b.Run("case="+c.name+"/lib="+lib.name, func(b *testing.B) {
				tc, ok := unaryClient(b, srv, lib, c)
				if !ok {
					b.Skip("N/A")
				}
				if c.budget {
					benchUnaryParallel(b, srv, tc, c)
				} else {
					benchUnarySequential(b, srv, tc, c)
				}
			})
		}
	}
}

func benchUnarySequential(b *testing.B, srv *flakyServer, tc testpb.TestServiceClient, c unaryCase) {
	ctx := context.Background()
	req := &testpb.SimpleRequest{}
	srv.reset(c.failEvery, false)
	b.ReportAllocs()
	for b.Loop() {
		srv.nextCall(req)
		if _, err := tc.UnaryCall(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportUnary(b, srv, c)
}

func benchUnaryParallel(b *testing.B, srv *flakyServer, tc testpb.TestServiceClient, c unaryCase) {
	ctx := context.Background()
	var failed atomic.Int64
	srv.reset(c.failEvery, false)
	b.SetParallelism(unaryParallelism)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req := &testpb.SimpleRequest{}
		for pb.Next() {
			srv.nextCall(req)
			if _, err := tc.UnaryCall(ctx, req); err != nil {
				failed.Add(1)
			}
		}
	})
	b.StopTimer()
	// Every budget is sized not to refuse, so a failed call means the
	// libraries did not do the same work.
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d calls failed", n, b.N)
	}
	reportUnary(b, srv, c)
}

// reportUnary reports the attempts per call, after checking that they are
// exactly those of c: the same for every library.
func reportUnary(b *testing.B, srv *flakyServer, c unaryCase) {
	got := srv.attempts.Load()
	if want := c.attempts(b.N); got != want {
		b.Fatalf("%d attempts for %d calls, want %d", got, b.N, want)
	}
	b.ReportMetric(float64(got)/float64(b.N), "attempts/call")
}
