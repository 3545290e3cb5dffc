package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/grpcretry"
	"github.com/rebound-go/rebound/internal/chaos"
	"github.com/rebound-go/rebound/internal/svgplot"
	"github.com/rebound-go/rebound/serviceconfig"
)

// demoConfig holds the demo's flags.
type demoConfig struct {
	duration         time.Duration // per policy
	rate             int           // calls started per second
	errorRate        float64
	pushbackRate     float64
	latency          time.Duration
	stragglerRate    float64
	stragglerLatency time.Duration
	outage           time.Duration
	timeout          time.Duration
	seed             uint64
	svg              string
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c demoConfig
	fs.DurationVar(&c.duration, "duration", 4*time.Second, "how long each policy runs")
	fs.IntVar(&c.rate, "rate", 400, "calls started per second, whatever the server does (an open workload)")
	fs.Float64Var(&c.errorRate, "error-rate", 0.1, "fraction of attempts failing with UNAVAILABLE, in [0, 1]")
	fs.Float64Var(&c.pushbackRate, "pushback-rate", 0.2, "fraction of failures carrying server pushback (10ms or stop), in [0, 1]")
	fs.DurationVar(&c.latency, "latency", time.Millisecond, "service time of a normal attempt")
	fs.Float64Var(&c.stragglerRate, "straggler-rate", 0.03, "fraction of attempts that stall, in [0, 1]")
	fs.DurationVar(&c.stragglerLatency, "straggler-latency", 150*time.Millisecond, "service time of a stalled attempt")
	fs.DurationVar(&c.outage, "outage", 600*time.Millisecond, "length of the outage in each run, starting at 40% of it (0 for none)")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Second, "deadline of each call")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the server's fault draws")
	fs.StringVar(&c.svg, "svg", "rebound-demo.svg", `file to write the SVG chart to ("" for none)`)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: rebound demo [flags]")
		fmt.Fprintln(stderr, "\nRuns the same workload against a fault-injecting grpc-go server on 127.0.0.1 through")
		fmt.Fprintln(stderr, "five policies and compares what they achieved.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if err := c.validate(fs.NArg()); err != nil {
		fmt.Fprintf(stderr, "demo: %v\n", err)
		return 2
	}
	if err := demo(ctx, stdout, stderr, c); err != nil {
		fmt.Fprintf(stderr, "demo: %v\n", err)
		return 1
	}
	return 0
}

func (c demoConfig) validate(extra int) error {
	rate := func(name string, v float64) error {
		if !(v >= 0 && v <= 1) {
			return fmt.Errorf("-%s must be in [0, 1], got %v", name, v)
		}
		return nil
	}
	switch {
	case extra > 0:
		return errors.New("unexpected arguments")
	case c.duration < 50*time.Millisecond || c.duration > 10*time.Minute:
		return fmt.Errorf("-duration must be in [50ms, 10m], got %v", c.duration)
	case c.rate < 1 || c.rate > 20000:
		return fmt.Errorf("-rate must be in [1, 20000], got %d", c.rate)
	case c.latency < 0 || c.latency > time.Minute:
		return fmt.Errorf("-latency must be in [0, 1m], got %v", c.latency)
	case c.stragglerLatency < 0 || c.stragglerLatency > time.Minute:
		return fmt.Errorf("-straggler-latency must be in [0, 1m], got %v", c.stragglerLatency)
	case c.outage < 0 || c.outage > c.duration*6/10:
		return fmt.Errorf("-outage must be in [0, 60%% of -duration], got %v", c.outage)
	case c.timeout <= 0 || c.timeout > time.Minute:
		return fmt.Errorf("-timeout must be in (0, 1m], got %v", c.timeout)
	}
	for name, v := range map[string]float64{"error-rate": c.errorRate, "pushback-rate": c.pushbackRate, "straggler-rate": c.stragglerRate} {
		if err := rate(name, v); err != nil {
			return err
		}
	}
	return nil
}

// policy is one way of calling the server.
type policy struct {
	name     string
	method   string // the method config's retryPolicy or hedgingPolicy, JSON
	throttle bool   // add retryThrottling
	opts     []grpcretry.Option
}

func demoPolicies(c demoConfig) []policy {
	const (
		retry = `"retryPolicy":{"maxAttempts":4,"initialBackoff":"0.01s","maxBackoff":"0.1s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}`
		hedge = `"hedgingPolicy":{"maxAttempts":3,"hedgingDelay":"0.02s","nonFatalStatusCodes":["UNAVAILABLE"]}`
	)
	adaptive := grpcretry.DefaultAdaptiveHedging()
	adaptive.Window = c.duration
	adaptive.MinSamples = 50
	return []policy{
		{name: "no retries"},
		{name: "A6 retry", method: retry},
		{name: "retry + throttling", method: retry, throttle: true},
		{name: "hedging (20ms)", method: hedge, throttle: true},
		{name: "adaptive hedging", method: hedge, throttle: true, opts: []grpcretry.Option{grpcretry.WithAdaptiveHedging(adaptive)}},
	}
}

// serviceConfig returns the policy's service config.
func (p policy) serviceConfig() (*serviceconfig.Config, error) {
	var parts []string
	if p.method != "" {
		parts = append(parts, `"methodConfig":[{"name":[{"service":"grpc.testing.TestService"}],`+p.method+`}]`)
	}
	if p.throttle {
		parts = append(parts, `"retryThrottling":{"maxTokens":10,"tokenRatio":0.5}`)
	}
	return serviceconfig.Parse([]byte("{" + strings.Join(parts, ",") + "}"))
}

// outcome is what one policy's run achieved.
type outcome struct {
	policy    string
	calls     int
	ok        int
	attempts  int
	throttled int
	pushback  int
	latencies []time.Duration // sorted
	load      []int64         // server attempts per slice
	slice     time.Duration
}

func (o *outcome) quantile(q float64) time.Duration {
	if len(o.latencies) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(o.latencies)))) - 1
	return o.latencies[max(0, min(i, len(o.latencies)-1))]
}

func demo(ctx context.Context, stdout, stderr io.Writer, c demoConfig) error {
	pols := demoPolicies(c)
	fmt.Fprintf(stdout, "Fault-injecting grpc-go server on 127.0.0.1: %.0f%% UNAVAILABLE (%.0f%% of them with pushback), %v service time,\n",
		100*c.errorRate, 100*c.pushbackRate, c.latency)
	fmt.Fprintf(stdout, "%.0f%% stragglers at %v, a %v outage 40%% into each run. %d calls/s for %v per policy, %v deadline.\n\n",
		100*c.stragglerRate, c.stragglerLatency, c.outage, c.rate, c.duration, c.timeout)
	var results []*outcome
	for i, p := range pols {
		fmt.Fprintf(stderr, "[%d/%d] %s: running for %v...\n", i+1, len(pols), p.name, c.duration)
		o, err := runPolicy(ctx, c, p)
		if err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		fmt.Fprintf(stderr, "[%d/%d] %s: %d calls\n", i+1, len(pols), p.name, o.calls)
		results = append(results, o)
	}
	fmt.Fprintf(stdout, "%-20s %7s %8s %9s %9s %9s %9s %9s %9s\n", "policy", "calls", "success", "p50", "p99", "p99.9", "attempts", "throttled", "pushback")
	for _, o := range results {
		fmt.Fprintf(stdout, "%-20s %7d %7.2f%% %9s %9s %9s %8.3fx %9d %9d\n", o.policy, o.calls, 100*float64(o.ok)/float64(max(o.calls, 1)),
			msString(o.quantile(0.5)), msString(o.quantile(0.99)), msString(o.quantile(0.999)),
			float64(o.attempts)/float64(max(o.calls, 1)), o.throttled, o.pushback)
	}
	fmt.Fprintln(stdout, "\nattempts: attempts per call, hedges included; throttled: calls whose retry or hedge the A6")
	fmt.Fprintln(stdout, "throttle refused; pushback: calls the server's pushback stopped.")
	if c.svg != "" {
		if err := writeDemoSVG(c, results); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "\nChart (latency CDF, server load over time): %s\n", c.svg)
	}
	return nil
}

func msString(d time.Duration) string {
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}

// runPolicy runs the workload through one policy against a server of its
// own, so that every policy meets the same faults at the same times.
func runPolicy(ctx context.Context, c demoConfig, p policy) (*outcome, error) {
	cfg, err := p.serviceConfig()
	if err != nil {
		return nil, err
	}
	faults := chaos.Faults{
		ErrorRate:        c.errorRate,
		PushbackRate:     c.pushbackRate,
		PushbackValues:   []string{"10", "-1"},
		Latency:          c.latency,
		StragglerRate:    c.stragglerRate,
		StragglerLatency: c.stragglerLatency,
	}
	if c.outage > 0 {
		start := c.duration * 4 / 10
		faults.Outages = []chaos.Window{{Start: start, End: start + c.outage}}
	}
	slice := max(c.duration/80, time.Millisecond)
	srv, err := chaos.Start(faults, c.seed, slice)
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	client, err := grpcretry.New(cfg, p.opts...)
	if err != nil {
		return nil, err
	}
	cc, err := grpc.NewClient(srv.Addr, append(client.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	tc := testpb.NewTestServiceClient(cc)

	// An open workload: calls start at a fixed rate whatever the server
	// does, as real traffic would, so a fast-failing outage does not turn
	// into a flood of calls.
	o := &outcome{policy: p.name, slice: slice}
	var mu sync.Mutex
	var wg sync.WaitGroup
	interval := time.Second / time.Duration(c.rate)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	end := time.Now().Add(c.duration)
	for now := time.Now(); now.Before(end); {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := call(ctx, tc, c.timeout)
			mu.Lock()
			defer mu.Unlock()
			o.add(r)
		}()
		select {
		case now = <-tick.C:
		case <-ctx.Done():
			now = end
		}
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	slices.Sort(o.latencies)
	o.load = srv.Load()
	return o, nil
}

// callResult is one call's outcome.
type callResult struct {
	latency             time.Duration
	attempts            int
	ok                  bool
	throttled, pushback bool
}

func call(ctx context.Context, tc testpb.TestServiceClient, timeout time.Duration) callResult {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	var r callResult
	_, err := tc.UnaryCall(ctx, &testpb.SimpleRequest{}, grpcretry.CountAttempts(&r.attempts))
	r.latency = time.Since(start)
	r.ok = status.Code(err) == codes.OK
	var ge *rebound.Error
	if errors.As(err, &ge) {
		r.throttled = errors.Is(ge.Reason, rebound.ErrThrottled)
		r.pushback = errors.Is(ge.Reason, rebound.ErrPushback)
	}
	return r
}

func (o *outcome) add(r callResult) {
	o.calls++
	o.attempts += r.attempts
	o.latencies = append(o.latencies, r.latency)
	if r.ok {
		o.ok++
	}
	if r.throttled {
		o.throttled++
	}
	if r.pushback {
		o.pushback++
	}
}

func writeDemoSVG(c demoConfig, results []*outcome) error {
	cdf := &svgplot.Chart{Title: "Latency CDF per policy (clipped at p99.9 of no retries ×1.5)", XLabel: "latency (ms)", YLabel: "fraction of calls"}
	limit := 1.5 * float64(results[0].quantile(0.999)) / float64(time.Millisecond)
	for _, o := range results {
		s := svgplot.Series{Name: o.policy}
		step := max(1, len(o.latencies)/400)
		for i := 0; i < len(o.latencies); i += step {
			x := float64(o.latencies[i]) / float64(time.Millisecond)
			if limit > 0 && x > limit {
				break
			}
			s.Points = append(s.Points, svgplot.Point{X: x, Y: float64(i+1) / float64(len(o.latencies))})
		}
		cdf.Series = append(cdf.Series, s)
	}
	load := &svgplot.Chart{Title: "Server load over time", XLabel: "time (s)", YLabel: "attempts/s"}
	if c.outage > 0 {
		start := (c.duration * 4 / 10).Seconds()
		load.Bands = []svgplot.Band{{From: start, To: start + c.outage.Seconds(), Label: "outage"}}
	}
	for _, o := range results {
		s := svgplot.Series{Name: o.policy}
		for i, v := range o.load {
			s.Points = append(s.Points, svgplot.Point{X: (float64(i) + 0.5) * o.slice.Seconds(), Y: float64(v) / o.slice.Seconds()})
		}
		load.Series = append(load.Series, s)
	}
	f, err := os.Create(c.svg)
	if err != nil {
		return err
	}
	if _, err := svgplot.WriteStacked(f, cdf, load); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
