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

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/chaos"
	"github.com/rebound-go/rebound/internal/testmain"
	"github.com/rebound-go/rebound/serviceconfig"
)

func TestMain(m *testing.M) { testmain.Run(m) }

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

// The soak's phases, in order. Each lasts a share of the soak's duration
// at least, and as long as the clients take to make the calls it is
// judged by: on a busy machine calls are fewer and slower, and a phase cut
// by the clock alone would judge the throttle on a handful of them.
const (
	phaseBefore  = iota // the server answers, with its faults
	phaseOutage         // every call fails at once
	phaseAfter          // the outage is over; the throttle refills
	phaseRestart        // the server goes down and comes back
	phases
)

// The calls of each client each judgement needs, counted in the order
// they started in the phase. Each client has a throttle of its own: 10
// tokens, retries above 5; a failed attempt takes one, a success gives
// back half of one. In an outage it stops retries within a few calls;
// after it, from empty, it allows them again after about twenty answers.
const (
	outageSkip = 20  // calls before the outage is judged: the throttle reacts
	afterSkip  = 50  // calls before the recovery is judged: the throttle refills
	judged     = 100 // calls judged
)

type result struct {
	phase    int   // the phase the call started and ended in; -1 if it spanned two
	seq      int64 // its place among its client's calls that started in the phase
	attempts int
	code     codes.Code
}

func TestChaosSoak(t *testing.T) {
	d := soakDuration(t)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	srv, err := chaos.Start(chaos.Faults{
		ErrorRate:        0.15,
		FatalRate:        0.02,
		PushbackRate:     0.3,
		PushbackValues:   []string{"0", "3", "20", "-1", "-250", "soon", "007", "2147483648", ""},
		Latency:          500 * time.Microsecond,
		StragglerRate:    0.02,
		StragglerLatency: 40 * time.Millisecond,
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
	dial := func(cfg *serviceconfig.Config, name string) testpb.TestServiceClient {
		// A throttle of its own: under load the hedging client sends
		// more hedges, whose failures would drain a shared throttle and
		// throttle the retrying client's retries with it.
		c, err := grpcretry.New(cfg, grpcretry.WithServerName(fmt.Sprintf("soak-%s-%s", name, srv.Addr)))
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
		{"retry", dial(retry, "retry"), 6, retryAttempts},
		{"hedge", dial(hedge, "hedge"), 4, hedgeAttempts},
	}

	begin := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		phase   atomic.Int32
		started [phases][2]atomic.Int64 // by client, calls started in each phase
		ended   [phases][2]atomic.Int64 // by client, calls that started and ended in each phase
		mu      sync.Mutex
		results = map[string][]result{}
		bad     atomic.Value
	)
	var wg sync.WaitGroup
	for ci, cl := range clients {
		for w := range cl.workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var mine []result
				for i := 0; ctx.Err() == nil; i++ {
					p := int(phase.Load())
					seq := started[p][ci].Add(1)
					callCtx, callCancel := context.WithTimeout(context.Background(), time.Second)
					var n int
					_, err := cl.c.UnaryCall(callCtx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte(fmt.Sprint(w, i))}}, grpcretry.CountAttempts(&n))
					callCancel()
					code := status.Code(err)
					if !allowed[code] || n < 1 || n > cl.max {
						bad.CompareAndSwap(nil, fmt.Sprintf("%s call: code %v after %d attempts (max %d): %v", cl.name, code, n, cl.max, err))
					}
					r := result{phase: p, seq: seq, attempts: n, code: code}
					if int(phase.Load()) == p {
						ended[p][ci].Add(1)
					} else {
						r.phase = -1
					}
					mine = append(mine, r)
				}
				mu.Lock()
				results[cl.name] = append(results[cl.name], mine...)
				mu.Unlock()
			}()
		}
	}

	// Each phase lasts its share of d, and until each client has made the
	// calls it is judged by; a machine too busy to make them at all fails
	// the test after ten times the soak's duration.
	until := func(p int, share time.Duration, need int64) {
		end := time.Now().Add(share)
		for time.Now().Before(end) || ended[p][0].Load() < need || ended[p][1].Load() < need {
			if time.Since(begin) > 10*d+time.Minute {
				cancel()
				wg.Wait()
				t.Fatalf("phase %d: %d and %d calls after %v, want %d of each client", p, ended[p][0].Load(), ended[p][1].Load(), time.Since(begin), need)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	until(phaseBefore, d*40/100, judged)
	phase.Store(phaseOutage)
	srv.SetOutage(true)
	until(phaseOutage, d*15/100, outageSkip+judged)
	phase.Store(phaseAfter)
	srv.SetOutage(false)
	until(phaseAfter, d*20/100, afterSkip+judged)
	// Take the server down and bring it back on the same port.
	phase.Store(phaseRestart)
	srv.Down()
	time.Sleep(d / 50)
	if err := srv.Restart(); err != nil {
		t.Errorf("restart: %v", err)
	}
	until(phaseRestart, max(d-time.Since(begin), d/20), 1)
	cancel()
	wg.Wait()

	if msg := bad.Load(); msg != nil {
		t.Fatal(msg)
	}
	for _, cl := range clients {
		rs := results[cl.name]
		var calls, attempts, ok int
		var early, earlyOK, earlyAttempts, late, lateOK, inOutage, outageAttempts int
		for _, r := range rs {
			calls++
			attempts += r.attempts
			if r.code == codes.OK {
				ok++
			}
			switch {
			case r.phase == phaseBefore:
				early++
				earlyAttempts += r.attempts
				if r.code == codes.OK {
					earlyOK++
				}
			case r.phase == phaseOutage && r.seq > outageSkip:
				inOutage++
				outageAttempts += r.attempts
			case r.phase == phaseAfter && r.seq > afterSkip:
				late++
				if r.code == codes.OK {
					lateOK++
				}
			}
		}
		if calls == 0 || ok == 0 {
			t.Fatalf("%s: %d calls, %d OK", cl.name, calls, ok)
		}
		if inOutage == 0 {
			t.Fatalf("%s: no call during the outage", cl.name)
		}
		amp := float64(outageAttempts) / float64(inOutage)
		t.Logf("%s: %d calls, %.1f%% OK, %.2f attempts/call; before the outage %.1f%% OK at %.2f attempts/call; during it %.3f attempts/call (%d calls); after it %.1f%% OK (%d calls)",
			cl.name, calls, 100*float64(ok)/float64(calls), float64(attempts)/float64(calls),
			100*float64(earlyOK)/float64(max(early, 1)), float64(earlyAttempts)/float64(max(early, 1)), amp, inOutage,
			100*float64(lateOK)/float64(max(late, 1)), late)
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
