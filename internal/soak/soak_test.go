package soak

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/chaos"
	"github.com/rebound-go/rebound/serviceconfig"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// soakDuration is 30s, 4s with -short, or REBOUND_SOAK (a Go duration).
func soakDuration(t *testing.T) time.Duration {
	if v := os.Getenv("REBOUND_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("REBOUND_SOAK=%q: want a positive duration", v)
		}
		return d
	}
	if testing.Short() {
		return 4 * time.Second
	}
	return 30 * time.Second
}

const (
	retryAttempts = 4
	hedgeAttempts = 3
	// maxAmplification bounds attempts per call during the outage: the
	// throttle (10 tokens, threshold 5) allows a handful of retries and
	// hedges, then none.
	maxAmplification = 1.3
)

func config(t *testing.T, policy string) *serviceconfig.Config {
	t.Helper()
	js := fmt.Sprintf(`{"methodConfig":[{"name":[{"service":"grpc.testing.TestService"}],%s}],
		"retryThrottling":{"maxTokens":10,"tokenRatio":0.5}}`, policy)
	cfg, err := serviceconfig.Parse([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// allowed are the statuses a call may end with: the injected ones, and
// those of an unreachable server or an expired deadline.
var allowed = map[codes.Code]bool{codes.OK: true, codes.Unavailable: true, codes.InvalidArgument: true, codes.DeadlineExceeded: true}

type result struct {
	start    time.Duration // since the soak began
	attempts int
	code     codes.Code
}

func TestChaosSoak(t *testing.T) {
	d := soakDuration(t)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	outage := chaos.Window{Start: d * 40 / 100, End: d * 55 / 100}
	srv, err := chaos.Start(chaos.Faults{
		ErrorRate:        0.15,
		FatalRate:        0.02,
		PushbackRate:     0.3,
		PushbackValues:   []string{"0", "3", "20", "-1", "-250", "soon", "007", "2147483648", ""},
		Latency:          500 * time.Microsecond,
		StragglerRate:    0.02,
		StragglerLatency: 40 * time.Millisecond,
		Outages:          []chaos.Window{outage},
	}, 42, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()

	retry := config(t, fmt.Sprintf(`"retryPolicy":{"maxAttempts":%d,"initialBackoff":"0.002s","maxBackoff":"0.02s",
		"backoffMultiplier":2,"retryableStatusCodes":["unavailable"]}`, retryAttempts))
	hedge := config(t, fmt.Sprintf(`"hedgingPolicy":{"maxAttempts":%d,"hedgingDelay":"0.01s","nonFatalStatusCodes":["UNAVAILABLE"]}`, hedgeAttempts))

	var conns []*grpc.ClientConn
	defer func() {
		for _, cc := range conns {
			cc.Close()
		}
	}()
	dial := func(cfg *serviceconfig.Config) testpb.TestServiceClient {
		c, err := grpcretry.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cc, err := grpc.NewClient(srv.Addr, append(c.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, cc)
		return testpb.NewTestServiceClient(cc)
	}
	clients := []struct {
		name    string
		c       testpb.TestServiceClient
		workers int
		max     int
	}{
		{"retry", dial(retry), 6, retryAttempts},
		{"hedge", dial(hedge), 4, hedgeAttempts},
	}

	begin := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var (
		mu      sync.Mutex
		results = map[string][]result{}
		bad     atomic.Value
	)
	var wg sync.WaitGroup
	for _, cl := range clients {
		for w := range cl.workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var mine []result
				for i := 0; ctx.Err() == nil; i++ {
					start := time.Since(begin)
					callCtx, callCancel := context.WithTimeout(context.Background(), time.Second)
					var n int
					_, err := cl.c.UnaryCall(callCtx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte(fmt.Sprint(w, i))}}, grpcretry.CountAttempts(&n))
					callCancel()
					code := status.Code(err)
					if !allowed[code] || n < 1 || n > cl.max {
						bad.CompareAndSwap(nil, fmt.Sprintf("%s call: code %v after %d attempts (max %d): %v", cl.name, code, n, cl.max, err))
					}
					mine = append(mine, result{start, n, code})
				}
				mu.Lock()
				results[cl.name] = append(results[cl.name], mine...)
				mu.Unlock()
			}()
		}
	}

	// Take the server down and bring it back on the same port.
	down := time.NewTimer(d * 75 / 100)
	select {
	case <-down.C:
		srv.Down()
		time.Sleep(d / 50)
		if err := srv.Restart(); err != nil {
			t.Errorf("restart: %v", err)
		}
	case <-ctx.Done():
		down.Stop()
	}
	wg.Wait()

	if msg := bad.Load(); msg != nil {
		t.Fatal(msg)
	}
	for _, cl := range clients {
		rs := results[cl.name]
		var calls, attempts, ok, inOutage, outageAttempts int
		var early, earlyOK, earlyAttempts, late, lateOK int
		for _, r := range rs {
			calls++
			attempts += r.attempts
			if r.code == codes.OK {
				ok++
			}
			// After the outage and before the server goes down: the
			// throttle must have refilled.
			if r.start >= outage.End+d/10 && r.start < d*75/100 {
				late++
				if r.code == codes.OK {
					lateOK++
				}
			}
			if r.start < outage.Start {
				early++
				earlyAttempts += r.attempts
				if r.code == codes.OK {
					earlyOK++
				}
			}
			// Calls that start well inside the outage, after the
			// throttle has had time to react.
			if r.start >= outage.Start+(outage.End-outage.Start)/5 && r.start < outage.End-50*time.Millisecond {
				inOutage++
				outageAttempts += r.attempts
			}
		}
		if calls == 0 || ok == 0 {
			t.Fatalf("%s: %d calls, %d OK", cl.name, calls, ok)
		}
		if inOutage == 0 {
			t.Fatalf("%s: no call during the outage", cl.name)
		}
		amp := float64(outageAttempts) / float64(inOutage)
		t.Logf("%s: %d calls, %.1f%% OK, %.2f attempts/call; before the outage %.1f%% OK at %.2f attempts/call; during it %.3f attempts/call (%d calls)",
			cl.name, calls, 100*float64(ok)/float64(calls), float64(attempts)/float64(calls),
			100*float64(earlyOK)/float64(max(early, 1)), float64(earlyAttempts)/float64(max(early, 1)), amp, inOutage)
		// Before the outage the policy must be doing its job: with 15%
		// UNAVAILABLE per attempt, retries or hedges lift the success
		// rate well above the 83% of single attempts.
		if early == 0 || float64(earlyOK)/float64(early) < 0.88 {
			t.Errorf("%s: %d of %d calls OK before the outage: retries are not working", cl.name, earlyOK, early)
		}
		if late == 0 || float64(lateOK)/float64(late) < 0.88 {
			t.Errorf("%s: %d of %d calls OK after the outage: the throttle did not recover", cl.name, lateOK, late)
		}
		if amp > maxAmplification {
			t.Errorf("%s: amplification %.3f during the outage, above %.1f: throttling failed", cl.name, amp, maxAmplification)
		}
	}

	// Everything the calls held must be gone: goroutines (goleak in
	// TestMain) and heap.
	srv.Stop()
	for _, cc := range conns {
		cc.Close()
	}
	conns = nil
	results = nil
	var after runtime.MemStats
	for range 5 {
		runtime.GC()
	}
	runtime.ReadMemStats(&after)
	const slack = 16 << 20
	if after.HeapAlloc > before.HeapAlloc+slack {
		t.Errorf("heap %d MiB after the soak, %d MiB before: more than %d MiB retained", after.HeapAlloc>>20, before.HeapAlloc>>20, slack>>20)
	}
}
