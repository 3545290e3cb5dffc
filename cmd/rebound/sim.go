package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
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
}

const simAbout = `usage: rebound sim [flags]

Simulates many clients retrying against one server through an outage, in
virtual time, and compares four retry policies on the same seeded arrivals:
no retries, naive retries (up to -max-attempts), A6 retryPolicy with a
throttle per client (-max-tokens, -token-ratio), and the Smithy standard
strategy with a token bucket per client (-bucket, -retry-cost, -refund).

Model: each client sends new requests as a Poisson process (-rate per
second). The server has -capacity × -latency workers: an attempt that finds
one free takes -latency and succeeds; one that finds none is refused at once
with a retryable UNAVAILABLE (no queue). During the outage only
-outage-capacity of the workers serve (0: every attempt fails). Retries wait
a jittered exponential backoff; no attempt starts past a request's -deadline.

Prints per policy: requests, attempts, load amplification (attempts per
request, overall and during the outage), goodput (successes per second,
overall and after the outage), success rate and the p50/p99 time to success.
Writes an SVG of the offered load over time to -svg. The same flags give the
same output, byte for byte.

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
	svgPath := fs.String("svg", "rebound-sim.svg", `file to write the offered-load chart to ("" for none)`)
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
	if *svgPath == "" {
		return 0
	}
	var svg bytes.Buffer
	if _, err := simChart(report).WriteTo(&svg); err != nil {
		fmt.Fprintf(stderr, "sim: -svg: %v\n", err)
		return 1
	}
	if err := os.WriteFile(*svgPath, svg.Bytes(), 0o644); err != nil {
		fmt.Fprintf(stderr, "sim: -svg: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "\nwrote the offered-load chart to %s\n", *svgPath)
	return 0
}

func printSimReport(w io.Writer, r *sim.Report) {
	c := r.Config
	fmt.Fprintf(w, "%d clients × %.6g req/s = %.6g req/s; server %.6g req/s (%d workers × %v)\n",
		c.Clients, c.Rate, float64(c.Clients)*c.Rate, c.Capacity, c.Workers(), c.Latency)
	if c.OutageLength > 0 {
		fmt.Fprintf(w, "outage from %v to %v at %.6g%% capacity; ", c.OutageStart, c.OutageStart+c.OutageLength, 100*c.OutageCapacity)
	} else {
		fmt.Fprint(w, "no outage; ")
	}
	fmt.Fprintf(w, "run %v of virtual time; seed %d\n", c.Duration, c.Seed)
	deadline := "none"
	if c.Deadline > 0 {
		deadline = c.Deadline.String()
	}
	fmt.Fprintf(w, "retries: up to %d attempts, backoff random(0, min(%v×%.6g^(n-1), %v)), deadline %s\n\n",
		c.MaxAttempts, c.Backoff.Initial, c.Backoff.Multiplier, c.Backoff.Max, deadline)

	fmt.Fprintf(w, "%-13s %9s %9s %7s %10s %9s %10s %8s %9s %9s\n",
		"policy", "requests", "attempts", "amp", "amp-outage", "goodput/s", "recovery/s", "success", "p50", "p99")
	for _, res := range r.Results {
		fmt.Fprintf(w, "%-13s %9d %9d %6.2fx %9.2fx %9.1f %10.1f %7.1f%% %9s %9s\n",
			res.Policy, res.Requests, res.Attempts, res.Amplification, res.OutageAmplification,
			res.Goodput, res.RecoveryGoodput, 100*res.SuccessRate,
			res.P50.Round(time.Millisecond), res.P99.Round(time.Millisecond))
	}

	fmt.Fprintln(w, "\nfailed requests by why retrying stopped:")
	fmt.Fprintf(w, "%-13s %9s %9s %9s\n", "policy", "attempts", "budget", "deadline")
	for _, res := range r.Results {
		fmt.Fprintf(w, "%-13s %9d %9d %9d\n", res.Policy, res.Exhausted, res.Throttled, res.PastDeadline)
	}

	fmt.Fprintln(w, "\npolicies:")
	for _, res := range r.Results {
		fmt.Fprintf(w, "  %-13s %s\n", res.Policy, res.Policy.Describe(c))
	}
	fmt.Fprintln(w, "amp = attempts per request; amp-outage = attempts sent during the outage per request arriving in it;")
	fmt.Fprintln(w, "goodput = successes per second; recovery = the same after the outage; p50/p99 = time to success.")
	amp := map[sim.Policy]float64{}
	for _, res := range r.Results {
		amp[res.Policy] = res.OutageAmplification
	}
	if c.OutageLength > 0 {
		fmt.Fprintf(w, "\nDuring the outage, naive retries multiplied the load on the server %.2f×;\n"+
			"the A6 throttle held it to %.2f× and the token bucket to %.2f×.\n",
			amp[sim.Naive], amp[sim.Throttled], amp[sim.Bucket])
	}
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
