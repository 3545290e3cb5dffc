package shed_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/rebound-go/rebound/internal/grpctest"
	"github.com/rebound-go/rebound/shed"
)

// The limit learns a real server's capacity from latency: behind the
// Shedder, a backend that serves 8 requests at a time, each taking a few
// milliseconds; 64 callers in a closed loop. Admitting all 64 would queue
// 56 of them inside the server; the limit falls from 100 toward the
// backend's 8: in the second half of the run, the handler holds a median
// of 3 to 9 requests (figures of a few runs), not 64.
func TestLimitLearnsCapacity(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for about a second of real load")
	}
	c := shed.DefaultConfig()
	c.InitialLimit = 100
	s, _ := shed.New(c)
	backend := make(chan struct{}, 8)
	var (
		mu     sync.Mutex
		inside int
		seen   []int // requests inside the handler, at each entry
	)
	srv := grpctest.Start(t, grpctest.Handlers{Unary: func(ctx context.Context, _ int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		mu.Lock()
		inside++
		seen = append(seen, inside)
		mu.Unlock()
		defer func() { mu.Lock(); inside--; mu.Unlock() }()
		backend <- struct{}{}
		defer func() { <-backend }()
		time.Sleep(2 * time.Millisecond) // the work
		return &testpb.SimpleResponse{}, nil
	}}, grpc.ChainUnaryInterceptor(s.UnaryServerInterceptor()))
	client := testpb.NewTestServiceClient(srv.Dial(t))
	// A quiet start: the Shedder sees the idle latency.
	for range 20 {
		if _, err := client.UnaryCall(context.Background(), grpctest.Request("x")); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range 60 {
				_, _ = client.UnaryCall(context.Background(), grpctest.Request("x"))
			}
		})
	}
	wg.Wait()
	st := s.Stats()
	half := append([]int(nil), seen[len(seen)/2:]...)
	slices.Sort(half)
	t.Logf("limit %d after %d admitted, %d shed; in the handler, second half: median %d, p90 %d, max %d", st.Limit, st.Admitted, st.ShedRetry+st.ShedStop,
		half[len(half)/2], half[len(half)*9/10], half[len(half)-1])
	// Without the Shedder all 64 would be inside. The bound leaves room
	// for a machine so busy that latency says little.
	if m := half[len(half)/2]; m >= 48 || st.ShedRetry+st.ShedStop == 0 {
		t.Errorf("median %d requests in the handler, %d shed: the limit did not follow the backend's capacity", m, st.ShedRetry+st.ShedStop)
	}
}
