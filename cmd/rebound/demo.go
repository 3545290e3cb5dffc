package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
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
	trace            string
}

var demoHelp = help{
	name:  "demo",
	usage: "rebound demo [flags]",
	about: `Runs the same workload against a fault-injecting grpc-go server on 127.0.0.1
through five policies (no retries, A6 retry, retry + throttling, hedging,
adaptive hedging) and compares what they achieved: a table, the service
config each ran with, a conclusion drawn from the numbers, the latency tail
and the server's load as an SVG (-svg), and all of it on one page (-html).

Calls start on a clock, -rate a second, whatever the server does. A call the
machine is too busy to start on time starts late rather than not at all, so
that every policy makes the same calls; the demo counts the late starts and
marks when they happened with a strip along the bottom of the load chart,
where their attempts arrive bunched together.

-trace writes the spans of one retried and one hedged call and prints them
as trees.

-fleet runs another scenario instead: hundreds of gRPC clients, each with
its own adaptive throttle, against one server that sheds load (package
shed). Only -fleet-clients, -fleet-rounds, -fleet-limit, -seed, -svg and
-html apply to it.`,
}

// demoOnly and fleetOnly are the flags that apply only without -fleet, and
// only with it.
var (
	demoOnly  = []string{"duration", "rate", "error-rate", "pushback-rate", "latency", "straggler-rate", "straggler-latency", "outage", "timeout", "trace"}
	fleetOnly = []string{"fleet-clients", "fleet-rounds", "fleet-limit"}
)

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := demoHelp.newFlagSet()
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
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the server's fault draws (with -fleet: of the clients' throttles)")
	fs.StringVar(&c.svg, "svg", "rebound-demo.svg", `file to write the SVG charts to ("" for none); with -fleet the default is rebound-fleet.svg`)
	fs.StringVar(&c.html, "html", "", "file to write a self-contained HTML report to: table, charts, config and conclusion")
	fs.StringVar(&c.trace, "trace", "", "file to write the OpenTelemetry spans of one retried and one hedged call to, as one JSON array of spans; their trees are printed")
	fleet := fs.Bool("fleet", false, "run the fleet scenario instead: hundreds of gRPC clients, each with its own adaptive throttle, against one server that sheds load (package shed)")
	var fc fleetdemo.Config
	fs.IntVar(&fc.Clients, "fleet-clients", 300, "-fleet: number of ClientConns, each with its own throttle")
	fs.IntVar(&fc.Rounds, "fleet-rounds", 12, "-fleet: rounds; every client makes one call per round")
	fs.IntVar(&fc.Limit, "fleet-limit", 16, "-fleet: the server's concurrency limit")
	if code, ok := demoHelp.parse(fs, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return demoHelp.fail(stderr, "unexpected argument %q", fs.Arg(0))
	}
	set := setFlags(fs)
	if *fleet {
		for _, name := range demoOnly {
			if set[name] {
				return demoHelp.fail(stderr, "-%s does not apply to -fleet", name)
			}
		}
		if !set["svg"] {
			c.svg = "rebound-fleet.svg"
		}
		fc.Seed = c.seed
		return runFleetDemo(ctx, fc, c.svg, c.html, stdout, stderr)
	}
	for _, name := range fleetOnly {
		if set[name] {
			return demoHelp.fail(stderr, "-%s applies only with -fleet", name)
		}
	}
	if err := c.validate(); err != nil {
		return demoHelp.fail(stderr, "%v", err)
	}
	if err := checkOutputs(map[string]string{"svg": c.svg, "html": c.html, "trace": c.trace}); err != nil {
		return demoHelp.fail(stderr, "%v", err)
	}
	if err := demo(ctx, stdout, stderr, c); err != nil {
		fmt.Fprintf(stderr, "rebound demo: %v\n", err)
		return 1
	}
	if err := writeDemoTrace(ctx, stdout, c.trace); err != nil {
		fmt.Fprintf(stderr, "rebound demo: -trace: %v\n", err)
		return 1
	}
	return 0
}

// checkOutputs checks that each flag's file, if any, can be written, and
// names the first flag whose cannot.
func checkOutputs(files map[string]string) error {
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if path := files[name]; path != "" {
			if err := checkWritable(path); err != nil {
				return fmt.Errorf("-%s: %w", name, err)
			}
		}
	}
	return nil
}

func (c demoConfig) validate() error {
	rate := func(name string, v float64) error {
		if !(v >= 0 && v <= 1) {
			return fmt.Errorf("-%s must be in [0, 1], got %v", name, v)
		}
		return nil
	}
	switch {
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
	// late are the calls that started more than lateAfter after they
	// were due, each as the stretch from when it was due to when it
	// started, in time from the start of the run.
	late []span
	// hedgeDelay is the hedging delay the policy used at the end of the
	// run (0 if it does not hedge), and hedgeTimers how many hedge timers
	// that figure is the median of (0: the configured delay).
	hedgeDelay  time.Duration
	hedgeTimers int
}

// span is a stretch of a run, from its start.
type span struct{ from, to time.Duration }

// lateAfter is how late a call may start before the demo counts it as
// started late: half a slice of the load chart, by which its attempts
// begin to land in a later slice than they should.
func lateAfter(slice time.Duration) time.Duration { return max(slice/2, 2*time.Millisecond) }

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

// demoScenario describes the run in one paragraph.
func demoScenario(c demoConfig) string {
	return fmt.Sprintf("Fault-injecting grpc-go server on 127.0.0.1: %.0f%% UNAVAILABLE (%.0f%% of them with pushback), %v service time, "+
		"%.0f%% stragglers at %v, a %v outage 40%% into each run. %d calls/s for %v per policy, %v deadline.",
		100*c.errorRate, 100*c.pushbackRate, c.latency, 100*c.stragglerRate, c.stragglerLatency, c.outage, c.rate, c.duration, c.timeout)
}

func demo(ctx context.Context, stdout, stderr io.Writer, c demoConfig) error {
	pols := demoPolicies(c)
	scenario := demoScenario(c)
	fmt.Fprintf(stdout, "%s\n\n", wrap(scenario, 100))
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
	if line := lateNote(results); line != "" {
		notes = append(notes, line)
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
	concl := demoConclusion(c, results)
	fmt.Fprintln(stdout)
	concl.print(stdout)

	charts := demoCharts(c, results)
	if c.svg != "" {
		if err := writeFigures(c.svg, charts...); err != nil {
			return fmt.Errorf("-svg: %w", err)
		}
		fmt.Fprintf(stdout, "\nChart (latency tail on log-log axes, server load over time): %s\n", c.svg)
	}
	if c.html != "" {
		r := htmlReport{
			Title: "rebound demo", Scenario: []string{scenario}, Tables: []htmlTable{{Caption: "Results", Rows: table}}, Notes: notes,
			Config: config, Conclusion: concl, Charts: charts,
		}
		if err := r.write(c.html); err != nil {
			return fmt.Errorf("-html: %w", err)
		}
		fmt.Fprintf(stdout, "Report (table, charts, config, conclusion): %s\n", c.html)
	}
	return nil
}

// pct formats a share of calls, in the table and the conclusion alike.
func pct(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }

// perCall formats attempts per call, in the table and the conclusion alike.
func perCall(v float64) string { return fmt.Sprintf("%.3fx", v) }

// demoTable returns the table of results, headings first.
func demoTable(results []*outcome) [][]string {
	t := [][]string{{"policy", "calls", "success", "p50", "p99", "p99.9", "attempts", "throttled", "pushback"}}
	for _, o := range results {
		t = append(t, []string{o.pol.name, strconv.Itoa(o.calls), pct(o.successRate()),
			msString(o.quantile(0.5)), msString(o.quantile(0.99)), msString(o.quantile(0.999)),
			perCall(o.attemptsPerCall()), strconv.Itoa(o.throttled), strconv.Itoa(o.pushback)})
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

// lateNote reports the calls that started late, if any: the machine was
// too busy to start them when they were due.
func lateNote(results []*outcome) string {
	total, late := 0, 0
	var worst time.Duration
	var who []string
	for _, o := range results {
		total += o.calls
		late += len(o.late)
		for _, s := range o.late {
			worst = max(worst, s.to-s.from)
		}
		if len(o.late) > 0 {
			who = append(who, fmt.Sprintf("%s %d", o.pol.name, len(o.late)))
		}
	}
	if late == 0 {
		return ""
	}
	return fmt.Sprintf("The machine was busy: %d of %d calls started more than %s after they were due, at most %s late (%s). "+
		"Their attempts reached the server bunched together, so the load chart marks when, with an orange strip along its bottom: "+
		"a spike above it is the load generator catching up, not the policy.",
		late, total, msString(lateAfter(results[0].slice)), msString(worst), strings.Join(who, ", "))
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
	// every policy makes the same calls, and the lateness is noted.
	o := &outcome{pol: p, slice: slice}
	tolerance := lateAfter(slice)
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
			// Late by the dispatcher's wait and the goroutine's.
			late := time.Since(start) - at
			r := call(ctx, tc, c.timeout)
			mu.Lock()
			defer mu.Unlock()
			o.add(r, inOutage)
			if late > tolerance {
				o.late = append(o.late, span{at, at + late})
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	slices.Sort(o.latencies)
	slices.SortFunc(o.late, func(a, b span) int { return cmp.Compare(a.from, b.from) })
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

// lateColor marks the times calls started late on the load chart, in a
// strip along its bottom: Paul Tol's orange, apart from every line's
// colour and the outage's grey.
const lateColor = "#EE7733"

// demoCharts returns the latency tail of every policy, on log-log axes with
// the percentiles marked, and the server's load over time.
func demoCharts(c demoConfig, results []*outcome) []svgplot.Figure {
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
		tail.Series = append(tail.Series, svgplot.Series{Name: o.pol.name, Points: ccdf(o.latencies), Steps: true})
		if o.pol.hedges() && o.hedgeDelay > 0 {
			what := "hedge"
			if o.pol.adaptive != nil {
				what = "adaptive hedge"
			}
			tail.Marks = append(tail.Marks, svgplot.Mark{Value: ms(o.hedgeDelay), Label: what + " " + msString(o.hedgeDelay)})
		}
	}
	tail.Marks = slices.CompactFunc(tail.Marks, func(a, b svgplot.Mark) bool { return a.Value == b.Value && a.Horizontal == b.Horizontal })
	load := &svgplot.Chart{Title: "Server load over time", XLabel: "time from the start of each policy's run (s)", YLabel: "attempts/s"}
	if c.outage > 0 {
		from, to := c.outageWindow()
		load.Bands = []svgplot.Band{{From: from.Seconds(), To: to.Seconds(), Label: "outage"}}
	}
	for _, s := range lateSpans(results) {
		load.Bands = append(load.Bands, svgplot.Band{From: s.from.Seconds(), To: s.to.Seconds(), Color: lateColor, Strip: true,
			Legend: "calls started late (busy machine)"})
	}
	for _, o := range results {
		s := svgplot.Series{Name: o.pol.name}
		for i, v := range o.load {
			// Only the slices wholly within the run: the last one, cut
			// short by the end of the calls, would read as a drop in load.
			if time.Duration(i+1)*o.slice > c.duration {
				break
			}
			s.Points = append(s.Points, svgplot.Point{X: (float64(i) + 0.5) * o.slice.Seconds(), Y: float64(v) / o.slice.Seconds()})
		}
		load.Series = append(load.Series, s)
	}
	return []svgplot.Figure{tail, load}
}

// lateSpans returns the stretches of time when some policy's calls started
// late, merged where they overlap or nearly touch, in order.
func lateSpans(results []*outcome) []span {
	var all []span
	for _, o := range results {
		all = append(all, o.late...)
	}
	if len(all) == 0 {
		return nil
	}
	slices.SortFunc(all, func(a, b span) int { return cmp.Compare(a.from, b.from) })
	gap := results[0].slice
	out := []span{all[0]}
	for _, s := range all[1:] {
		if last := &out[len(out)-1]; s.from <= last.to+gap {
			last.to = max(last.to, s.to)
			continue
		}
		out = append(out, s)
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// ccdf returns the fraction of calls slower than each latency of sorted,
// to draw as steps: at the i-th fastest of n calls, (n-i-1)/n are slower.
// The slowest call's step ends at its latency, at 1/n: on a log scale the
// drop to 0 cannot be drawn. Every point of the last 200 is kept, since
// they make the tail; before them, about 300 evenly spaced ones.
func ccdf(sorted []time.Duration) []svgplot.Point {
	n := len(sorted)
	step := max(1, (n-200)/300)
	var pts []svgplot.Point
	for i := 0; i < n; i++ {
		if n-i > 200 && i%step != 0 {
			continue
		}
		pts = append(pts, svgplot.Point{X: ms(sorted[i]), Y: float64(max(n-i-1, 1)) / float64(n)})
	}
	return pts
}

// demoConclusion explains the results: one headline for each question
// (success rate, p99 latency, extra load), a warning for every policy that
// did worse than no retries, then why, from the measured numbers. Every
// number is written as the table writes it. The policy without retry or
// hedging policy, if any, is the yardstick.
func demoConclusion(c demoConfig, results []*outcome) conclusion {
	var out conclusion
	if len(results) == 0 {
		return out
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
	pick := func(idx []int) []*outcome {
		var out []*outcome
		for _, i := range idx {
			out = append(out, results[i])
		}
		return out
	}
	// each lists the policies with their values, as "a (1.0%) and b (2.0%)",
	// or one name and its value.
	each := func(os []*outcome, value func(*outcome) string) string {
		var s []string
		for _, o := range os {
			s = append(s, fmt.Sprintf("%s (%s)", o.pol.name, value(o)))
		}
		return joinAnd(s)
	}
	success := func(o *outcome) string { return pct(o.successRate()) }
	p99 := func(o *outcome) string { return msString(o.quantile(0.99)) }
	attempts := func(o *outcome) string { return perCall(o.attemptsPerCall()) }

	// Success rate: higher wins; half a point apart is a tie.
	won := pick(leaders(len(results), func(i int) float64 { return results[i].successRate() }, true, 0.005))
	w := won[0]
	switch {
	case base != nil && len(won) == len(results):
		out.Headlines = append(out.Headlines, fmt.Sprintf("Success rate: no policy beat no retries; all were within half a point of %s.", success(w)))
	default:
		h := fmt.Sprintf("Success rate: %s won with %s of calls succeeding", w.pol.name, success(w))
		if len(won) > 1 {
			h = fmt.Sprintf("Success rate: %s tied, within half a point", each(won, success))
		}
		if base != nil && w != base {
			h += fmt.Sprintf(", against %s with no retries", success(base))
			out.Detail = append(out.Detail, fmt.Sprintf("%s %s.", w.pol.name, w.pol.how))
		}
		out.Headlines = append(out.Headlines, h+".")
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
			s := fmt.Sprintf("Of %s's %d failed calls, %s", w.pol.name, failed, joinAnd(why))
			if w.failedInOutage > 0 {
				s += fmt.Sprintf("; %d of the %d started during the %v outage", w.failedInOutage, failed, c.outage)
			}
			out.Detail = append(out.Detail, s+".")
		}
	}

	// p99 latency: lower wins; within 5% of the best (or 1ms) is a tie.
	p99ms := func(i int) float64 { return ms(results[i].quantile(0.99)) }
	best := p99ms(leaders(len(results), p99ms, false, 0)[0])
	won = pick(leaders(len(results), p99ms, false, max(1, best/20)))
	w = won[0]
	h := fmt.Sprintf("p99 latency: %s won with %s", w.pol.name, p99(w))
	if len(won) > 1 {
		h = fmt.Sprintf("p99 latency: %s tied, within 5%%", each(won, p99))
	}
	if base != nil && w != base {
		bp := base.quantile(0.99)
		h += fmt.Sprintf(", against %s with no retries", msString(bp))
		s := ""
		if c.stragglerRate > 0.01 && bp >= c.stragglerLatency {
			s = fmt.Sprintf("%.0f%% of attempts stall for %v, so at p99 a call that does not race a second attempt waits for a stalled one; ", 100*c.stragglerRate, c.stragglerLatency)
		}
		s += fmt.Sprintf("%s %s", w.pol.name, w.pol.how)
		if w.pol.hedges() && w.hedgeDelay > 0 {
			s += fmt.Sprintf(" (here %s)", msString(w.hedgeDelay))
		}
		out.Detail = append(out.Detail, s+".")
	}
	out.Headlines = append(out.Headlines, h+".")

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
		h := fmt.Sprintf("Extra load: of the policies that retry or hedge, %s made the fewest attempts, %s per call", w.pol.name, attempts(w))
		if len(won) > 1 {
			h = fmt.Sprintf("Extra load: of the policies that retry or hedge, %s made the fewest attempts per call, within 0.01", each(won, attempts))
		}
		if worst.attemptsPerCall()-w.attemptsPerCall() > 0.01 {
			h += fmt.Sprintf(", against %s for %s", attempts(worst), worst.pol.name)
		}
		out.Headlines = append(out.Headlines, h+".")
		if w.throttled > 0 {
			out.Detail = append(out.Detail, fmt.Sprintf("%s's throttle refused the retries or hedges of %d calls once failures had drained its tokens.", w.pol.name, w.throttled))
		}
		if from, to := c.outageWindow(); c.outage > 0 && base != nil {
			if b := base.outageLoad(from, to); b > 0 && worst != w {
				out.Detail = append(out.Detail, fmt.Sprintf("During the outage %s sent %.1f times the attempts of no retries, %s %.1f times: "+
					"a budget keeps a failing server from being hit harder the longer it fails.",
					worst.pol.name, worst.outageLoad(from, to)/b, w.pol.name, w.outageLoad(from, to)/b))
			}
		}
	}

	// Worse than no retries, by more than what counts as a tie above.
	if base != nil {
		var worse []string
		for _, o := range others {
			var how []string
			if base.successRate()-o.successRate() > 0.005 {
				how = append(how, fmt.Sprintf("%s of calls succeeded against %s", success(o), success(base)))
			}
			if bp, op := ms(base.quantile(0.99)), ms(o.quantile(0.99)); op-bp > max(1, bp/20) {
				how = append(how, fmt.Sprintf("p99 %s against %s", p99(o), p99(base)))
			}
			if len(how) > 0 {
				worse = append(worse, fmt.Sprintf("%s (%s)", o.pol.name, strings.Join(how, "; ")))
			}
		}
		if len(worse) > 0 {
			out.Headlines = append(out.Headlines, fmt.Sprintf("Worse than no retries: %s.", joinAnd(worse)))
		} else {
			out.Headlines = append(out.Headlines, "No policy did worse than no retries in success rate or p99 latency, beyond what counts as a tie.")
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
