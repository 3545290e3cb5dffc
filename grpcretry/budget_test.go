package grpcretry_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/internal/grpctest"
)

// TestRatioBudgetUnderLoad: 200 calls from 20 goroutines to a server that
// always fails; each call may make 5 attempts, but a ratio budget of 0.25
// holds the retries the server sees to a quarter of the calls.
func TestRatioBudgetUnderLoad(t *testing.T) {
	srv := grpctest.Start(t, failFirst(1<<30, codes.Unavailable))
	// A stopped clock: no call leaves the window during the test.
	ratio, err := rebound.NewRatioBudget(rebound.RatioBudgetConfig{Ratio: 0.25, TTL: 10 * time.Second, Clock: clocktest.New()})
	if err != nil {
		t.Fatal(err)
	}
	tc, _ := client(t, srv, retryConfig(t, 5, `"UNAVAILABLE"`, ""), grpcretry.WithBudget(ratio))
	const goroutines, perG = 20, 10
	var wg sync.WaitGroup
	var mu sync.Mutex
	reasons := map[error]int{}
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perG {
				_, err := tc.UnaryCall(context.Background(), grpctest.Request("x"))
				for _, r := range []error{rebound.ErrThrottled, rebound.ErrAttemptsExhausted} {
					if errors.Is(err, r) {
						mu.Lock()
						reasons[r]++
						mu.Unlock()
					}
				}
			}
		}()
	}
	wg.Wait()
	const calls = goroutines * perG
	retries := srv.Count(grpctest.UnaryCall) - calls
	if retries > calls/4 || retries < calls/8 {
		t.Fatalf("server saw %d retries for %d calls, want at most a quarter (and not far below)", retries, calls)
	}
	if c, r := ratio.Counts(); c != calls || r != int64(retries) {
		t.Fatalf("budget counted %d calls %d retries, want %d %d", c, r, calls, retries)
	}
	if reasons[rebound.ErrThrottled]+reasons[rebound.ErrAttemptsExhausted] != calls || reasons[rebound.ErrThrottled] == 0 {
		t.Fatalf("reasons %v: every call fails, most throttled", reasons)
	}
}

// TestConcurrencyBudgetUnderLoad: 20 calls fail their first attempt at
// once; a concurrency budget lets 2 retries be in flight (its floor, as
// 10% of 20 calls is 2 too), and refuses the others while those run.
func TestConcurrencyBudgetUnderLoad(t *testing.T) {
	const calls = 20
	events := make(chan string, 2*calls)
	release := make(chan struct{})
	srv := grpctest.Start(t, grpctest.Handlers{Unary: func(ctx context.Context, _ int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if len(md.Get("grpc-previous-rpc-attempts")) == 0 {
			return nil, status.Error(codes.Unavailable, "first attempt fails")
		}
		events <- "retry"
		<-release
		return &testpb.SimpleResponse{}, nil
	}})
	conc, _ := rebound.NewConcurrencyBudget(rebound.ConcurrencyBudgetConfig{Percent: 10, MinConcurrency: 2})
	tc, _ := client(t, srv, retryConfig(t, 2, `"UNAVAILABLE"`, ""), grpcretry.WithBudget(conc))
	errs := make(chan error, calls)
	for range calls {
		go func() {
			_, err := tc.UnaryCall(context.Background(), grpctest.Request("x"))
			if err != nil {
				events <- "throttled"
			}
			errs <- err
		}()
	}
	got := map[string]int{}
	for range calls {
		got[<-events]++
	}
	if got["retry"] != 2 || got["throttled"] != calls-2 {
		t.Fatalf("with every call failed or retrying: %v, want 2 retries in flight and %d calls throttled", got, calls-2)
	}
	if c, r := conc.InFlight(); c != 2 || r != 2 {
		t.Fatalf("budget: %d calls %d retries in flight, want 2 2", c, r)
	}
	close(release)
	ok := 0
	for range calls {
		err := <-errs
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, rebound.ErrThrottled):
			t.Errorf("call ended with %v, want success or ErrThrottled", err)
		}
	}
	if ok != 2 {
		t.Fatalf("%d calls succeeded, want the 2 whose retry was admitted", ok)
	}
	if c, r := conc.InFlight(); c != 0 || r != 0 {
		t.Fatalf("budget: %d calls %d retries in flight after the calls, want 0 0", c, r)
	}
}
