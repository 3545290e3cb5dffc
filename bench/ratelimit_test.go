package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/connectretry"
	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/httpretry"
	"github.com/rebound-go/rebound/serviceconfig"
)

// A rateScenario is issue 24's rate-limited API: a server that accepts
// limit requests per second with a burst of burst, and refuses the rest
// with a wait of wait seconds (HTTP 503 + Retry-After; gRPC and Connect
// RESOURCE_EXHAUSTED + grpc-retry-pushback-ms), driven by requests calls
// from workers goroutines, each call with its own deadline.
type rateScenario struct {
	limit    float64
	burst    int
	wait     int
	requests int
	workers  int
	deadline time.Duration
}

// issue24 is the scenario of issue 24, measured against a real reverse
// proxy's limiter.
var issue24 = rateScenario{limit: 20, burst: 2, wait: 1, requests: 200, workers: 20, deadline: 10 * time.Second}

// rateResult is one row: the calls that succeeded, and the requests the
// server saw.
type rateResult struct {
	succeeded int
	seen      int64
	elapsed   time.Duration
}

// limitedServer is the scenario's server in one protocol: its URL or
// address, and the count of requests it saw.
type limitedServer struct {
	addr string // host:port
	seen *atomic.Int64
}

// refuse reports whether the server's limiter refuses a request now, and
// counts it.
type limiterGate struct {
	lim  *rate.Limiter
	seen atomic.Int64
}

func (g *limiterGate) refuse() bool {
	g.seen.Add(1)
	return !g.lim.Allow()
}

func newLimiterGate(s rateScenario) *limiterGate {
	return &limiterGate{lim: rate.NewLimiter(rate.Limit(s.limit), s.burst)}
}

// startLimitedHTTP serves 200 OK within the limit, 503 + Retry-After: 1
// beyond it.
func startLimitedHTTP(tb testing.TB, s rateScenario) limitedServer {
	g := newLimiterGate(s)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if g.refuse() {
			w.Header().Set("Retry-After", strconv.Itoa(s.wait))
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	}))
	tb.Cleanup(srv.Close)
	return limitedServer{addr: srv.Listener.Addr().String(), seen: &g.seen}
}

// limitedGRPC is a TestService whose UnaryCall is behind the limiter.
type limitedGRPC struct {
	testpb.UnimplementedTestServiceServer
	g        *limiterGate
	pushback string
}

func (l *limitedGRPC) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	if l.g.refuse() {
		grpc.SetTrailer(ctx, metadata.Pairs("grpc-retry-pushback-ms", l.pushback))
		return nil, status.Error(codes.ResourceExhausted, "bench: rate limited")
	}
	return okReply, nil
}

func startLimitedGRPC(tb testing.TB, s rateScenario) limitedServer {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	g := newLimiterGate(s)
	srv := grpc.NewServer()
	testpb.RegisterTestServiceServer(srv, &limitedGRPC{g: g, pushback: strconv.Itoa(s.wait * 1000)})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	tb.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return limitedServer{addr: lis.Addr().String(), seen: &g.seen}
}

const connectProcedure = "/" + testService + "/UnaryCall"

func startLimitedConnect(tb testing.TB, s rateScenario) limitedServer {
	g := newLimiterGate(s)
	mux := http.NewServeMux()
	mux.Handle(connectProcedure, connect.NewUnaryHandler(connectProcedure,
		func(context.Context, *connect.Request[testpb.SimpleRequest]) (*connect.Response[testpb.SimpleResponse], error) {
			if g.refuse() {
				e := connect.NewError(connect.CodeResourceExhausted, errors.New("bench: rate limited"))
				e.Meta().Set("grpc-retry-pushback-ms", strconv.Itoa(s.wait*1000))
				return nil, e
			}
			return connect.NewResponse(okReply), nil
		}))
	srv := httptest.NewServer(mux)
	tb.Cleanup(srv.Close)
	return limitedServer{addr: srv.Listener.Addr().String(), seen: &g.seen}
}

// run makes the scenario's calls through call from its workers.
func (s rateScenario) run(call func(ctx context.Context) error) rateResult {
	var (
		next, ok atomic.Int64
		wg       sync.WaitGroup
	)
	// The workers start together, so that every row meets the same
	// first burst.
	ready := make(chan struct{})
	for range s.workers {
		wg.Go(func() {
			<-ready
			for next.Add(1) <= int64(s.requests) {
				ctx, cancel := context.WithTimeout(context.Background(), s.deadline)
				if call(ctx) == nil {
					ok.Add(1)
				}
				cancel()
			}
		})
	}
	start := time.Now()
	close(ready)
	wg.Wait()
	return rateResult{succeeded: int(ok.Load()), elapsed: time.Since(start)}
}

// rateClients are the rows of the comparison. Each makes the calls of one
// protocol against addr: none says it cannot.
type rateClient struct {
	name string
	http func(tb testing.TB, s rateScenario, addr string) func(ctx context.Context) error
	grpc func(tb testing.TB, s rateScenario, addr string) func(ctx context.Context) error
	conn func(tb testing.TB, s rateScenario, addr string) func(ctx context.Context) error
}

// httpBase is the plain transport every HTTP row sends through, with room
// for the workers' connections.
func httpBase(tb testing.TB, s rateScenario) *http.Transport {
	t := &http.Transport{MaxIdleConnsPerHost: s.workers}
	tb.Cleanup(t.CloseIdleConnections)
	return t
}

// httpGet makes one GET through rt and fails unless it is a 200.
func httpGet(ctx context.Context, rt http.RoundTripper, url string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return &awsErr{status: resp.StatusCode}
	}
	return nil
}

// grpcRetryConfig retries RESOURCE_EXHAUSTED up to 5 attempts (the most
// grpc-go allows); the server's pushback sets the delay.
func grpcRetryConfig(tb testing.TB) *serviceconfig.Config {
	cfg, err := serviceconfig.Parse([]byte(`{"methodConfig":[{"name":[{"service":"` + testService + `"}],"retryPolicy":{
		"maxAttempts":5,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,
		"retryableStatusCodes":["RESOURCE_EXHAUSTED"]}}]}`))
	if err != nil {
		tb.Fatal(err)
	}
	return cfg
}

func grpcConn(tb testing.TB, addr string, opts ...grpc.DialOption) testpb.TestServiceClient {
	cc, err := grpc.NewClient(addr, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cc.Close() })
	return testpb.NewTestServiceClient(cc)
}

func grpcCall(tc testpb.TestServiceClient) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		_, err := tc.UnaryCall(ctx, &testpb.SimpleRequest{})
		return toAWS(err)
	}
}

func connectClient(tb testing.TB, s rateScenario, addr string, opts ...connect.ClientOption) func(ctx context.Context) error {
	c := connect.NewClient[testpb.SimpleRequest, testpb.SimpleResponse](&http.Client{Transport: httpBase(tb, s)}, "http://"+addr+connectProcedure, opts...)
	return func(ctx context.Context) error {
		_, err := c.CallUnary(ctx, connect.NewRequest(&testpb.SimpleRequest{}))
		return toAWS(err)
	}
}

// awsErr is a refused request as the AWS SDKs see it: its HTTP status, and
// the throttling error code an AWS service returns for it ("SlowDown",
// S3's 503, and "Throttling" for RESOURCE_EXHAUSTED), so that the
// adaptive retryer knows it for a throttle.
type awsErr struct {
	status int
	err    error
}

func (e *awsErr) Error() string       { return fmt.Sprintf("bench: status %d: %v", e.status, e.err) }
func (e *awsErr) Unwrap() error       { return e.err }
func (e *awsErr) HTTPStatusCode() int { return e.status }
func (e *awsErr) ErrorCode() string {
	switch e.status {
	case http.StatusServiceUnavailable:
		return "SlowDown"
	case http.StatusTooManyRequests:
		return "Throttling"
	}
	return ""
}

// toAWS gives a RESOURCE_EXHAUSTED error the shape of an AWS throttle.
func toAWS(err error) error {
	if err == nil {
		return nil
	}
	if status.Code(err) == codes.ResourceExhausted || connect.CodeOf(err) == connect.CodeResourceExhausted {
		return &awsErr{status: http.StatusTooManyRequests, err: err}
	}
	return err
}

// awsDo makes one call through an AWS retryer as aws-sdk-go-v2's retry
// middleware (retry.Attempt) does: a send token before each attempt,
// the retry quota and the delay after a retryable failure.
func awsDo(ctx context.Context, r aws.RetryerV2, call func(context.Context) error) error {
	releaseRetry := func(error) error { return nil }
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		releaseAttempt, err := r.GetAttemptToken(ctx)
		if err != nil {
			return err
		}
		err = call(ctx)
		_ = releaseRetry(err)
		_ = releaseAttempt(err)
		if err == nil {
			return nil
		}
		if !r.IsErrorRetryable(err) || attempt >= r.MaxAttempts() {
			return err
		}
		if releaseRetry, err = r.GetRetryToken(ctx, err); err != nil {
			return err
		}
		d, err := r.RetryDelay(attempt, err)
		if err != nil {
			return err
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// awsAdaptive wraps call in one adaptive retryer, shared by the workers as
// an SDK client shares it.
func awsAdaptive(call func(context.Context) error) func(ctx context.Context) error {
	r := retry.NewAdaptiveMode()
	return func(ctx context.Context) error { return awsDo(ctx, r, call) }
}

// oracle paces call at the server's true rate, and never retries.
func oracle(s rateScenario, call func(context.Context) error) func(ctx context.Context) error {
	lim := rate.NewLimiter(rate.Limit(s.limit), 1)
	return func(ctx context.Context) error {
		if err := lim.Wait(ctx); err != nil {
			return err
		}
		return call(ctx)
	}
}

var rateClients = []rateClient{
	{
		name: "no retries",
		http: func(tb testing.TB, s rateScenario, addr string) func(ctx context.Context) error {
			base := httpBase(tb, s)
			return func(ctx context.Context) error { return httpGet(ctx, base, "http://"+addr+"/") }
		},
		grpc: func(tb testing.TB, _ rateScenario, addr string) func(ctx context.Context) error {
			return grpcCall(grpcConn(tb, addr))
		},
		conn: func(tb testing.TB, s rateScenario, addr string) func(ctx context.Context) error {
			return connectClient(tb, s, addr)
		},
	},
	{
		name: "rebound defaults",
		http: func(tb testing.TB, s rateScenario, addr string) func(ctx context.Context) error {
			rt := httpretry.NewTransport(httpBase(tb, s))
			return func(ctx context.Context) error { return httpGet(ctx, rt, "http://"+addr+"/") }
		},
		grpc: func(tb testing.TB, _ rateScenario, addr string) func(ctx context.Context) error {
			return grpcCall(grpcConn(tb, addr, grpcretry.DialOptions(grpcRetryConfig(tb))...))
		},
		conn: func(tb testing.TB, s rateScenario, addr string) func(ctx context.Context) error {
			i, err := connectretry.New(grpcRetryConfig(tb))
			if err != nil {
				tb.Fatal(err)
			}
			return connectClient(tb, s, addr, connect.WithInterceptors(i))
		},
	},
	{
		name: "aws-sdk-go-v2 adaptive",
		http: func(tb testing.TB, s rateScenario, addr string) func(ctx context.Context) error {
			base := httpBase(tb, s)
			return awsAdaptive(func(ctx context.Context) error { return httpGet(ctx, base, "http://"+addr+"/") })
		},
		grpc: func(tb testing.TB, _ rateScenario, addr string) func(ctx context.Context) error {
			return awsAdaptive(grpcCall(grpcConn(tb, addr)))
		},
		conn: func(tb testing.TB, s rateScenario, addr string) func(ctx context.Context) error {
			return awsAdaptive(connectClient(tb, s, addr))
		},
	},
	{
		name: "oracle at the true rate",
		http: func(tb testing.TB, s rateScenario, addr string) func(ctx context.Context) error {
			base := httpBase(tb, s)
			return oracle(s, func(ctx context.Context) error { return httpGet(ctx, base, "http://"+addr+"/") })
		},
		grpc: func(tb testing.TB, s rateScenario, addr string) func(ctx context.Context) error {
			return oracle(s, grpcCall(grpcConn(tb, addr)))
		},
		conn: func(tb testing.TB, s rateScenario, addr string) func(ctx context.Context) error {
			return oracle(s, connectClient(tb, s, addr))
		},
	},
	{
		name: "rebound adaptive rate limit",
		http: func(tb testing.TB, s rateScenario, addr string) func(ctx context.Context) error {
			rt := httpretry.NewTransport(httpBase(tb, s), httpretry.WithAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{}))
			return func(ctx context.Context) error { return httpGet(ctx, rt, "http://"+addr+"/") }
		},
		grpc: func(tb testing.TB, _ rateScenario, addr string) func(ctx context.Context) error {
			return grpcCall(grpcConn(tb, addr, grpcretry.DialOptions(grpcRetryConfig(tb),
				grpcretry.WithAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{}))...))
		},
		conn: func(tb testing.TB, s rateScenario, addr string) func(ctx context.Context) error {
			i, err := connectretry.New(grpcRetryConfig(tb), connectretry.WithAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{}))
			if err != nil {
				tb.Fatal(err)
			}
			return connectClient(tb, s, addr, connect.WithInterceptors(i))
		},
	},
}

// rateProtocols pairs each protocol's server with its rows' clients.
var rateProtocols = []struct {
	name   string
	start  func(testing.TB, rateScenario) limitedServer
	client func(rateClient) func(testing.TB, rateScenario, string) func(context.Context) error
}{
	{"http", startLimitedHTTP, func(c rateClient) func(testing.TB, rateScenario, string) func(context.Context) error { return c.http }},
	{"grpc", startLimitedGRPC, func(c rateClient) func(testing.TB, rateScenario, string) func(context.Context) error { return c.grpc }},
	{"connect", startLimitedConnect, func(c rateClient) func(testing.TB, rateScenario, string) func(context.Context) error { return c.conn }},
}

// runRow runs one row against a fresh server.
func runRow(tb testing.TB, s rateScenario, proto int, row rateClient) rateResult {
	p := rateProtocols[proto]
	srv := p.start(tb, s)
	call := p.client(row)(tb, s, srv.addr)
	r := s.run(call)
	r.seen = srv.seen.Load()
	return r
}

// BenchmarkRateLimitedAPI is issue 24's comparison: each row's calls
// against a fresh server limited to 20 requests/s with a burst of 2 (see
// rateScenario). It reports the calls that succeeded out of 200, the
// requests the server saw per call (load), and the run's seconds. Each
// row takes about 10 s; run it once:
//
//	go test -run='^$' -bench=RateLimitedAPI -benchtime=1x
func BenchmarkRateLimitedAPI(b *testing.B) {
	for pi, p := range rateProtocols {
		for _, row := range rateClients {
			b.Run(p.name+"/"+strings.ReplaceAll(row.name, " ", "_"), func(b *testing.B) {
				var r rateResult
				for range b.N {
					r = runRow(b, issue24, pi, row)
				}
				b.ReportMetric(float64(r.succeeded), "succeeded/200")
				b.ReportMetric(float64(r.seen)/float64(issue24.requests), "load")
				b.ReportMetric(r.elapsed.Seconds(), "s")
			})
		}
	}
}

// TestRateLimitedAPIRows runs every row of BenchmarkRateLimitedAPI on a
// small scenario (a tenth of a second of the server's limit, a server's
// wait of 0) and checks
// that each is wired alike: every call is made, and the server sees at
// least one request per call that succeeded.
func TestRateLimitedAPIRows(t *testing.T) {
	s := rateScenario{limit: 200, burst: 2, requests: 8, workers: 4, deadline: 2 * time.Second}
	for pi, p := range rateProtocols {
		for _, row := range rateClients {
			t.Run(p.name+"/"+row.name, func(t *testing.T) {
				t.Parallel()
				r := runRow(t, s, pi, row)
				if r.succeeded == 0 || r.seen < int64(r.succeeded) {
					t.Fatalf("%d calls succeeded, the server saw %d requests", r.succeeded, r.seen)
				}
			})
		}
	}
}
