package soak

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/connectretry"
	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/httpretry"
	"github.com/rebound-go/rebound/internal/chaos"
	"github.com/rebound-go/rebound/internal/svgplot"
	"github.com/rebound-go/rebound/serviceconfig"
)

// The long soak is opt-in: REBOUND_LONG_SOAK is its duration (10m for the
// figures in BENCHMARKS.md), and REBOUND_LONG_SOAK_SVG, when set, is the
// file its chart is written to.
const (
	longSoakEnv    = "REBOUND_LONG_SOAK"
	longSoakSVGEnv = "REBOUND_LONG_SOAK_SVG"
)

// Attempts each client may make per call, and each call's deadline.
const (
	callTimeout = time.Second

	longRetryAttempts   = 4
	longHedgeAttempts   = 3
	longConnectAttempts = 4
	longHTTPAttempts    = 3
)

// sample is the process's resources at one moment of the soak.
type sample struct {
	at         time.Duration
	goroutines int
	heap       uint64 // live heap after a collection, bytes
	fds        int    // open file descriptors; -1 where they cannot be counted
	calls      [4]int64
}

// openFDs counts the process's open file descriptors, or returns -1 where
// /proc/self/fd does not exist.
func openFDs() int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(entries) - 1 // the directory being read
}

func measure(at time.Duration) sample {
	// Twice: the first collection moves sync.Pool caches aside, the second
	// frees them.
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return sample{at: at, goroutines: runtime.NumGoroutine(), heap: ms.HeapAlloc, fds: openFDs()}
}

// longCaller is one kind of client in the soak. call makes one call with
// payload p and returns the attempts it made and, when the call did not
// end as it may, why; cancelled says the caller cancelled it.
type longCaller struct {
	name    string
	workers int
	max     int
	call    func(ctx context.Context, p string, cancelled func() bool) (attempts int, bad error)
	calls   atomic.Int64
	ok      atomic.Int64
	aborted atomic.Int64 // cancelled by their caller
	attempt atomic.Int64
	longest atomic.Int64 // nanoseconds of the longest call
	late    atomic.Int64 // calls that returned more than 100ms past their deadline
}

// TestLongSoak runs grpcretry, connectretry and httpretry clients for
// REBOUND_LONG_SOAK under chaos: injected errors and pushback, latency and
// stragglers, outages in which every request fails, servers stopped and
// restarted, trickling response bodies, and callers that cancel their
// calls. It samples goroutines, live heap and open file descriptors as it
// goes, and checks that every call ends as it may, with between 1 and
// maxAttempts attempts, that the resources do not grow while the load
// holds, and that they return to their baseline once the clients and
// servers are closed.
//
//	REBOUND_LONG_SOAK=10m REBOUND_LONG_SOAK_SVG=$PWD/docs/soak.svg go test -run TestLongSoak -timeout 30m ./internal/soak
func TestLongSoak(t *testing.T) {
	v := os.Getenv(longSoakEnv)
	if v == "" {
		t.Skip(longSoakEnv + " is not set; REBOUND_LONG_SOAK=10m runs the long soak")
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 10*time.Second {
		t.Fatalf("%s=%q: want a duration of at least 10s", longSoakEnv, v)
	}
	svgPath := os.Getenv(longSoakSVGEnv)

	base := measure(0)
	t.Logf("baseline: %d goroutines, %.1f MiB live heap, %d open fds", base.goroutines, mib(base.heap), base.fds)

	// An outage of 2.5% of the soak in every fifth of it, and a restart of
	// every server between outages.
	var sched schedule
	for k := range 5 {
		start := d*time.Duration(2*k+1)/10 - d/80
		sched.outages = append(sched.outages, chaos.Window{Start: start, End: start + d/40})
		if k < 4 {
			sched.restarts = append(sched.restarts, d*time.Duration(k+1)/5)
		}
	}
	begin := time.Now()
	samples, callers := longLoad(t, d, sched)

	// Under load, nothing grows: the last third of the soak holds no more
	// than the middle third (the first holds the warm-up).
	third := len(samples) / 3
	mid, last := samples[third:2*third], samples[2*third:]
	for _, r := range []struct {
		what  string
		of    func(sample) float64
		slack float64
	}{
		{"goroutines", func(s sample) float64 { return float64(s.goroutines) }, 20},
		{"live heap MiB", func(s sample) float64 { return mib(s.heap) }, 4},
		{"open fds", func(s sample) float64 { return float64(s.fds) }, 10},
	} {
		m, l := peak(mid, r.of), peak(last, r.of)
		t.Logf("%s: peak %.1f in the middle third, %.1f in the last", r.what, m, l)
		if l > 1.25*m+r.slack {
			t.Errorf("%s grew under steady load: peak %.1f in the last third, %.1f in the middle", r.what, l, m)
		}
	}

	// With the clients and servers closed and gone, the resources return
	// to their baseline. Closed connections end their goroutines a moment
	// later.
	var after sample
	for range 100 {
		after = measure(time.Since(begin))
		if after.goroutines <= base.goroutines && after.fds <= base.fds {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("after closing: %d goroutines, %.1f MiB live heap, %d open fds (baseline %d, %.1f MiB, %d)",
		after.goroutines, mib(after.heap), after.fds, base.goroutines, mib(base.heap), base.fds)
	if after.goroutines > base.goroutines {
		t.Errorf("%d goroutines after closing, %d before", after.goroutines, base.goroutines)
	}
	if after.fds > base.fds {
		t.Errorf("%d open fds after closing, %d before", after.fds, base.fds)
	}
	// The runtime keeps the descriptors of exited goroutines, and
	// packages their pools: a little heap stays.
	const heapSlack = 1 << 20
	if after.heap > base.heap+heapSlack {
		t.Errorf("live heap %.1f MiB after closing, %.1f MiB before: more than %d MiB retained", mib(after.heap), mib(base.heap), heapSlack>>20)
	}

	for _, cl := range callers {
		// How late a call returns depends on the machine's load, so it
		// is reported, not checked.
		t.Logf("%s: %d calls, %.1f%% OK, %d cancelled by their caller, %.2f attempts/call (at most %d), longest %v, %d returned over 100ms past their deadline",
			cl.name, cl.calls, 100*float64(cl.ok)/float64(max(cl.calls, 1)), cl.aborted,
			float64(cl.attempts)/float64(max(cl.calls, 1)), cl.max, cl.longest.Round(time.Millisecond), cl.late)
		if cl.calls == 0 || cl.ok == 0 {
			t.Errorf("%s: %d calls, %d OK", cl.name, cl.calls, cl.ok)
		}
	}

	if svgPath != "" {
		all := append(append([]sample{base}, samples...), after)
		if err := writeSoakChart(svgPath, d, all, callers, sched, base); err != nil {
			t.Fatal(err)
		}
		t.Logf("chart written to %s", svgPath)
	}
}

// schedule is when the servers fail as a whole: outages, in which every
// request fails, and restarts.
type schedule struct {
	outages  []chaos.Window
	restarts []time.Duration
}

// callerResult is what one kind of client did in the soak.
type callerResult struct {
	name                         string
	max                          int
	calls, ok, aborted, attempts int64
	longest                      time.Duration
	late                         int64
}

// longLoad runs the soak's servers and clients for d, sampling the
// resources as it goes, and closes them all before it returns. It reports
// the first call that did not end as it may.
func longLoad(t *testing.T, d time.Duration, sched schedule) ([]sample, []callerResult) {
	faults := chaos.Faults{
		ErrorRate:        0.15,
		FatalRate:        0.02,
		PushbackRate:     0.2,
		PushbackValues:   []string{"0", "3", "20", "-1", "soon", ""},
		Latency:          time.Millisecond,
		StragglerRate:    0.02,
		StragglerLatency: 40 * time.Millisecond,
		Outages:          sched.outages,
	}
	grpcSrv, err := chaos.Start(faults, 42, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer grpcSrv.Stop()
	httpSrv, err := startHTTPChaos(faults, 0.05, 43)
	if err != nil {
		t.Fatal(err)
	}
	defer httpSrv.Stop()
	callers, closeClients := longClients(t, grpcSrv.Addr, "http://"+httpSrv.Addr)
	defer closeClients()

	begin := time.Now()
	ctx, stop := context.WithTimeout(context.Background(), d)
	defer stop()
	var (
		wg  sync.WaitGroup
		bad atomic.Value
	)
	for ci, cl := range callers {
		for w := range cl.workers {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(ci), uint64(w)))
				for i := 0; ctx.Err() == nil; i++ {
					p := fmt.Sprintf("%s-%d-%d", cl.name, w, i)
					callCtx, cancel := context.WithTimeout(context.Background(), callTimeout)
					// One call in ten is abandoned by its caller within
					// 20ms, often in the middle of an attempt or a wait.
					var abandoned atomic.Bool
					var cancelTimer *time.Timer
					if rng.IntN(10) == 0 {
						cancelTimer = time.AfterFunc(time.Duration(rng.Int64N(int64(20*time.Millisecond))), func() {
							abandoned.Store(true)
							cancel()
						})
					}
					start := time.Now()
					n, why := cl.call(callCtx, p, abandoned.Load)
					took := time.Since(start)
					if cancelTimer != nil {
						cancelTimer.Stop()
					}
					cancel()
					cl.calls.Add(1)
					cl.attempt.Add(int64(n))
					if took > time.Duration(cl.longest.Load()) {
						cl.longest.Store(int64(took))
					}
					if took > callTimeout+100*time.Millisecond {
						cl.late.Add(1)
					}
					switch {
					case why != nil:
						bad.CompareAndSwap(nil, fmt.Sprintf("%s call %q: %v", cl.name, p, why))
					case n > cl.max || n < 0 || (n == 0 && callCtx.Err() == nil):
						bad.CompareAndSwap(nil, fmt.Sprintf("%s call %q: %d attempts, want 1 to %d", cl.name, p, n, cl.max))
					}
					// Keep the load modest: the soak is about time, not
					// throughput.
					time.Sleep(5 * time.Millisecond)
				}
			})
		}
	}

	// Sample the resources, and restart the servers on schedule.
	tick := time.NewTicker(max(d/300, 100*time.Millisecond))
	defer tick.Stop()
	var samples []sample
	next := 0
	for ctx.Err() == nil {
		select {
		case <-tick.C:
		case <-ctx.Done():
			continue
		}
		now := time.Since(begin)
		if next < len(sched.restarts) && now >= sched.restarts[next] {
			next++
			grpcSrv.Down()
			httpSrv.Down()
			time.Sleep(200 * time.Millisecond)
			if err := grpcSrv.Restart(); err != nil {
				t.Fatalf("restarting the gRPC server: %v", err)
			}
			if err := httpSrv.Restart(); err != nil {
				t.Fatalf("restarting the HTTP server: %v", err)
			}
		}
		s := measure(now)
		for i, cl := range callers {
			s.calls[i] = cl.calls.Load()
		}
		samples = append(samples, s)
	}
	wg.Wait() // every call has ended: a call that hangs hangs the test
	if msg := bad.Load(); msg != nil {
		t.Error(msg)
	}
	var results []callerResult
	for _, cl := range callers {
		results = append(results, callerResult{name: cl.name, max: cl.max, calls: cl.calls.Load(), ok: cl.ok.Load(),
			aborted: cl.aborted.Load(), attempts: cl.attempt.Load(), longest: time.Duration(cl.longest.Load()), late: cl.late.Load()})
	}
	return samples, results
}

// badEnd is a call that did not end as it may.
type badEnd struct{ msg string }

func (b *badEnd) Error() string { return b.msg }

func bad(format string, a ...any) error { return &badEnd{fmt.Sprintf(format, a...)} }

// isConnReset reports whether err is a connection cut off by its peer.
func isConnReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

func peak(ss []sample, of func(sample) float64) float64 {
	p := 0.0
	for _, s := range ss {
		p = max(p, of(s))
	}
	return p
}

// longClients returns the soak's callers on the gRPC server at grpcAddr and
// the HTTP server at httpURL, and a function that closes their clients.
func longClients(t *testing.T, grpcAddr, httpURL string) ([]*longCaller, func()) {
	t.Helper()
	config := func(service, policy string) *serviceconfig.Config {
		js := fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],%s}],
			"retryThrottling":{"maxTokens":10,"tokenRatio":0.5}}`, service, policy)
		cfg, err := serviceconfig.Parse([]byte(js))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	retryPolicy := func(n int) string {
		return fmt.Sprintf(`"retryPolicy":{"maxAttempts":%d,"initialBackoff":"0.002s","maxBackoff":"0.02s",
			"backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}`, n)
	}
	const grpcService = "grpc.testing.TestService"

	var conns []*grpc.ClientConn
	dial := func(cfg *serviceconfig.Config) testpb.TestServiceClient {
		c, err := grpcretry.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cc, err := grpc.NewClient(grpcAddr, append(c.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, cc)
		return testpb.NewTestServiceClient(cc)
	}
	grpcCall := func(c testpb.TestServiceClient) func(context.Context, string, func() bool) (int, error) {
		return func(ctx context.Context, p string, cancelled func() bool) (int, error) {
			var n int
			resp, err := c.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte(p)}}, grpcretry.CountAttempts(&n))
			switch code := status.Code(err); {
			case code == codes.OK:
				if got := string(resp.GetPayload().GetBody()); got != p {
					return n, bad("answered %q", got)
				}
			case code == codes.Canceled && cancelled(),
				code == codes.Unavailable, code == codes.InvalidArgument, code == codes.DeadlineExceeded:
			default:
				return n, bad("ended with %v", err)
			}
			return n, err
		}
	}
	retryClient := dial(config(grpcService, retryPolicy(longRetryAttempts)))
	hedgeClient := dial(config(grpcService, fmt.Sprintf(`"hedgingPolicy":{"maxAttempts":%d,"hedgingDelay":"0.01s","nonFatalStatusCodes":["UNAVAILABLE"]}`, longHedgeAttempts)))

	// Each HTTP client has its own connection pool, closed at the end.
	connectBase, httpBase := &http.Transport{}, &http.Transport{}
	ic, err := connectretry.New(config(soakService, retryPolicy(longConnectAttempts)))
	if err != nil {
		t.Fatal(err)
	}
	echo := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](&http.Client{Transport: connectBase}, httpURL+soakProcedure, connect.WithInterceptors(ic))
	connectCall := func(ctx context.Context, p string, cancelled func() bool) (int, error) {
		var n int
		resp, err := echo.CallUnary(connectretry.CountAttempts(ctx, &n), connect.NewRequest(wrapperspb.String(p)))
		switch code := connect.CodeOf(err); {
		case err == nil:
			if got := resp.Msg.GetValue(); got != p {
				return n, bad("answered %q", got)
			}
		case code == connect.CodeCanceled && cancelled(),
			code == connect.CodeUnavailable, code == connect.CodeInvalidArgument, code == connect.CodeDeadlineExceeded:
		case code == connect.CodeCanceled && isConnReset(err):
			// connect-go reports a connection its server reset (a restart)
			// as canceled, a code that is not retried.
		default:
			return n, bad("ended with %v (%v)", code, err)
		}
		return n, err
	}

	// The backoff of the gRPC policies, not the default's seconds.
	tr, err := httpretry.New(httpBase, httpretry.WithMaxAttempts(longHTTPAttempts),
		httpretry.WithBackoff(rebound.Backoff{Initial: 2 * time.Millisecond, Max: 20 * time.Millisecond, Multiplier: 2}))
	if err != nil {
		t.Fatal(err)
	}
	web := &http.Client{Transport: tr}
	httpCall := func(ctx context.Context, p string, cancelled func() bool) (int, error) {
		var n int
		req, err := http.NewRequestWithContext(httpretry.CountAttempts(ctx, &n), http.MethodGet, httpURL+echoPath+"?p="+url.QueryEscape(p), nil)
		if err != nil {
			return 0, bad("%v", err)
		}
		resp, err := web.Do(req)
		if err != nil {
			// Every failure says why retrying stopped.
			if re := (*rebound.Error)(nil); !errors.As(err, &re) {
				return n, bad("ended with %v, not a *rebound.Error", err)
			}
			return n, err
		}
		body, rerr := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		switch {
		case rerr != nil:
			// The body was cut off: by the caller, its deadline, or a
			// server going down.
			if ctx.Err() == nil && !errors.Is(rerr, io.ErrUnexpectedEOF) && !isConnReset(rerr) {
				return n, bad("reading the body: %v", rerr)
			}
			return n, rerr
		case resp.StatusCode == http.StatusOK:
			if !bytes.Equal(body, []byte(p)) {
				return n, bad("answered %q", body)
			}
			return n, nil
		case resp.StatusCode == http.StatusServiceUnavailable, resp.StatusCode == http.StatusInternalServerError:
			return n, errors.New(strconv.Itoa(resp.StatusCode))
		}
		return n, bad("answered %s", resp.Status)
	}

	callers := []*longCaller{
		{name: "grpcretry retry", workers: 2, max: longRetryAttempts, call: grpcCall(retryClient)},
		{name: "grpcretry hedge", workers: 2, max: longHedgeAttempts, call: grpcCall(hedgeClient)},
		{name: "connectretry", workers: 2, max: longConnectAttempts, call: connectCall},
		{name: "httpretry", workers: 2, max: longHTTPAttempts, call: httpCall},
	}
	// Count successes and cancellations around each call.
	for _, cl := range callers {
		call := cl.call
		cl.call = func(ctx context.Context, p string, cancelled func() bool) (int, error) {
			n, err := call(ctx, p, cancelled)
			var why *badEnd
			if errors.As(err, &why) {
				return n, why
			}
			switch {
			case err == nil:
				cl.ok.Add(1)
			case cancelled():
				cl.aborted.Add(1)
			}
			return n, nil
		}
	}
	var once sync.Once
	return callers, func() {
		once.Do(func() {
			for _, cc := range conns {
				cc.Close()
			}
			connectBase.CloseIdleConnections()
			httpBase.CloseIdleConnections()
		})
	}
}

// writeSoakChart draws the samples as four charts, one below the other:
// goroutines, live heap, open file descriptors and calls per second, with
// the outages shaded, the restarts and the baseline marked.
func writeSoakChart(path string, d time.Duration, samples []sample, callers []callerResult, sched schedule, base sample) error {
	minutes := func(t time.Duration) float64 { return t.Minutes() }
	var bands []svgplot.Band
	for i, w := range sched.outages {
		label := ""
		if i == 0 {
			label = "outage"
		}
		bands = append(bands, svgplot.Band{From: minutes(w.Start), To: minutes(w.End), Label: label})
	}
	var marks []svgplot.Mark
	for i, r := range sched.restarts {
		label := ""
		if i == 0 {
			label = "restart"
		}
		marks = append(marks, svgplot.Mark{Value: minutes(r), Label: label})
	}
	closed := minutes(d)
	marks = append(marks, svgplot.Mark{Value: closed, Label: "closed"})
	chart := func(title, ylabel string, baseline float64, of func(sample) float64) *svgplot.Chart {
		var pts []svgplot.Point
		for _, s := range samples {
			pts = append(pts, svgplot.Point{X: minutes(s.at), Y: of(s)})
		}
		return &svgplot.Chart{
			Title: title, XLabel: "minutes", YLabel: ylabel, Width: 900, Height: 260,
			Series: []svgplot.Series{{Name: ylabel, Points: pts}},
			Bands:  bands,
			Marks:  append(slices.Clone(marks), svgplot.Mark{Horizontal: true, Value: baseline, Label: "baseline"}),
		}
	}
	charts := []svgplot.Figure{
		chart(fmt.Sprintf("Long soak (%v): goroutines", d), "goroutines", float64(base.goroutines), func(s sample) float64 { return float64(s.goroutines) }),
		chart("Live heap after GC", "MiB", mib(base.heap), func(s sample) float64 { return mib(s.heap) }),
	}
	if base.fds >= 0 {
		charts = append(charts, chart("Open file descriptors", "fds", float64(base.fds), func(s sample) float64 { return float64(s.fds) }))
	}
	rates := &svgplot.Chart{Title: "Calls per second", XLabel: "minutes", YLabel: "calls/s", Width: 900, Height: 260, Bands: bands, Marks: marks}
	for i, cl := range callers {
		var pts []svgplot.Point
		// The first and last samples are the baseline and the end.
		for k := 2; k < len(samples)-1; k++ {
			dt := (samples[k].at - samples[k-1].at).Seconds()
			pts = append(pts, svgplot.Point{X: minutes(samples[k].at), Y: float64(samples[k].calls[i]-samples[k-1].calls[i]) / dt})
		}
		rates.Series = append(rates.Series, svgplot.Series{Name: cl.name, Points: pts})
	}
	charts = append(charts, rates)
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := svgplot.WriteStacked(f, charts...); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
