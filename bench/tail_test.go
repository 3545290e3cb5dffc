package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/grpctest"
	"github.com/rebound-go/rebound/serviceconfig"
)

// The server's latency is heavy-tailed: most calls take fast, stallRate of
// them stall for slow, 100 times longer, each independently of the others
// ("The Tail at Scale": a few slow servers or queues dominate the tail).
const (
	fast      = 5 * time.Millisecond
	slow      = 500 * time.Millisecond
	stallRate = 0.03
	// hedgingDelay is the fixed delay: twice the fast calls' latency, so
	// that the stalled 3% are hedged with a margin for the fast calls'
	// own spread.
	hedgingDelay = "0.01s"
	// workers is how many calls are in flight at once.
	workers = 16
	// warmUp calls precede the measured ones, so that connections are up
	// and the adaptive delay has its samples.
	warmUp = 2000
)

// tailServer answers after fast or slow, or as soon as the call is
// cancelled (a hedge won), so that cancelled attempts free the server.
func tailServer(b testing.TB) *grpctest.Server {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(1, 2))
	return grpctest.Start(b, grpctest.Handlers{Unary: func(ctx context.Context, _ int, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
		mu.Lock()
		d := fast
		if rng.Float64() < stallRate {
			d = slow
		}
		mu.Unlock()
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return &testpb.SimpleResponse{}, nil
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}})
}

func hedgingConfig(b testing.TB) *serviceconfig.Config {
	cfg, err := serviceconfig.Parse(fmt.Appendf(nil, `{"methodConfig":[{"name":[{"service":%q}],
		"hedgingPolicy":{"maxAttempts":3,"hedgingDelay":%q,"nonFatalStatusCodes":["UNAVAILABLE"]}}]}`, grpctest.Service, hedgingDelay))
	if err != nil {
		b.Fatal(err)
	}
	return cfg
}

// BenchmarkTail reports the latency percentiles of unary calls, and the
// attempts made per call, without hedging, with hedging at a fixed
// hedgingDelay, and with rebound's adaptive hedging delay at 5% extra load.
// Each op is one call; run with -benchtime=20000x or so for a stable
// p99.9.
func BenchmarkTail(b *testing.B) {
	srv := tailServer(b)
	adaptive := grpcretry.DefaultAdaptiveHedging() // 5% extra load: about p95
	for _, bc := range []struct {
		name string
		dial []grpc.DialOption
	}{
		{"none", nil},
		{"fixed", clientOptions(b, hedgingConfig(b))},
		{"adaptive", clientOptions(b, hedgingConfig(b), grpcretry.WithAdaptiveHedging(adaptive))},
	} {
		tc := testpb.NewTestServiceClient(srv.Dial(b, bc.dial...))
		run(b, tc, warmUp)
		b.Run(bc.name, func(b *testing.B) {
			lat, attempts := run(b, tc, b.N)
			slices.Sort(lat)
			ms := func(q float64) float64 {
				return float64(lat[min(int(q*float64(len(lat))), len(lat)-1)]) / float64(time.Millisecond)
			}
			b.ReportMetric(ms(0.5), "p50-ms")
			b.ReportMetric(ms(0.99), "p99-ms")
			b.ReportMetric(ms(0.999), "p99.9-ms")
			b.ReportMetric(float64(attempts)/float64(len(lat)), "attempts/call")
		})
	}
}

func clientOptions(b testing.TB, cfg *serviceconfig.Config, opts ...grpcretry.Option) []grpc.DialOption {
	c, err := grpcretry.New(cfg, opts...)
	if err != nil {
		b.Fatal(err)
	}
	return c.DialOptions()
}

// run makes n calls from workers goroutines and returns their latencies
// and the attempts they made.
func run(b *testing.B, tc testpb.TestServiceClient, n int) ([]time.Duration, int) {
	var (
		mu       sync.Mutex
		lat      = make([]time.Duration, 0, n)
		attempts int
		next     = make(chan struct{}, n)
		wg       sync.WaitGroup
	)
	for range n {
		next <- struct{}{}
	}
	close(next)
	req := grpctest.Request("tail")
	for range workers {
		wg.Go(func() {
			for range next {
				var k int
				start := time.Now()
				_, err := tc.UnaryCall(context.Background(), req, grpcretry.CountAttempts(&k))
				d := time.Since(start)
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				lat = append(lat, d)
				attempts += max(k, 1)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return lat, attempts
}
