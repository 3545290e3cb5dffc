package bench

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
)

// TestUnaryLibraries runs a few calls of every BenchmarkUnary case through
// every library that can do it, and checks that the libraries are
// configured alike: the same attempts per call, and against a server that
// always fails, maxAttempts attempts ending in UNAVAILABLE.
func TestUnaryLibraries(t *testing.T) {
	srv := startFlakyServer(t)
	ctx := context.Background()
	req := &testpb.SimpleRequest{}
	const calls = 10
	for _, c := range unaryCases {
		for _, lib := range grpcLibs {
			t.Run(c.name+"/"+lib.name, func(t *testing.T) {
				tc, ok := unaryClient(t, srv, lib, c)
				if !ok {
					t.Skip("N/A")
				}
				srv.reset(c.failEvery, false)
				if !c.budget {
					for range calls {
						srv.nextCall(req)
						if _, err := tc.UnaryCall(ctx, req); err != nil {
							t.Fatal(err)
						}
					}
					if got, want := srv.attempts.Load(), c.attempts(calls); got != want {
						t.Fatalf("%d attempts for %d calls, want %d", got, calls, want)
					}
					return
				}
				var (
					wg     sync.WaitGroup
					failed atomic.Int64
				)
				for range 8 {
					wg.Go(func() {
						req := &testpb.SimpleRequest{}
						for range calls {
							srv.nextCall(req)
							if _, err := tc.UnaryCall(ctx, req); err != nil {
								failed.Add(1)
								t.Log(err)
							}
						}
					})
				}
				wg.Wait()
				if n := failed.Load(); n > 0 {
					t.Fatalf("%d of %d calls failed", n, 8*calls)
				}
				if got, want := srv.attempts.Load(), c.attempts(8*calls); got != want {
					t.Fatalf("%d attempts for %d calls, want %d", got, 8*calls, want)
				}
			})
		}
	}
	for _, lib := range grpcLibs {
		t.Run("exhausted/"+lib.name, func(t *testing.T) {
			tc, _ := unaryClient(t, srv, lib, unaryCases[0])
			srv.reset(0, true)
			_, err := tc.UnaryCall(ctx, req)
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("got %v, want UNAVAILABLE", err)
			}
			want := int64(maxAttempts)
			if lib.name == "bare" || lib.name == "bare-stats" {
				want = 1
			}
			if got := srv.attempts.Load(); got != want {
				t.Fatalf("%d attempts, want %d", got, want)
			}
		})
	}
}

// TestUnaryInterceptors makes a few calls of each BenchmarkUnaryInterceptor
// case through every interceptor, and checks their attempts.
func TestUnaryInterceptors(t *testing.T) {
	const calls = 10
	for _, c := range unaryCases {
		if c.budget {
			continue
		}
		for _, lib := range interceptorLibs {
			t.Run(c.name+"/"+lib.name, func(t *testing.T) {
				var n int64
				call, ok := stubCall(t, lib, c, &n)
				if !ok {
					t.Skip("N/A")
				}
				for range calls {
					if err := call(); err != nil {
						t.Fatal(err)
					}
				}
				if want := c.attempts(calls); n != want {
					t.Fatalf("%d attempts for %d calls, want %d", n, calls, want)
				}
			})
		}
	}
}

// TestDoLibraries runs every BenchmarkDo case once through every library,
// and a function that always fails, which each must try maxAttempts times
// and report errFlaky.
func TestDoLibraries(t *testing.T) {
	for _, lib := range doLibs {
		for _, c := range append(doCases, doCase{name: "exhausted", failEvery: 1, perCall: maxAttempts}) {
			t.Run(c.name+"/"+lib.name, func(t *testing.T) {
				var n int
				err := lib.retrier(t, flaky(&n, c.failEvery))()
				if c.name == "exhausted" {
					if !isFlaky(err) {
						t.Errorf("got %v, want errFlaky", err)
					}
				} else if err != nil {
					t.Error(err)
				}
				if n != c.perCall {
					t.Errorf("%d attempts, want %d", n, c.perCall)
				}
			})
		}
	}
}
