package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
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
	"github.com/rebound-go/rebound/internal/fleetdemo"
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
	html             string
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
	fs.StringVar(&c.html, "html", "", "file to write a self-contained HTML report to: table, charts, config and conclusion")
	traceFile := fs.String("trace", "", "file to write the OpenTelemetry spans of one retried and one hedged call to, as JSON; their trees are printed")
	fleet := fs.Bool("fleet", false, "run the fleet scenario instead: hundreds of gRPC clients, each with its own adaptive throttle, against one server that sheds load (package shed)")
	var fc fleetdemo.Config
	fs.IntVar(&fc.Clients, "fleet-clients", 300, "-fleet: number of ClientConns, each with its own throttle")
	fs.IntVar(&fc.Rounds, "fleet-rounds", 12, "-fleet: rounds; every client makes one call per round")
	fs.IntVar(&fc.Limit, "fleet-limit", 16, "-fleet: the server's concurrency limit")
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
	if *fleet {
		fc.Seed = c.seed
		return runFleetDemo(ctx, fc, c.svg, stdout, stderr)
	}
	if err := c.validate(fs.NArg()); err != nil {
		fmt.Fprintf(stderr, "demo: %v\n", err)
		return 2
	}
	if err := demo(ctx, stdout, stderr, c); err != nil {
		fmt.Fprintf(stderr, "demo: %v\n", err)
		return 1
	}
	if err := writeDemoTrace(ctx, stdout, *traceFile); err != nil {
		fmt.Fprintf(stderr, "demo: -trace: %v\n", err)
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
	case c.duration*time.Duration(c.rate) < time.Second:
		return fmt.Errorf("-rate × -duration must make at least one call, got %d/s × %v", c.rate, c.duration)
	}
	for name, v := range map[string]float64{"error-rate": c.errorRate, "pushback-rate": c.pushbackRate, "straggler-rate": c.stragglerRate} {
		if err := rate(name, v); err != nil {
			return err
		}
	}
	return nil
}

// policy is one way of calling the server: a service config and the
// options beside it. The demo runs each entry of [demoPolicies] in turn;
// adding a policy is adding an entry.
type policy struct {
	name     string
	method   string // the method config's retryPolicy or hedgingPolicy, JSON
	throttle bool   // add retryThrottling
	adaptive *grpcretry.AdaptiveHedgingConfig
	// how says what the policy does about a failed or slow attempt, for
	// the closing paragraph: "<name> <how>".
	how string
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
		{name: "no retries", how: "makes one attempt per call"},
		{name: "A6 retry", method: retry, how: "retries a failed attempt up to 3 times after a backoff, with no budget"},
		{name: "retry + throttling", method: retry, throttle: true, how: "retries like A6 retry until failures drain the throttle's tokens"},
		{name: "hedging (20ms)", method: hedge, throttle: true, how: "sends another attempt when one has not answered in 20ms"},
		{name: "adaptive hedging", method: hedge, throttle: true, adaptive: &adaptive,
			how: fmt.Sprintf("sends another attempt when one is slower than the %.3gth percentile of recent calls",
				100*(1-0.9*adaptive.MaxExtraLoad))},
	}
}

// hedges reports whether the policy races attempts.
func (p policy) hedges() bool { return strings.Contains(p.method, "hedgingPolicy") }

// configJSON returns the service config the policy runs with.
func (p policy) configJSON() string {
	var parts []string
	if p.method != "" {
		parts = append(parts, `"methodConfig":[{"name":[{"service":"grpc.testing.TestService"}],`+p.method+`}]`)
	}
	if p.throttle {
		parts = append(parts, `"retryThrottling":{"maxTokens":10,"tokenRatio":0.5}`)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// describe returns the service config and any option beside it, on one
// line.
func (p policy) describe() string {
	s := p.configJSON()
	if a := p.adaptive; a != nil {
		s += fmt.Sprintf(" + WithAdaptiveHedging{MaxExtraLoad: %v, Window: %v, MinSamples: %d, Burst: %d}",
			a.MaxExtraLoad, a.Window, a.MinSamples, a.Burst)
	}
	return s
}

// serviceConfig returns the policy's parsed service config.
func (p policy) serviceConfig() (*serviceconfig.Config, error) {
	return serviceconfig.Parse([]byte(p.configJSON()))
}

// outcome is what one policy's run achieved.
type outcome struct {
	pol       policy
	calls     int
	ok        int
	attempts  int
	throttled int
	pushback  int
	// failedInOutage counts the failed calls that started during the
	// outage, when every attempt failed.
	failedInOutage int
	latencies      []time.Duration // sorted
	load           []int64         // server attempts per slice
	slice          time.Duration
	// hedgeDelay is the hedging delay the policy used at the end of the
	// run (0 if it does not hedge), and hedgeTimers how many hedge timers
	// that figure is the median of (0: the configured delay).
	hedgeDelay  time.Duration
	hedgeTimers int
}

func (o *outcome) quantile(q float64) time.Duration {
	if len(o.latencies) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(o.latencies)))) - 1
	return o.latencies[max(0, min(i, len(o.latencies)-1))]
}

func (o *outcome) successRate() float64 { return float64(o.ok) / float64(max(o.calls, 1)) }

func (o *outcome) attemptsPerCall() float64 { return float64(o.attempts) / float64(max(o.calls, 1)) }

// outageLoad is the server's mean attempts per second during the outage
// window [from, to), 0 if no slice lies in it.
func (o *outcome) outageLoad(from, to time.Duration) float64 {
	var sum int64
	n := 0
	for i, v := range o.load {
		if at := time.Duration(i) * o.slice; at >= from && at+o.slice <= to {
			sum += v
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return float64(sum) / (float64(n) * o.slice.Seconds())
}

func (c demoConfig) outageWindow() (from, to time.Duration) {
	from = c.duration * 4 / 10
	return from, from + c.outage
}

func demo(ctx context.Context, stdout, stderr io.Writer, c demoConfig) error {
	pols := demoPolicies(c)
	scenario := fmt.Sprintf("Fault-injecting grpc-go server on 127.0.0.1: %.0f%% UNAVAILABLE (%.0f%% of them with pushback), %v service time,\n"+
		"%.0f%% stragglers at %v, a %v outage 40%% into each run. %d calls/s for %v per policy, %v deadline.",
		100*c.errorRate, 100*c.pushbackRate, c.latency, 100*c.stragglerRate, c.stragglerLatency, c.outage, c.rate, c.duration, c.timeout)
	fmt.Fprintf(stdout, "%s\n\n", scenario)
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
	table := demoTable(results)
	writeTable(stdout, table)
	notes := []string{
		"attempts: attempts per call, hedges included; throttled: calls whose retry or hedge the A6 throttle refused; " +
			"pushback: calls the server's pushback stopped.",
		pushbackNote(c, results),
	}
	for _, n := range notes {
		fmt.Fprintf(stdout, "\n%s\n", wrap(n, 100))
	}
	fmt.Fprintln(stdout, "\nPolicies, with the service config each ran with:")
	var config []configLine
	for _, o := range results {
		config = append(config, configLine{o.pol.name, o.pol.describe()})
		fmt.Fprintf(stdout, "  %-20s %s\n", o.pol.name, o.pol.describe())
	}
	if line := hedgeDelayLine(c, results); line != "" {
		fmt.Fprintf(stdout, "\n%s\n", wrap(line, 100))
		notes = append(notes, line)
	}
	conclusion := demoConclusion(c, results)
	fmt.Fprintf(stdout, "\n%s\n", wrap(strings.Join(conclusion, " "), 100))

	charts := demoCharts(c, results)
	if c.svg != "" {
		if err := writeStacked(c.svg, charts...); err != nil {
			return fmt.Errorf("-svg: %w", err)
		}
		fmt.Fprintf(stdout, "\nChart (latency tail on log-log axes, server load over time): %s\n", c.svg)
	}
	if c.html != "" {
		r := htmlReport{
			Title: "rebound demo", Scenario: scenario, Tables: []htmlTable{{Caption: "Results", Rows: table}}, Notes: notes,
			Config: config, Conclusion: conclusion, Charts: charts,
		}
		if err := r.write(c.html); err != nil {
			return fmt.Errorf("-html: %w", err)
		}
		fmt.Fprintf(stdout, "Report (table, charts, config, conclusion): %s\n", c.html)
	}
	return nil
}

// demoTable returns the table of results, headings first.
func demoTable(results []*outcome) [][]string {
	t := [][]string{{"policy", "calls", "success", "p50", "p99", "p99.9", "attempts", "throttled", "pushback"}}
	for _, o := range results {
		t = append(t, []string{o.pol.name, strconv.Itoa(o.calls), fmt.Sprintf("%.2f%%", 100*o.successRate()),
			msString(o.quantile(0.5)), msString(o.quantile(0.99)), msString(o.quantile(0.999)),
			fmt.Sprintf("%.3fx", o.attemptsPerCall()), strconv.Itoa(o.throttled), strconv.Itoa(o.pushback)})
	}
	return t
}

// pushbackNote says why the pushback column reads as it does: the server,
// not the policy, decides how many answers say stop.
func pushbackNote(c demoConfig, results []*outcome) string {
	stopShare := c.errorRate * c.pushbackRate / 2 // "-1" is one of the two pushback values
	lo, hi, n := math.MaxInt, 0, 0
	for _, o := range results {
		if o.pol.method == "" {
			continue
		}
		lo, hi, n = min(lo, o.pushback), max(hi, o.pushback), n+1
	}
	if n == 0 {
		return ""
	}
	same := "the same for every policy that retries or hedges"
	if hi > lo {
		same = fmt.Sprintf("nearly the same for every policy that retries or hedges (%d to %d)", lo, hi)
	}
	if hi-lo > max(5, hi/4) {
		same = fmt.Sprintf("from %d to %d across the policies that retry or hedge", lo, hi)
	}
	return fmt.Sprintf("Pushback is %s: outside the outage the server tells %.1f%% of attempts to stop "+
		"(%.0f%% UNAVAILABLE × %.0f%% with pushback × half of those saying -1), each policy obeys it, and each "+
		"policy's server draws its faults from the same seeded sequence. It counts the server's answers, not a policy's choice; "+
		"with no retries there is nothing to stop.", same, 100*stopShare, 100*c.errorRate, 100*c.pushbackRate)
}

// hedgeDelayLine reports the hedging delay each adaptive policy settled on.
func hedgeDelayLine(c demoConfig, results []*outcome) string {
	var lines []string
	for _, o := range results {
		a := o.pol.adaptive
		if a == nil {
			continue
		}
		if o.hedgeTimers == 0 {
			lines = append(lines, fmt.Sprintf("%s kept the configured hedging delay, %v: fewer than %d calls succeeded within its %v window.",
				o.pol.name, o.hedgeDelay, a.MinSamples, a.Window))
			continue
		}
		lines = append(lines, fmt.Sprintf("%s settled on a hedging delay of %s (the median of the %d hedge timers it armed "+
			"in the last quarter of its run; it starts from the configured delay until %d calls have succeeded).",
			o.pol.name, msString(o.hedgeDelay), o.hedgeTimers, a.MinSamples))
	}
	return strings.Join(lines, " ")
}

func msString(d time.Duration) string {
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}

// timerLog is a [rebound.Clock] on real time that notes every timer made
// on it. Under a hedging policy these are the hedge timers (and the rare
// pushback delay), so their durations are the hedging delays the client
// chose: this is how the demo sees the delay that adaptive hedging settled
// on. It is safe for concurrent use.
type timerLog struct {
	start time.Time
	mu    sync.Mutex
	armed []armedTimer
}

type armedTimer struct{ at, d time.Duration }

func (l *timerLog) Now() time.Time { return time.Now() }

func (l *timerLog) NewTimer(d time.Duration) rebound.Timer {
	l.mu.Lock()
	l.armed = append(l.armed, armedTimer{time.Since(l.start), d})
	l.mu.Unlock()
	return rebound.RealClock().NewTimer(d)
}

// settled returns the median duration of the timers armed from from on,
// and how many there were.
func (l *timerLog) settled(from time.Duration) (time.Duration, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ds []time.Duration
	for _, t := range l.armed {
		if t.at >= from {
			ds = append(ds, t.d)
		}
	}
	if len(ds) == 0 {
		return 0, 0
	}
	slices.Sort(ds)
	return ds[(len(ds)-1)/2], len(ds)
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
	outFrom, outTo := c.outageWindow()
	if c.outage > 0 {
		faults.Outages = []chaos.Window{{Start: outFrom, End: outTo}}
	}
	slice := max(c.duration/80, time.Millisecond)
	srv, err := chaos.Start(faults, c.seed, slice)
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	timers := &timerLog{start: time.Now()}
	var opts []grpcretry.Option
	if p.adaptive != nil {
		opts = append(opts, grpcretry.WithAdaptiveHedging(*p.adaptive), grpcretry.WithClock(timers))
	}
	client, err := grpcretry.New(cfg, opts...)
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
	// into a flood of calls. Call i is due at i/rate; one that comes due
	// while the machine is busy starts late rather than not at all, so
	// every policy makes the same calls.
	o := &outcome{pol: p, slice: slice}
	var mu sync.Mutex
	var wg sync.WaitGroup
	n := int(c.duration * time.Duration(c.rate) / time.Second)
	timer := time.NewTimer(0)
	defer timer.Stop()
	start := time.Now()
calls:
	for i := range n {
		at := time.Duration(i) * time.Second / time.Duration(c.rate)
		if d := time.Until(start.Add(at)); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				break calls
			}
		}
		inOutage := c.outage > 0 && at >= outFrom && at < outTo
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := call(ctx, tc, c.timeout)
			mu.Lock()
			defer mu.Unlock()
			o.add(r, inOutage)
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	slices.Sort(o.latencies)
	o.load = srv.Load()
	if p.hedges() {
		o.hedgeDelay = cfg.MethodConfigs[0].HedgingPolicy.HedgingDelay
	}
	if p.adaptive != nil {
		if d, n := timers.settled(c.duration * 3 / 4); n > 0 {
			o.hedgeDelay, o.hedgeTimers = d, n
		}
	}
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

func (o *outcome) add(r callResult, inOutage bool) {
	o.calls++
	o.attempts += r.attempts
	o.latencies = append(o.latencies, r.latency)
	if r.ok {
		o.ok++
	} else if inOutage {
		o.failedInOutage++
	}
	if r.throttled {
		o.throttled++
	}
	if r.pushback {
		o.pushback++
	}
}

// demoCharts returns the latency tail of every policy, on log-log axes with
// the percentiles marked, and the server's load over time.
func demoCharts(c demoConfig, results []*outcome) []*svgplot.Chart {
	tail := &svgplot.Chart{
		Title:  "Latency tail: the fraction of calls slower than x, per policy",
		XLabel: "call latency (ms, log scale; failed calls included)",
		YLabel: "fraction of calls slower (log scale)",
		XLog:   true, YLog: true,
		Marks: []svgplot.Mark{
			{Horizontal: true, Value: 0.1, Label: "p90"},
			{Horizontal: true, Value: 0.01, Label: "p99"},
			{Horizontal: true, Value: 0.001, Label: "p99.9"},
		},
	}
	for _, o := range results {
		tail.Series = append(tail.Series, svgplot.Series{Name: o.pol.name, Points: ccdf(o.latencies)})
		if o.pol.hedges() && o.hedgeDelay > 0 {
			what := "hedge"
			if o.pol.adaptive != nil {
				what = "adaptive hedge"
			}
			tail.Marks = append(tail.Marks, svgplot.Mark{Value: ms(o.hedgeDelay), Label: what + " " + msString(o.hedgeDelay)})
		}
	}
	tail.Marks = slices.CompactFunc(tail.Marks, func(a, b svgplot.Mark) bool { return a.Value == b.Value && a.Horizontal == b.Horizontal })
	load := &svgplot.Chart{Title: "Server load over time", XLabel: "time (s)", YLabel: "attempts/s"}
	if c.outage > 0 {
		from, to := c.outageWindow()
		load.Bands = []svgplot.Band{{From: from.Seconds(), To: to.Seconds(), Label: "outage"}}
	}
	for _, o := range results {
		s := svgplot.Series{Name: o.pol.name}
		for i, v := range o.load {
			s.Points = append(s.Points, svgplot.Point{X: (float64(i) + 0.5) * o.slice.Seconds(), Y: float64(v) / o.slice.Seconds()})
		}
		load.Series = append(load.Series, s)
	}
	return []*svgplot.Chart{tail, load}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// ccdf returns the complementary CDF of sorted latencies: at each latency,
// the fraction of calls that took at least that long. Every point of the
// last 200 is kept, since they make the tail; before them, about 300 evenly
// spaced ones.
func ccdf(sorted []time.Duration) []svgplot.Point {
	n := len(sorted)
	step := max(1, (n-200)/300)
	var pts []svgplot.Point
	for i := 0; i < n; i++ {
		if n-i > 200 && i%step != 0 {
			continue
		}
		pts = append(pts, svgplot.Point{X: ms(sorted[i]), Y: float64(n-i) / float64(n)})
	}
	return pts
}

func writeStacked(path string, charts ...*svgplot.Chart) error {
	var b bytes.Buffer
	if _, err := svgplot.WriteStacked(&b, charts...); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// demoConclusion explains the results in a few sentences: which policy
// won on success rate, on p99 latency and on extra load, and why, from
// the measured numbers. The policy without retry or hedging policy, if
// any, is the yardstick.
func demoConclusion(c demoConfig, results []*outcome) []string {
	if len(results) == 0 {
		return nil
	}
	var base *outcome
	var others []*outcome
	for _, o := range results {
		if o.pol.method == "" && base == nil {
			base = o
		} else {
			others = append(others, o)
		}
	}
	names := func(os []*outcome) string {
		var s []string
		for _, o := range os {
			s = append(s, o.pol.name)
		}
		return joinAnd(s)
	}
	pick := func(idx []int) []*outcome {
		var out []*outcome
		for _, i := range idx {
			out = append(out, results[i])
		}
		return out
	}
	var out []string

	// Success rate: higher wins; half a point apart is a tie.
	won := pick(leaders(len(results), func(i int) float64 { return results[i].successRate() }, true, 0.005))
	w := won[0]
	switch {
	case base != nil && len(won) == len(results):
		out = append(out, fmt.Sprintf("On success rate no policy beat no retries: all were within half a point of %.1f%%.", 100*w.successRate()))
	default:
		s := fmt.Sprintf("On success rate %s won with %.1f%% of calls succeeding", names(won), 100*w.successRate())
		if len(won) > 1 {
			s = fmt.Sprintf("On success rate %s tied at about %.1f%% of calls succeeding", names(won), 100*w.successRate())
		}
		if base != nil && w != base {
			s += fmt.Sprintf(", against %.1f%% with no retries: %s %s", 100*base.successRate(), w.pol.name, w.pol.how)
		}
		out = append(out, s+".")
		if failed := w.calls - w.ok; failed > 0 {
			// Why retrying stopped is one reason per call; when the call
			// started is another view of the same calls.
			var why []string
			if w.throttled > 0 {
				why = append(why, fmt.Sprintf("%d had a retry or hedge refused by the throttle", w.throttled))
			}
			if w.pushback > 0 {
				why = append(why, fmt.Sprintf("%d were told to stop by the server", w.pushback))
			}
			if rest := failed - w.throttled - w.pushback; rest > 0 {
				why = append(why, fmt.Sprintf("%d ran out of attempts or time", rest))
			}
			s := fmt.Sprintf("Of its %d failed calls, %s", failed, joinAnd(why))
			if w.failedInOutage > 0 {
				s += fmt.Sprintf("; %d of the %d started during the %v outage", w.failedInOutage, failed, c.outage)
			}
			out = append(out, s+".")
		}
	}

	// p99 latency: lower wins; within 5% of the best (or 1ms) is a tie.
	p99s := func(i int) float64 { return ms(results[i].quantile(0.99)) }
	best := p99s(leaders(len(results), p99s, false, 0)[0])
	won = pick(leaders(len(results), p99s, false, max(1, best/20)))
	w = won[0]
	p99 := w.quantile(0.99)
	s := fmt.Sprintf("On p99 latency %s won with %s", names(won), msString(p99))
	if len(won) > 1 {
		s = fmt.Sprintf("On p99 latency %s tied at about %s", names(won), msString(p99))
	}
	if base != nil && w != base {
		bp := base.quantile(0.99)
		s += fmt.Sprintf(", against %s with no retries", msString(bp))
		if c.stragglerRate > 0.01 && bp >= c.stragglerLatency {
			s += fmt.Sprintf(": %.0f%% of attempts stall for %v, so at p99 a call that does not race a second attempt waits for a stalled one", 100*c.stragglerRate, c.stragglerLatency)
		}
		s += fmt.Sprintf("; %s %s", w.pol.name, w.pol.how)
		if w.pol.hedges() && w.hedgeDelay > 0 {
			s += fmt.Sprintf(" (here %s)", msString(w.hedgeDelay))
		}
	}
	out = append(out, s+".")

	// Extra load, among the policies that retry or hedge: no retries adds
	// none by definition.
	if len(others) > 0 {
		idx := leaders(len(others), func(i int) float64 { return -others[i].attemptsPerCall() }, true, 0.01)
		var won []*outcome
		for _, i := range idx {
			won = append(won, others[i])
		}
		w := won[0]
		worst := slices.MaxFunc(others, func(a, b *outcome) int { return cmpFloat(a.attemptsPerCall(), b.attemptsPerCall()) })
		s := fmt.Sprintf("Of the policies that retry or hedge, %s added the least load, %.3f extra attempts per call", names(won), w.attemptsPerCall()-1)
		if worst.attemptsPerCall()-w.attemptsPerCall() > 0.01 {
			s += fmt.Sprintf(" against %.3f for %s", worst.attemptsPerCall()-1, worst.pol.name)
		}
		if w.throttled > 0 {
			s += fmt.Sprintf(": its throttle refused the retries or hedges of %d calls once failures had drained its tokens", w.throttled)
		}
		out = append(out, s+".")
		if from, to := c.outageWindow(); c.outage > 0 && base != nil {
			if b := base.outageLoad(from, to); b > 0 && worst != w {
				out = append(out, fmt.Sprintf("During the outage %s sent %.1f× the attempts of no retries, %s %.1f×: "+
					"a budget keeps a failing server from being hit harder the longer it fails.",
					worst.pol.name, worst.outageLoad(from, to)/b, w.pol.name, w.outageLoad(from, to)/b))
			}
		}
	}
	return out
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
