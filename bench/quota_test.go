package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/time/rate"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/connectretry"
	"github.com/rebound-go/rebound/httpretry"
	"github.com/rebound-go/rebound/internal/quotatest"
	"github.com/rebound-go/rebound/serviceconfig"
)

// A quotaScenario is issue 34's: processes, each with workers that call in
// a loop for length, share a server's quota of limit requests per window
// (fixed windows), which it publishes in family's fields (or not). A
// refusal is a 429 with a Retry-After to the window's end (Connect:
// RESOURCE_EXHAUSTED and grpc-retry-pushback-ms). Each "process" is a
// client of its own: its own Transport or Interceptor, its own limiter.
type quotaScenario struct {
	family    quotatest.Family
	processes int
	workers   int
	limit     int
	window    time.Duration
	length    time.Duration
	deadline  time.Duration
}

// quotaRate is the scenario's true rate, requests per second.
func (s quotaScenario) quotaRate() float64 { return float64(s.limit) / s.window.Seconds() }

// quotaResult is one row: the calls that succeeded of those made, the
// requests the server saw per call, and the processes' shares of what it
// accepted over the second half, in fair shares, with Jain's index.
type quotaResult struct {
	calls, succeeded int64
	seen, refused    int64
	minShare         float64
	maxShare         float64
	jain             float64
}

// quotaServerHTTP serves q: its fields on every answer; a refusal is a
// 429 with a Retry-After. accept is told which process (the X-Process
// header) each accepted request came from, and when.
func quotaServerHTTP(tb testing.TB, q *quotatest.Quota, accept func(proc int, at time.Time)) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		ok, fields, retryAfter := q.Take(now)
		for k, v := range fields {
			w.Header().Set(k, v)
		}
		if !ok {
			w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		p, _ := strconv.Atoi(r.Header.Get("X-Process"))
		accept(p, now)
	}))
	tb.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// quotaServerConnect is quotaServerHTTP as a connect handler of
// UnaryCall.
func quotaServerConnect(tb testing.TB, q *quotatest.Quota, accept func(proc int, at time.Time)) string {
	mux := http.NewServeMux()
	mux.Handle(connectProcedure, connect.NewUnaryHandler(connectProcedure,
		func(_ context.Context, req *connect.Request[testpb.SimpleRequest]) (*connect.Response[testpb.SimpleResponse], error) {
			now := time.Now()
			ok, fields, retryAfter := q.Take(now)
			if !ok {
				e := connect.NewError(connect.CodeResourceExhausted, errors.New("bench: quota spent"))
				for k, v := range fields {
					e.Meta().Set(k, v)
				}
				e.Meta().Set("grpc-retry-pushback-ms", strconv.Itoa(retryAfter*1000))
				return nil, e
			}
			p, _ := strconv.Atoi(req.Header().Get("X-Process"))
			accept(p, now)
			resp := connect.NewResponse(okReply)
			for k, v := range fields {
				resp.Header().Set(k, v)
			}
			return resp, nil
		}))
	srv := httptest.NewServer(mux)
	tb.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// quotaClient makes the calls of process proc of s against addr.
type quotaClient func(tb testing.TB, s quotaScenario, proc int, addr string) func(ctx context.Context) error

// processHeader marks a request with its process, for the server's
// shares.
type processHeader struct {
	base http.RoundTripper
	proc string
}

func (p processHeader) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Process", p.proc)
	return p.base.RoundTrip(r)
}

// processConfig is the default adaptive rate limit, apart by a hair for
// each process: the process's limiter is its own (limiters are shared by
// host, or server name, and settings), as in a process of its own.
func processConfig(proc int) rebound.AdaptiveRateLimitConfig {
	return rebound.AdaptiveRateLimitConfig{MinRate: 0.5 + float64(proc)*1e-9}
}

func quotaRetryConfig(tb testing.TB) *serviceconfig.Config {
	cfg, err := serviceconfig.Parse([]byte(`{"methodConfig":[{"name":[{"service":"` + testService + `"}],"retryPolicy":{
		"maxAttempts":3,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,
		"retryableStatusCodes":["RESOURCE_EXHAUSTED"]}}]}`))
	if err != nil {
		tb.Fatal(err)
	}
	return cfg
}

// quotaRows are the rows, per protocol.
var quotaRows = []struct {
	name          string
	http, connect quotaClient
}{
	{
		name: "aws-sdk-go-v2 adaptive",
		http: func(tb testing.TB, s quotaScenario, proc int, addr string) func(ctx context.Context) error {
			rt := processHeader{httpBase(tb, rateScenario{workers: s.workers}), strconv.Itoa(proc)}
			return awsAdaptive(func(ctx context.Context) error { return httpGet(ctx, rt, "http://"+addr+"/") })
		},
		connect: func(tb testing.TB, s quotaScenario, proc int, addr string) func(ctx context.Context) error {
			return awsAdaptive(connectProcess(tb, s, proc, addr))
		},
	},
	{
		name: "oracle at a fair share",
		http: func(tb testing.TB, s quotaScenario, proc int, addr string) func(ctx context.Context) error {
			rt := processHeader{httpBase(tb, rateScenario{workers: s.workers}), strconv.Itoa(proc)}
			return fairShare(s, func(ctx context.Context) error { return httpGet(ctx, rt, "http://"+addr+"/") })
		},
		connect: func(tb testing.TB, s quotaScenario, proc int, addr string) func(ctx context.Context) error {
			return fairShare(s, connectProcess(tb, s, proc, addr))
		},
	},
	{
		name: "rebound adaptive rate limit",
		http: func(tb testing.TB, s quotaScenario, proc int, addr string) func(ctx context.Context) error {
			return reboundHTTP(tb, s, proc, addr, false)
		},
		connect: func(tb testing.TB, s quotaScenario, proc int, addr string) func(ctx context.Context) error {
			return reboundConnect(tb, s, proc, addr, false)
		},
	},
	{
		name: "rebound reading the quota",
		http: func(tb testing.TB, s quotaScenario, proc int, addr string) func(ctx context.Context) error {
			return reboundHTTP(tb, s, proc, addr, true)
		},
		connect: func(tb testing.TB, s quotaScenario, proc int, addr string) func(ctx context.Context) error {
			return reboundConnect(tb, s, proc, addr, true)
		},
	},
}

func reboundHTTP(tb testing.TB, s quotaScenario, proc int, addr string, quota bool) func(ctx context.Context) error {
	opts := []httpretry.Option{httpretry.WithAdaptiveRateLimit(processConfig(proc)), httpretry.WithMaxAttempts(3)}
	if quota {
		opts = append(opts, httpretry.WithRateLimitQuota())
	}
	rt := httpretry.NewTransport(processHeader{httpBase(tb, rateScenario{workers: s.workers}), strconv.Itoa(proc)}, opts...)
	return func(ctx context.Context) error { return httpGet(ctx, rt, "http://"+addr+"/") }
}

func reboundConnect(tb testing.TB, s quotaScenario, proc int, addr string, quota bool) func(ctx context.Context) error {
	opts := []connectretry.Option{connectretry.WithAdaptiveRateLimit(processConfig(proc)), connectretry.WithServerName(fmt.Sprint(addr, "/", proc))}
	if quota {
		opts = append(opts, connectretry.WithRateLimitQuota())
	}
	i, err := connectretry.New(quotaRetryConfig(tb), opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return connectProcess(tb, s, proc, addr, connect.WithInterceptors(i))
}

// connectProcess is connectClient for process proc.
func connectProcess(tb testing.TB, s quotaScenario, proc int, addr string, opts ...connect.ClientOption) func(ctx context.Context) error {
	base := processHeader{httpBase(tb, rateScenario{workers: s.workers}), strconv.Itoa(proc)}
	c := connect.NewClient[testpb.SimpleRequest, testpb.SimpleResponse](&http.Client{Transport: base}, "http://"+addr+connectProcedure, opts...)
	return func(ctx context.Context) error {
		_, err := c.CallUnary(ctx, connect.NewRequest(&testpb.SimpleRequest{}))
		return toAWS(err)
	}
}

// fairShare paces call at the process's fair share of the true rate, and
// never retries.
func fairShare(s quotaScenario, call func(context.Context) error) func(ctx context.Context) error {
	lim := rate.NewLimiter(rate.Limit(s.quotaRate()/float64(s.processes)), 1)
	return func(ctx context.Context) error {
		if err := lim.Wait(ctx); err != nil {
			return err
		}
		return call(ctx)
	}
}

// runQuota runs one row of s against a fresh server in protocol proto
// ("http" or "connect").
func runQuota(tb testing.TB, s quotaScenario, proto string, row quotaClient) quotaResult {
	q := &quotatest.Quota{Limit: s.limit, Window: s.window, Family: s.family}
	var (
		mu       sync.Mutex
		accepted = make([][]time.Time, s.processes)
	)
	accept := func(p int, at time.Time) {
		if p < 0 || p >= s.processes {
			return
		}
		mu.Lock()
		accepted[p] = append(accepted[p], at)
		mu.Unlock()
	}
	var addr string
	if proto == "http" {
		addr = quotaServerHTTP(tb, q, accept)
	} else {
		addr = quotaServerConnect(tb, q, accept)
	}
	var calls, ok atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(s.length)
	for p := range s.processes {
		call := row(tb, s, p, addr)
		for range s.workers {
			wg.Go(func() {
				for time.Now().Before(stop) {
					ctx, cancel := context.WithTimeout(context.Background(), s.deadline)
					calls.Add(1)
					err := call(ctx)
					cancel()
					if err == nil {
						ok.Add(1)
						continue
					}
					// A failed call (one refused at once, unsent, too)
					// is not made again at once: the caller pauses.
					time.Sleep(100 * time.Millisecond)
				}
			})
		}
	}
	wg.Wait()
	r := quotaResult{calls: calls.Load(), succeeded: ok.Load(), seen: q.Seen(), refused: q.Refused()}
	// Shares over the second half, when the processes have settled.
	half := start.Add(s.length / 2)
	shares := make([]float64, s.processes)
	var total float64
	for p, ts := range accepted {
		for _, at := range ts {
			if !at.Before(half) && at.Before(stop) {
				shares[p]++
			}
		}
		total += shares[p]
	}
	r.minShare, r.maxShare = math.Inf(1), 0
	var sum, sq float64
	for _, x := range shares {
		f := 0.0
		if total > 0 {
			f = x / (total / float64(s.processes))
		}
		r.minShare, r.maxShare = min(r.minShare, f), max(r.maxShare, f)
		sum += x
		sq += x * x
	}
	if sq > 0 {
		r.jain = sum * sum / (float64(s.processes) * sq)
	}
	return r
}

// quotaScenarios are the benchmark's: a limit of 20/s in windows of 5s,
// ten processes of two workers for 60s, and one of twenty, against
// servers that publish IETF RateLimit fields, X-RateLimit fields (the
// reset a Unix time), or nothing.
func quotaScenarios() []quotaScenario {
	var ss []quotaScenario
	for _, f := range []quotatest.Family{quotatest.IETF, quotatest.XUnix, quotatest.None} {
		ss = append(ss,
			quotaScenario{family: f, processes: 10, workers: 2, limit: 100, window: 5 * time.Second, length: 60 * time.Second, deadline: 10 * time.Second},
			quotaScenario{family: f, processes: 1, workers: 20, limit: 100, window: 5 * time.Second, length: 60 * time.Second, deadline: 10 * time.Second},
		)
	}
	return ss
}

// BenchmarkQuota is issue 34's comparison on real servers in process:
// each row's processes against a fresh server with a published quota (or
// none). It reports the calls that succeeded (a fraction), the requests
// the server saw per call (load), and with ten processes the least and
// most of a fair share any process got over the second half and Jain's
// index of the shares. Each row takes 60s; run it once:
//
//	go test -run='^$' -bench=Quota -benchtime=1x
func BenchmarkQuota(b *testing.B) {
	for _, s := range quotaScenarios() {
		for _, proto := range []string{"http", "connect"} {
			for _, row := range quotaRows {
				client := row.http
				if proto == "connect" {
					client = row.connect
				}
				name := fmt.Sprintf("%s/%s/%dx%d/%s", proto, strings.ReplaceAll(s.family.String(), " ", "_"), s.processes, s.workers, strings.ReplaceAll(row.name, " ", "_"))
				b.Run(name, func(b *testing.B) {
					var r quotaResult
					for range b.N {
						r = runQuota(b, s, proto, client)
					}
					b.ReportMetric(float64(r.succeeded)/float64(max(r.calls, 1)), "succeeded")
					b.ReportMetric(float64(r.seen)/float64(max(r.calls, 1)), "load")
					b.ReportMetric(float64(r.calls), "calls")
					if s.processes > 1 {
						b.ReportMetric(r.minShare, "minshare")
						b.ReportMetric(r.maxShare, "maxshare")
						b.ReportMetric(r.jain, "jain")
					}
				})
			}
		}
	}
}

// TestQuotaRows runs every row of BenchmarkQuota on a short scenario
// (three processes of two workers, 15 requests per 3s window, for 4s) and
// checks that each is wired alike: calls are made and succeed, the server
// sees at least one request per call that succeeded, and the rows that
// read a published quota have at most two requests per process refused.
func TestQuotaRows(t *testing.T) {
	type run struct {
		name   string
		family quotatest.Family
		quota  bool
		s      quotaScenario
		r      quotaResult
	}
	var runs []*run
	for _, f := range []quotatest.Family{quotatest.IETF, quotatest.XUnix, quotatest.None} {
		for _, proto := range []string{"http", "connect"} {
			for _, row := range quotaRows {
				runs = append(runs, &run{
					name: proto + "/" + f.String() + "/" + row.name, family: f, quota: row.name == "rebound reading the quota",
					s: quotaScenario{family: f, processes: 3, workers: 2, limit: 15, window: 3 * time.Second, length: 4 * time.Second, deadline: 3 * time.Second},
				})
			}
		}
	}
	// All at once, each against a server of its own: they wait on the
	// network and the clock, and one after another would take minutes.
	var wg sync.WaitGroup
	i := 0
	for range []quotatest.Family{quotatest.IETF, quotatest.XUnix, quotatest.None} {
		for _, proto := range []string{"http", "connect"} {
			for _, row := range quotaRows {
				client := row.http
				if proto == "connect" {
					client = row.connect
				}
				r := runs[i]
				i++
				wg.Go(func() { r.r = runQuota(t, r.s, proto, client) })
			}
		}
	}
	wg.Wait()
	for _, r := range runs {
		t.Run(r.name, func(t *testing.T) {
			t.Logf("%d calls, %d succeeded; the server saw %d, refused %d", r.r.calls, r.r.succeeded, r.r.seen, r.r.refused)
			if r.r.succeeded == 0 || r.r.seen < r.r.succeeded {
				t.Fatalf("%d calls succeeded, the server saw %d requests", r.r.succeeded, r.r.seen)
			}
			// Processes that start together each take the whole
			// remainder for theirs until the first answers show it
			// falling faster: a refusal or two each, then none.
			if r.quota && r.family != quotatest.None && r.r.refused > int64(2*r.s.processes) {
				t.Fatalf("reading a published quota, the server refused %d of %d, want at most two per process", r.r.refused, r.r.seen)
			}
		})
	}
}
