package bench

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// unaryCallMethod is the full name of the method BenchmarkUnary calls.
const unaryCallMethod = "/" + testService + "/UnaryCall"

// An interceptorLib is a contender of BenchmarkUnaryInterceptor: the
// interceptor it installs for a case, nil for none (bare), or false when it
// cannot do the case. grpc-go's own retry lives inside its ClientConn, not
// in an interceptor, so it has no row here.
type interceptorLib struct {
	name        string
	interceptor func(tb testing.TB, c unaryCase) (grpc.UnaryClientInterceptor, bool)
}

var interceptorLibs = []interceptorLib{
	{"rebound", func(tb testing.TB, c unaryCase) (grpc.UnaryClientInterceptor, bool) {
		return reboundClient(tb, c).UnaryClientInterceptor(), true
	}},
	{"rebound-hedge", func(tb testing.TB, c unaryCase) (grpc.UnaryClientInterceptor, bool) {
		return reboundHedgeClient(tb).UnaryClientInterceptor(), true
	}},
	{"bare", func(_ testing.TB, c unaryCase) (grpc.UnaryClientInterceptor, bool) {
		return nil, c.failEvery == 0
	}},
	{"middleware", func(_ testing.TB, c unaryCase) (grpc.UnaryClientInterceptor, bool) {
		return middlewareInterceptor(), !c.budget
	}},
	{"failsafe", func(_ testing.TB, c unaryCase) (grpc.UnaryClientInterceptor, bool) {
		return failsafeInterceptor(c.budget), true
	}},
}

// stubCall returns a function that makes one unary call through lib's
// interceptor for c to an invoker that answers at once, without grpc-go:
// OK, or for c.failEvery == 1 UNAVAILABLE on odd-numbered attempts, so
// that each sequential call fails once and then succeeds. It counts the
// attempts in *n. false when lib cannot do c.
func stubCall(tb testing.TB, lib interceptorLib, c unaryCase, n *int64) (func() error, bool) {
	tb.Helper()
	if c.failEvery > 1 || c.budget {
		tb.Fatalf("stubCall: case %s is not sequential", c.name)
	}
	ic, ok := lib.interceptor(tb, c)
	if !ok {
		return nil, false
	}
	// The ClientConn is never connected: only the interceptors see it.
	cc, err := grpc.NewClient("passthrough:///unused", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cc.Close() })
	invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		*n++
		if c.failEvery == 1 && *n%2 == 1 {
			return unavailable
		}
		return nil
	}
	ctx := context.Background()
	req, reply := &testpb.SimpleRequest{}, &testpb.SimpleResponse{}
	if ic == nil {
		return func() error { return invoker(ctx, unaryCallMethod, req, reply, cc) }, true
	}
	return func() error { return ic(ctx, unaryCallMethod, req, reply, cc, invoker) }, true
}

// BenchmarkUnaryInterceptor isolates what each library's interceptor adds
// to a unary call, which BenchmarkUnary's round trip buries in noise: the
// same cases, success and retry-once, with an invoker that answers at
// once. It does not count the work rebound's call options make grpc-go do
// (copying the header and trailer of every attempt); BenchmarkUnary's
// allocations do.
func BenchmarkUnaryInterceptor(b *testing.B) {
	for _, c := range unaryCases {
		if c.budget {
			continue
		}
		for _, lib := range interceptorLibs {
			b.Run("case="+c.name+"/lib="+lib.name, func(b *testing.B) {
				var n int64
				call, ok := stubCall(b, lib, c, &n)
				if !ok {
					b.Skip("N/A")
				}
				b.ReportAllocs()
				for b.Loop() {
					if err := call(); err != nil {
						b.Fatal(err)
					}
				}
				if want := c.attempts(b.N); n != want {
					b.Fatalf("%d attempts for %d calls, want %d", n, b.N, want)
				}
			})
		}
	}
}
