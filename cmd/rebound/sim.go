package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rebound-go/rebound/internal/sim"
	"github.com/rebound-go/rebound/internal/svgplot"
)

// simFlags names the flag that sets each sim.Config field, for errors.
var simFlags = map[string]string{
	"Clients":              "-clients",
	"Rate":                 "-rate",
	"Duration":             "-duration",
	"Capacity":             "-capacity",
	"Latency":              "-latency",
	"OutageStart":          "-outage-start",
	"OutageLength":         "-outage-length",
	"OutageCapacity":       "-outage-capacity",
	"MaxAttempts":          "-max-attempts",
	"Backoff.Initial":      "-backoff",
	"Backoff.Max":          "-max-backoff",
	"Backoff.Multiplier":   "-backoff-multiplier",
	"Deadline":             "-deadline",
	"Throttle.MaxTokens":   "-max-tokens",
	"Throttle.TokenRatio":  "-token-ratio",
	"Bucket.Capacity":      "-bucket",
	"Bucket.RetryCost":     "-retry-cost",
	"Bucket.SuccessRefund": "-refund",
	"Adaptive.K":           "-adaptive-k",
	"Adaptive.Window":      "-adaptive-window",
	"RetryShare":           "-retry-share",
}

const simAbout = `usage: rebound sim [flags]

Simulates many clients retrying against one server through an outage, in
virtual time, and compares retry policies on the same seeded arrivals: no
retries, naive retries (up to -max-attempts), A6 retryPolicy with a
throttle per client (-max-tokens, -token-ratio), the Smithy standard
strategy with a token bucket per client (-bucket, -retry-cost, -refund),
the SRE book's adaptive throttle per client (-adaptive-k,
-adaptive-window), the server shedding load with pushback (-retry-share),
and the other budgets listed under "policies" in the output. -fleet prints
instead the same outage at fleet scale: 50 clients at 20 req/s against
10,000 at 0.1, where budgets that learn from their own client's failures
stop protecting the server.

Model: each client sends new requests as a Poisson process (-rate per
second). The server has -capacity × -latency workers: an attempt that finds
one free takes -latency and succeeds; one that finds none is refused at once
with a retryable UNAVAILABLE (no queue). During the outage only
-outage-capacity of the workers serve (0: every attempt fails). Retries wait
a jittered exponential backoff; no attempt starts past a request's -deadline.

Prints per policy: requests, attempts, load amplification (attempts per
request, overall and during the outage), goodput (successes per second,
overall and after the outage), success rate and the p50/p99 time to success,
then a conclusion drawn from those numbers: which policy won on success
rate, on time to success and on load during the outage, and why. Writes an
SVG of the offered load and of the load amplification over time to -svg,
and with -html one page holding all of it. The same flags give the same
output, byte for byte.

flags:
`

func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := sim.DefaultConfig
	fs.IntVar(&c.Clients, "clients", c.Clients, "number of client processes, each with its own retry budget")
	fs.Float64Var(&c.Rate, "rate", c.Rate, "new requests per second of each client")
	fs.DurationVar(&c.Duration, "duration", c.Duration, "how long new requests arrive (virtual time)")
	fs.Float64Var(&c.Capacity, "capacity", c.Capacity, "attempts per second the healthy server completes")
	fs.DurationVar(&c.Latency, "latency", c.Latency, "time to serve an attempt")
	fs.DurationVar(&c.OutageStart, "outage-start", c.OutageStart, "when the outage begins")
	fs.DurationVar(&c.OutageLength, "outage-length", c.OutageLength, "how long the outage lasts (0 for none)")
	fs.Float64Var(&c.OutageCapacity, "outage-capacity", c.OutageCapacity, "fraction of the capacity left during the outage, in [0, 1]")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "seed of the arrivals and the jitter")
	fs.IntVar(&c.MaxAttempts, "max-attempts", c.MaxAttempts, "maximum attempts per request, the first included")
	fs.DurationVar(&c.Backoff.Initial, "backoff", c.Backoff.Initial, "ceiling of the first retry's delay")
	fs.DurationVar(&c.Backoff.Max, "max-backoff", c.Backoff.Max, "cap of the retry delay's ceiling")
	fs.Float64Var(&c.Backoff.Multiplier, "backoff-multiplier", c.Backoff.Multiplier, "growth of the ceiling per retry")
	fs.DurationVar(&c.Deadline, "deadline", c.Deadline, "deadline of each request from its arrival (0 for none)")
	fs.IntVar(&c.Throttle.MaxTokens, "max-tokens", c.Throttle.MaxTokens, "A6 throttle: maxTokens")
	fs.Float64Var(&c.Throttle.TokenRatio, "token-ratio", c.Throttle.TokenRatio, "A6 throttle: tokenRatio")
	fs.IntVar(&c.Bucket.Capacity, "bucket", c.Bucket.Capacity, "token bucket: capacity")
	fs.IntVar(&c.Bucket.RetryCost, "retry-cost", c.Bucket.RetryCost, "token bucket: tokens a retry costs")
	fs.IntVar(&c.Bucket.SuccessRefund, "refund", c.Bucket.SuccessRefund, "token bucket: tokens a success gives back")
	svgPath := fs.String("svg", "rebound-sim.svg", `file to write the charts to: offered load and load amplification over time ("" for none)`)
	htmlPath := fs.String("html", "", "file to write a self-contained HTML report to: tables, charts, policies and conclusion")
	fs.Float64Var(&c.Adaptive.K, "adaptive-k", c.Adaptive.K, "adaptive throttle: K, requests per accept before rejecting locally (0 for 2)")
	fs.DurationVar(&c.Adaptive.Window, "adaptive-window", c.Adaptive.Window, "adaptive throttle: window (0 for 2m)")
	fs.Float64Var(&c.RetryShare, "retry-share", c.RetryShare, "shedder: share of recent attempts it may refuse and still invite retries")
	fleet := fs.Bool("fleet", false, "print the fleet-scale table instead: 50 x 20 and 10,000 x 0.1 req/s, full outage and 50% brownout, every policy")
	rateLimited := fs.Bool("ratelimited", false, "print the rate-limited API table instead: a server at 20 req/s, one process and ten sharing it, every client policy")
	fs.Usage = func() {
		fmt.Fprint(stderr, simAbout)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sim: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *fleet {
		return runFleet(ctx, c, stdout, stderr)
	}
	if *rateLimited {
		return runRateLimited(ctx, c.Seed, stdout, stderr)
	}
	report, err := sim.Run(ctx, c)
	var fe *sim.FieldError
	switch {
	case errors.As(err, &fe):
		name, ok := simFlags[fe.Field]
		if !ok {
			name = "Config." + fe.Field
		}
		fmt.Fprintf(stderr, "sim: %s %s\n", name, fe.Problem)
		return 2
	case errors.Is(err, sim.ErrTooManyEvents):
		fmt.Fprintf(stderr, "%v: lower -clients, -rate, -duration or -max-attempts\n", err)
		return 2
	case err != nil:
		fmt.Fprintf(stderr, "sim: %v\n", err)
		return 1
	}
	printSimReport(stdout, report)
	charts := simCharts(report)
	if *svgPath != "" {
		if err := writeStacked(*svgPath, charts...); err != nil {
			fmt.Fprintf(stderr, "sim: -svg: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "\nwrote the charts (offered load, load amplification over time) to %s\n", *svgPath)
	}
	if *htmlPath != "" {
		results, failed := simTables(report)
		var config []configLine
		for _, res := range report.Results {
			config = append(config, configLine{res.Policy.String(), res.Policy.Describe(report.Config)})
		}
		page := htmlReport{
			Title:    "rebound sim",
			Scenario: simScenario(report),
			Tables: []htmlTable{
				{Caption: "Results", Rows: results},
				{Caption: "Failed requests by why retrying stopped", Rows: failed},
			},
			Notes:      []string{simLegend},
			Config:     config,
			Conclusion: simConclusion(report),
			Charts:     charts,
		}
		if err := page.write(*htmlPath); err != nil {
			fmt.Fprintf(stderr, "sim: -html: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "wrote the report (tables, charts, policies, conclusion) to %s\n", *htmlPath)
	}
	return 0
}

// simScenario describes the scenario in a few lines.
func simScenario(r *sim.Report) string {
	c := r.Config
	var b strings.Builder
	fmt.Fprintf(&b, "%d clients × %.6g req/s = %.6g req/s; server %.6g req/s (%d workers × %v)\n",
		c.Clients, c.Rate, float64(c.Clients)*c.Rate, c.Capacity, c.Workers(), c.Latency)
	if c.OutageLength > 0 {
		fmt.Fprintf(&b, "outage from %v to %v at %.6g%% capacity; ", c.OutageStart, c.OutageStart+c.OutageLength, 100*c.OutageCapacity)
	} else {
		fmt.Fprint(&b, "no outage; ")
	}
	fmt.Fprintf(&b, "run %v of virtual time; seed %d\n", c.Duration, c.Seed)
	deadline := "none"
	if c.Deadline > 0 {
		deadline = c.Deadline.String()
	}
	fmt.Fprintf(&b, "retries: up to %d attempts, backoff random(0, min(%v×%.6g^(n-1), %v)), deadline %s",
		c.MaxAttempts, c.Backoff.Initial, c.Backoff.Multiplier, c.Backoff.Max, deadline)
	return b.String()
}

// simTables returns the results table and the table of failed requests by
// why retrying stopped, headings first.
func simTables(r *sim.Report) (results, failed [][]string) {
	results = [][]string{{"policy", "requests", "attempts", "amp", "amp-outage", "goodput/s", "recovery/s", "success", "p50", "p99"}}
	failed = [][]string{{"policy", "attempts", "budget", "pushback", "deadline"}}
	for _, res := range r.Results {
		results = append(results, []string{res.Policy.String(), strconv.Itoa(res.Requests), strconv.Itoa(res.Attempts),
			fmt.Sprintf("%.2fx", res.Amplification), fmt.Sprintf("%.2fx", res.OutageAmplification),
			fmt.Sprintf("%.1f", res.Goodput), fmt.Sprintf("%.1f", res.RecoveryGoodput), fmt.Sprintf("%.1f%%", 100*res.SuccessRate),
			res.P50.Round(time.Millisecond).String(), res.P99.Round(time.Millisecond).String()})
		failed = append(failed, []string{res.Policy.String(), strconv.Itoa(res.Exhausted), strconv.Itoa(res.Throttled), strconv.Itoa(res.PushedBack), strconv.Itoa(res.PastDeadline)})
	}
	return results, failed
}

const simLegend = "amp = attempts per request; amp-outage = attempts sent during the outage per request arriving in it; " +
	"goodput = successes per second; recovery = the same after the outage; p50/p99 = time to success."

func printSimReport(w io.Writer, r *sim.Report) {
	fmt.Fprintf(w, "%s\n\n", simScenario(r))
	results, failed := simTables(r)
	writeTable(w, results)
	fmt.Fprintln(w, "\nfailed requests by why retrying stopped:")
	writeTable(w, failed)
	fmt.Fprintln(w, "\npolicies:")
	for _, res := range r.Results {
		fmt.Fprintf(w, "  %-18s %s\n", res.Policy, res.Policy.Describe(r.Config))
	}
	fmt.Fprintln(w, wrap(simLegend, 100))
	fmt.Fprintf(w, "\n%s\n", wrap(strings.Join(simConclusion(r), " "), 100))
}

// simConclusion explains the results in a few sentences: which policy won
// on success rate, on p99 time to success and on the load it added during
// the outage, and why, from the numbers of the report. The policy that
// makes one attempt per request, if any, is the yardstick.
func simConclusion(r *sim.Report) []string {
	res := r.Results
	if len(res) == 0 {
		return nil
	}
	c := r.Config
	base := -1
	var retrying []int
	for i, x := range res {
		if x.Policy == sim.NoRetries && base < 0 {
			base = i
		} else {
			retrying = append(retrying, i)
		}
	}
	names := func(idx []int) string {
		var s []string
		for _, i := range idx {
			s = append(s, res[i].Policy.String())
		}
		return joinAnd(s)
	}
	var out []string

	// Success rate: higher wins; half a point apart is a tie.
	won := leaders(len(res), func(i int) float64 { return res[i].SuccessRate }, true, 0.005)
	w := res[won[0]]
	if base >= 0 && len(won) == len(res) {
		out = append(out, fmt.Sprintf("On success rate no policy beat no-retries: all were within half a point of %.1f%%.", 100*w.SuccessRate))
	} else {
		s := fmt.Sprintf("On success rate %s won with %.1f%% of requests succeeding", names(won), 100*w.SuccessRate)
		if len(won) > 1 {
			s = fmt.Sprintf("On success rate %s tied at about %.1f%% of requests succeeding", names(won), 100*w.SuccessRate)
		}
		if base >= 0 && won[0] != base {
			s += fmt.Sprintf(", against %.1f%% with no retries", 100*res[base].SuccessRate)
		}
		out = append(out, s+".")
		if failed := w.Requests - w.Succeeded; failed > 0 {
			var why []string
			for _, f := range []struct {
				n    int
				what string
			}{{w.Exhausted, "ran out of attempts"}, {w.Throttled, "had a retry refused by the budget"}, {w.PastDeadline, "reached the deadline"}} {
				if f.n > 0 {
					why = append(why, fmt.Sprintf("%d %s", f.n, f.what))
				}
			}
			out = append(out, fmt.Sprintf("Of its %d failed requests, %s.", failed, joinAnd(why)))
		}
	}

	// p99 time to success: lower wins; within 5% of the best is a tie.
	p99 := func(i int) float64 { return res[i].P99.Seconds() }
	best := p99(leaders(len(res), p99, false, 0)[0])
	won = leaders(len(res), p99, false, best/20)
	w = res[won[0]]
	s := fmt.Sprintf("On p99 time to success %s won with %v", names(won), w.P99.Round(time.Millisecond))
	if len(won) > 1 {
		s = fmt.Sprintf("On p99 time to success %s tied at about %v", names(won), w.P99.Round(time.Millisecond))
	}
	slowest := slices.MaxFunc(res, func(a, b sim.Result) int { return cmpFloat(a.P99.Seconds(), b.P99.Seconds()) })
	amp := 0.0
	for _, i := range won {
		amp = max(amp, res[i].Amplification)
	}
	if amp < 1.1 && slowest.P99 > 2*w.P99 {
		s += fmt.Sprintf(": with at most %.2f attempts per request, nearly all %s successes came on a first attempt, "+
			"while a request that retries rescue waits out their backoff (p99 %v for %v)",
			amp, map[bool]string{true: "its", false: "their"}[len(won) == 1], slowest.P99.Round(time.Millisecond), slowest.Policy)
	}
	out = append(out, s+".")

	// Load during the outage, among the policies that retry.
	if c.OutageLength > 0 && len(retrying) > 0 {
		idx := leaders(len(retrying), func(i int) float64 { return res[retrying[i]].OutageAmplification }, false, 0.02)
		var won []int
		for _, i := range idx {
			won = append(won, retrying[i])
		}
		w := res[won[0]]
		worst := res[retrying[0]]
		for _, i := range retrying {
			if res[i].OutageAmplification > worst.OutageAmplification {
				worst = res[i]
			}
		}
		s := fmt.Sprintf("During the outage, of the policies that retry, %s added the least load, %.2f× the attempts of one per request", names(won), w.OutageAmplification)
		if w.Throttled > 0 {
			s += fmt.Sprintf(" (%v's budget refused the retries of %d requests once failures had drained it)", w.Policy, w.Throttled)
		}
		if worst.OutageAmplification-w.OutageAmplification > 0.02 {
			s += fmt.Sprintf(", while %v multiplied the load on the server %.2f×", worst.Policy, worst.OutageAmplification)
		}
		out = append(out, s+".")
		if worst.Policy != w.Policy {
			switch d := worst.SuccessRate - w.SuccessRate; {
			case d > 0.005:
				s := fmt.Sprintf("Holding the load down cost %.1f points of success rate (%.1f%% against %.1f%%)",
					100*d, 100*w.SuccessRate, 100*worst.SuccessRate)
				if w.RecoveryGoodput > 0 || worst.RecoveryGoodput > 0 {
					s += fmt.Sprintf(", and after the outage %v completed %.1f requests/s against %.1f for %v",
						w.Policy, w.RecoveryGoodput, worst.RecoveryGoodput, worst.Policy)
				}
				out = append(out, s+".")
			default:
				out = append(out, fmt.Sprintf("It lost nothing for it: %.1f%% of its requests succeeded against %.1f%% for %v, "+
					"since retries sent into an outage fail too.", 100*w.SuccessRate, 100*worst.SuccessRate, worst.Policy))
			}
		}
	}
	return out
}

// simCharts returns the offered load of every policy over time and its
// load amplification over time.
func simCharts(r *sim.Report) []*svgplot.Chart {
	return []*svgplot.Chart{simChart(r), ampChart(r)}
}

// ampChart draws each policy's attempts per arriving request over time,
// with the outage shaded: 1 is no retries, and the area above it the load
// that retries add.
func ampChart(r *sim.Report) *svgplot.Chart {
	c := r.Config
	iv := r.Interval.Seconds()
	ch := &svgplot.Chart{
		Title:  "Load amplification over time: attempts sent per request arriving",
		XLabel: "virtual time (s)",
		YLabel: fmt.Sprintf("attempts per new request (%v intervals)", r.Interval),
		Width:  960,
		Height: 400,
		Marks:  []svgplot.Mark{{Horizontal: true, Value: 1, Label: "1×: one attempt per request"}},
	}
	if c.OutageLength > 0 {
		start := c.OutageStart.Seconds()
		ch.Bands = []svgplot.Band{{From: start, To: start + c.OutageLength.Seconds(), Label: "outage"}}
	}
	for _, res := range r.Results {
		s := svgplot.Series{Name: fmt.Sprintf("%v (%.2f× in outage)", res.Policy, res.OutageAmplification)}
		for i, v := range res.Offered {
			amp := math.NaN() // no request arrived: a gap in the line
			if i < len(r.Arrivals) && r.Arrivals[i] > 0 {
				amp = v / r.Arrivals[i]
			}
			s.Points = append(s.Points, svgplot.Point{X: (float64(i) + 0.5) * iv, Y: amp})
		}
		ch.Series = append(ch.Series, s)
	}
	return ch
}

// simChart draws the offered load of every policy over time, with the
// server's capacity dashed and the outage shaded.
func simChart(r *sim.Report) *svgplot.Chart {
	c := r.Config
	iv := r.Interval.Seconds()
	title := fmt.Sprintf("Offered load: %d clients at %.6g req/s, server %.6g req/s", c.Clients, float64(c.Clients)*c.Rate, c.Capacity)
	if c.OutageLength > 0 {
		title += fmt.Sprintf(", %v outage", c.OutageLength)
	}
	ch := &svgplot.Chart{
		Title:  title,
		XLabel: "virtual time (s)",
		YLabel: fmt.Sprintf("attempts sent per second (%v intervals)", r.Interval),
		Width:  960,
		Height: 480,
	}
	if c.OutageLength > 0 {
		start := c.OutageStart.Seconds()
		ch.Bands = []svgplot.Band{{From: start, To: start + c.OutageLength.Seconds(), Label: "outage"}}
	}
	for _, res := range r.Results {
		s := svgplot.Series{Name: fmt.Sprintf("%v (%.2f× in outage)", res.Policy, res.OutageAmplification)}
		for i, v := range res.Offered {
			s.Points = append(s.Points, svgplot.Point{X: (float64(i) + 0.5) * iv, Y: v})
		}
		ch.Series = append(ch.Series, s)
	}
	full, down := c.Capacity, c.Capacity*c.OutageCapacity
	capacity := []svgplot.Point{{X: 0, Y: full}}
	if c.OutageLength > 0 {
		start, end := c.OutageStart.Seconds(), (c.OutageStart + c.OutageLength).Seconds()
		capacity = append(capacity, svgplot.Point{X: start, Y: full}, svgplot.Point{X: start, Y: down},
			svgplot.Point{X: end, Y: down}, svgplot.Point{X: end, Y: full})
	}
	capacity = append(capacity, svgplot.Point{X: c.Duration.Seconds(), Y: full})
	ch.Series = append(ch.Series, svgplot.Series{Name: "server capacity", Points: capacity, Color: "#000000", Dashed: true})
	return ch
}
