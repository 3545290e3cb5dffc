package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
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
	"Shape":                "-shape",
	"AttackRate":           "-attack-rate",
}

var simHelp = help{
	name:  "sim",
	usage: "rebound sim [flags]",
	about: `Simulates many clients retrying against one server through an outage, in
virtual time, and compares retry policies on the same seeded arrivals: no
retries, naive retries (up to -max-attempts), A6 retryPolicy with a
throttle per client (-max-tokens, -token-ratio), the Smithy standard
strategy with a token bucket per client (-bucket, -retry-cost, -refund),
the SRE book's adaptive throttle per client (-adaptive-k,
-adaptive-window), the server shedding load with pushback (-retry-share),
and the other budgets listed under "policies" in the output.

Model: each client sends new requests as a Poisson process (-rate per
second). The server has -capacity × -latency workers: an attempt that finds
one free takes -latency and succeeds. -shape says what else happens, and
what the outage does:

  refuse        (the default) the server has no queue: an attempt that finds
                no worker free is refused at once with a retryable
                UNAVAILABLE; during the outage only -outage-capacity of the
                workers serve (0: every attempt fails at once, as when a
                dependency is down)
  slow          the server queues what its workers cannot take, and drops
                an attempt whose request's deadline has passed; during the
                outage only -outage-capacity of the workers serve, and
                requests slow down
  hang          a queueing server; during the outage an attempt hangs until
                it ends, or its deadline passes (-outage-capacity of them,
                at random, are spared)
  fail-fast     a queueing server; during the outage an attempt fails at
                once with UNAVAILABLE and no pushback of its own
                (-outage-capacity of them are spared)
  fast-calls    a queueing server that keeps its capacity, and during the
                "outage" an attacker: one client sending -attack-rate calls a
                second (0: 6000) that end at once, half failing, half
                succeeding without work
  slow-clients  the same, with slow clients opening -attack-rate streams a
                second (0: 100), each sending nothing for 10s, then its
                request

The shedder is package shed's, on virtual time: its adaptive limit learns
the server's latency (served whole, it starts from a steady state on the
healthy load), it sheds what is beyond the limit and speaks for the
server's own fast UNAVAILABLE. Retries wait a jittered exponential backoff;
no attempt starts past a request's -deadline.

Prints per policy: requests, attempts, load amplification (attempts per
request, overall and during the outage), goodput (successes per second,
overall and after the outage), the recovery (the time from the outage's
end until the requests arriving succeed at 90% of their share before it,
or never), success rate and the p50/p99 time to success, then a conclusion
drawn from those numbers: one line per question (success rate, time to
success, load during the outage), every policy that did worse than no
retries, and why. Writes an SVG of the offered load and of the load
amplification over time, one small chart per policy, and of the shedder's
limit, to -svg, and with -html one page holding all of it. The same flags
give the same output, byte for byte.

-fleet prints instead the outage at fleet scale: 50 clients at 20 req/s
against 10,000 at 0.1, where budgets that learn from their own client's
failures stop protecting the server, then 10,000 at 0.1 through every
-shape. Each row sets -clients, -rate, -outage-capacity, -shape and
-attack-rate itself, and it draws no chart: -html writes its table as a
page.

-ratelimited prints instead every client policy against a rate-limited API:
a limit of 20 req/s with a burst of 2, one process of 20 workers and ten of
2 sharing it; then servers that publish their quota (10 s windows of 200
requests), in IETF RateLimit fields with one process and with ten, and in
X-RateLimit fields (the reset a Unix time) with ten, where rebound's rate
limit paces to the remainder it reads. Only -seed and -html apply to it.`,
}

// fleetSets are the flags each row of -fleet sets itself.
var fleetSets = []string{"clients", "rate", "outage-capacity", "shape", "attack-rate"}

func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := simHelp.newFlagSet()
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
	shape := fs.String("shape", c.Shape.String(), "what the outage does: refuse, slow, hang, fail-fast, or an attacker: fast-calls, slow-clients (see above)")
	fs.Float64Var(&c.AttackRate, "attack-rate", 0, "the attacker's calls or streams per second (-shape fast-calls, slow-clients; 0 for 6000 and 100)")
	fleet := fs.Bool("fleet", false, "print the fleet-scale table instead: 50 x 20 and 10,000 x 0.1 req/s, full outage and 50% brownout, every policy")
	rateLimited := fs.Bool("ratelimited", false, "print the rate-limited API table instead: a server at 20 req/s, one process and ten sharing it, every client policy")
	if code, ok := simHelp.parse(fs, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return simHelp.fail(stderr, "unexpected argument %q", fs.Arg(0))
	}
	set := setFlags(fs)
	sh, err := sim.ParseShape(*shape)
	if err != nil {
		return simHelp.fail(stderr, "-shape: unknown shape %q (want one of %v)", *shape, sim.Shapes)
	}
	c.Shape = sh
	if c.AttackRate == 0 {
		c.AttackRate = sh.DefaultAttackRate()
	}
	switch {
	case *fleet && *rateLimited:
		return simHelp.fail(stderr, "-fleet and -ratelimited are two different tables: give one")
	case *rateLimited:
		for _, name := range slices.Sorted(maps.Keys(set)) {
			if name != "ratelimited" && name != "seed" && name != "html" {
				return simHelp.fail(stderr, "-%s does not apply to -ratelimited (only -seed and -html do)", name)
			}
		}
	case *fleet:
		for _, name := range fleetSets {
			if set[name] {
				return simHelp.fail(stderr, "-%s does not apply to -fleet: each row sets it", name)
			}
		}
		if set["svg"] {
			return simHelp.fail(stderr, "-svg does not apply to -fleet: it prints a table and draws no chart (-html writes the table as a page)")
		}
		*svgPath = ""
	}
	if *rateLimited {
		*svgPath = ""
	}
	if err := checkOutputs(map[string]string{"svg": *svgPath, "html": *htmlPath}); err != nil {
		return simHelp.fail(stderr, "%v", err)
	}
	if *fleet {
		return runFleet(ctx, c, sim.FleetScenarios, *htmlPath, stdout, stderr)
	}
	if *rateLimited {
		return runRateLimited(ctx, sim.RateScenarios, c.Seed, *htmlPath, stdout, stderr)
	}
	report, err := sim.Run(ctx, c)
	if code, ok := simRunError(err, stderr); !ok {
		return code
	}
	printSimReport(stdout, report)
	charts := simCharts(report)
	if *svgPath != "" {
		if err := writeFigures(*svgPath, charts...); err != nil {
			fmt.Fprintf(stderr, "rebound sim: -svg: %v\n", err)
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
			fmt.Fprintf(stderr, "rebound sim: -html: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "wrote the report (tables, charts, policies, conclusion) to %s\n", *htmlPath)
	}
	return 0
}

// simRunError reports an error of sim.Run or sim.RunFleet: a bad flag as a
// usage error naming the flag, anything else as a failure. ok is true for
// no error.
func simRunError(err error, stderr io.Writer) (code int, ok bool) {
	var fe *sim.FieldError
	switch {
	case err == nil:
		return 0, true
	case errors.As(err, &fe):
		name, ok := simFlags[fe.Field]
		if !ok {
			name = "Config." + fe.Field
		}
		return simHelp.fail(stderr, "%s %s", name, fe.Problem), false
	case errors.Is(err, sim.ErrTooManyEvents):
		return simHelp.fail(stderr, "%s: lower -clients, -rate, -duration or -max-attempts", strings.TrimPrefix(err.Error(), "sim: ")), false
	}
	fmt.Fprintf(stderr, "rebound sim: %v\n", err)
	return 1, false
}

// simScenario describes the scenario in a few lines.
func simScenario(r *sim.Report) []string {
	c := r.Config
	var lines []string
	lines = append(lines, fmt.Sprintf("%d clients × %.6g req/s = %.6g req/s; server %.6g req/s (%d workers × %v)",
		c.Clients, c.Rate, float64(c.Clients)*c.Rate, c.Capacity, c.Workers(), c.Latency))
	outage := "no outage; "
	switch {
	case c.OutageLength == 0:
	case c.Shape == sim.FastCalls:
		outage = fmt.Sprintf("an attacker from %v to %v, %.6g calls/s from one client (%s); ", c.OutageStart, c.OutageStart+c.OutageLength, c.AttackRate, c.Shape.Describe())
	case c.Shape == sim.SlowClients:
		outage = fmt.Sprintf("slow clients from %v to %v, %.6g streams/s (%s); ", c.OutageStart, c.OutageStart+c.OutageLength, c.AttackRate, c.Shape.Describe())
	case c.Shape == sim.Hang || c.Shape == sim.FailFast:
		outage = fmt.Sprintf("outage from %v to %v sparing %.6g%% of the attempts (%s: %s); ", c.OutageStart, c.OutageStart+c.OutageLength, 100*c.OutageCapacity, c.Shape, c.Shape.Describe())
	default:
		outage = fmt.Sprintf("outage from %v to %v at %.6g%% capacity (%s: %s); ", c.OutageStart, c.OutageStart+c.OutageLength, 100*c.OutageCapacity, c.Shape, c.Shape.Describe())
	}
	lines = append(lines, outage+fmt.Sprintf("run %v of virtual time; seed %d", c.Duration, c.Seed))
	deadline := "none"
	if c.Deadline > 0 {
		deadline = c.Deadline.String()
	}
	lines = append(lines, fmt.Sprintf("retries: up to %d attempts, backoff random(0, min(%v×%.6g^(n-1), %v)), deadline %s",
		c.MaxAttempts, c.Backoff.Initial, c.Backoff.Multiplier, c.Backoff.Max, deadline))
	return lines
}

// The formats of sim's numbers, in the tables and the conclusion alike, so
// that the two agree to the digit.
func amp(v float64) string               { return fmt.Sprintf("%.2fx", v) }
func rate(v float64) string              { return fmt.Sprintf("%.1f", v) }
func share(v float64) string             { return fmt.Sprintf("%.1f%%", 100*v) }
func simDuration(d time.Duration) string { return d.Round(time.Millisecond).String() }

// recovered formats a result's recovery: its time, or "never".
func recovered(r sim.Result) string {
	if !r.Recovered {
		return "never"
	}
	return simDuration(r.Recovery)
}

// recoveryKey orders recoveries, never last.
func recoveryKey(r sim.Result) float64 {
	if !r.Recovered {
		return math.Inf(1)
	}
	return r.Recovery.Seconds()
}

// simTables returns the results table and the table of failed requests by
// why retrying stopped, headings first.
func simTables(r *sim.Report) (results, failed [][]string) {
	results = [][]string{{"policy", "requests", "attempts", "amp", "amp-outage", "goodput/s", "after/s", "recovery", "success", "p50", "p99"}}
	failed = [][]string{{"policy", "attempts", "budget", "pushback", "deadline"}}
	for _, res := range r.Results {
		results = append(results, []string{res.Policy.String(), strconv.Itoa(res.Requests), strconv.Itoa(res.Attempts),
			amp(res.Amplification), amp(res.OutageAmplification),
			rate(res.Goodput), rate(res.RecoveryGoodput), recovered(res), share(res.SuccessRate),
			simDuration(res.P50), simDuration(res.P99)})
		failed = append(failed, []string{res.Policy.String(), strconv.Itoa(res.Exhausted), strconv.Itoa(res.Throttled), strconv.Itoa(res.PushedBack), strconv.Itoa(res.PastDeadline)})
	}
	return results, failed
}

const simLegend = "amp = attempts per request; amp-outage = attempts sent during the outage per request arriving in it; " +
	"goodput = successes per second; after = the same after the outage; recovery = time from the outage's end until " +
	"the requests arriving succeed at 90% of their share in the 10s before it (over 1s of arrivals), or never; " +
	"p50/p99 = time to success."

func printSimReport(w io.Writer, r *sim.Report) {
	fmt.Fprintf(w, "%s\n\n", strings.Join(simScenario(r), "\n"))
	results, failed := simTables(r)
	writeTable(w, results)
	fmt.Fprintln(w, "\nfailed requests by why retrying stopped:")
	writeTable(w, failed)
	fmt.Fprintln(w, "\npolicies:")
	for _, res := range r.Results {
		fmt.Fprintf(w, "  %-18s %s\n", res.Policy, res.Policy.Describe(r.Config))
	}
	fmt.Fprintln(w, wrap(simLegend, 100))
	fmt.Fprintln(w)
	simConclusion(r).print(w)
}

// verdict says who won on a question: "a won with V"; when several tied,
// "a, b and c tied at V" if their values read the same, else "a (V1) and
// b (V2) tied within tie".
func verdict(names, values []string, tie string) string {
	switch {
	case len(names) == 1:
		return names[0] + " won with " + values[0]
	case len(slices.Compact(slices.Clone(values))) == 1:
		return joinAnd(names) + " tied at " + values[0]
	}
	s := make([]string, len(names))
	for i := range names {
		s[i] = fmt.Sprintf("%s (%s)", names[i], values[i])
	}
	return joinAnd(s) + " tied within " + tie
}

// simConclusion explains the results: one headline per question (success
// rate, p99 time to success, load during the outage), one naming every
// policy that did worse than no retries, then why, from the numbers of the
// report, each written as the tables write it. The policy that makes one
// attempt per request, if any, is the yardstick.
func simConclusion(r *sim.Report) conclusion {
	var out conclusion
	res := r.Results
	if len(res) == 0 {
		return out
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
	// won lists the policies of idx, best first, in a verdict.
	won := func(idx []int, value func(sim.Result) string, key func(sim.Result) float64, tie string) string {
		idx = slices.Clone(idx)
		slices.SortStableFunc(idx, func(a, b int) int { return cmpFloat(key(res[a]), key(res[b])) })
		var n, v []string
		for _, i := range idx {
			n, v = append(n, res[i].Policy.String()), append(v, value(res[i]))
		}
		return verdict(n, v, tie)
	}
	success := func(x sim.Result) string { return share(x.SuccessRate) }
	p99 := func(x sim.Result) string { return simDuration(x.P99) }
	outage := func(x sim.Result) string { return amp(x.OutageAmplification) }

	// Success rate: higher wins; half a point apart is a tie.
	best := leaders(len(res), func(i int) float64 { return res[i].SuccessRate }, true, 0.005)
	w := res[best[0]]
	if base >= 0 && len(best) == len(res) {
		out.Headlines = append(out.Headlines, fmt.Sprintf("Success rate: no policy beat no-retries; all were within half a point of %s.", success(w)))
	} else {
		h := "Success rate: " + won(best, success, func(x sim.Result) float64 { return -x.SuccessRate }, "half a point")
		if base >= 0 && best[0] != base {
			h += fmt.Sprintf(", against %s with no retries", success(res[base]))
		}
		out.Headlines = append(out.Headlines, h+".")
		if failed := w.Requests - w.Succeeded; failed > 0 {
			var why []string
			for _, f := range []struct {
				n    int
				what string
			}{{w.Exhausted, "ran out of attempts"}, {w.Throttled, "had a retry refused by the budget"}, {w.PushedBack, "were told to stop by the server"}, {w.PastDeadline, "reached the deadline"}} {
				if f.n > 0 {
					why = append(why, fmt.Sprintf("%d %s", f.n, f.what))
				}
			}
			out.Detail = append(out.Detail, fmt.Sprintf("Of %v's %d failed requests, %s.", w.Policy, failed, joinAnd(why)))
		}
	}

	// p99 time to success: lower wins; within 5% of the best is a tie.
	p99s := func(i int) float64 { return res[i].P99.Seconds() }
	fastest := p99s(leaders(len(res), p99s, false, 0)[0])
	best = leaders(len(res), p99s, false, fastest/20)
	w = res[best[0]]
	out.Headlines = append(out.Headlines, "p99 time to success: "+won(best, p99, func(x sim.Result) float64 { return x.P99.Seconds() }, "5%")+".")
	slowest := slices.MaxFunc(res, func(a, b sim.Result) int { return cmpFloat(a.P99.Seconds(), b.P99.Seconds()) })
	most := 0.0
	for _, i := range best {
		most = max(most, res[i].Amplification)
	}
	switch {
	case slowest.P99 <= 2*w.P99:
	case c.Shape != sim.Refuse && slowest.Amplification < 1.1 && slowest.P99 > 5*c.Latency:
		// Slow without retries: the server held the requests.
		s := fmt.Sprintf("Without a shedder the server held what it could not serve, in its queue or hanging, up to the requests' deadline: "+
			"p99 %s for %v against %s for %v", p99(slowest), slowest.Policy, p99(w), w.Policy)
		if c.OutageLength > 0 && slowest.RecoveryGoodput > w.RecoveryGoodput {
			s += fmt.Sprintf(", and it finished that work after the outage (%s/s against %s/s)", rate(slowest.RecoveryGoodput), rate(w.RecoveryGoodput))
		}
		out.Detail = append(out.Detail, s+".")
	case most < 1.1:
		out.Detail = append(out.Detail, fmt.Sprintf("With at most %s attempts per request, nearly all %s successes came on a first attempt, "+
			"while a request that retries rescue waits out their backoff (p99 %s for %v).",
			amp(most), map[bool]string{true: "its", false: "their"}[len(best) == 1], p99(slowest), slowest.Policy))
	}

	// Load during the outage, among the policies that retry.
	if c.OutageLength > 0 && len(retrying) > 0 {
		idx := leaders(len(retrying), func(i int) float64 { return res[retrying[i]].OutageAmplification }, false, 0.02)
		var least []int
		for _, i := range idx {
			least = append(least, retrying[i])
		}
		w := res[least[0]]
		worst := res[retrying[0]]
		for _, i := range retrying {
			if res[i].OutageAmplification > worst.OutageAmplification {
				worst = res[i]
			}
		}
		during := "Load during the " + outageWord(c)
		h := fmt.Sprintf("%s, in attempts per request arriving: of the policies that retry, %v added the least, %s", during, w.Policy, outage(w))
		if len(least) > 1 {
			slices.SortStableFunc(least, func(a, b int) int { return cmpFloat(res[a].OutageAmplification, res[b].OutageAmplification) })
			var each []string
			for _, i := range least {
				each = append(each, fmt.Sprintf("%v (%s)", res[i].Policy, outage(res[i])))
			}
			h = fmt.Sprintf("%s, in attempts per request arriving: of the policies that retry, %s added the least, within 0.02x of each other", during, joinAnd(each))
		}
		spread := worst.OutageAmplification-w.OutageAmplification > 0.02
		switch {
		case spread && worst.OutageAmplification > 1.1:
			h += fmt.Sprintf("; %v multiplied the load on the server %s", worst.Policy, outage(worst))
		case spread:
			h += fmt.Sprintf("; the most, %s, was %v's", outage(worst), worst.Policy)
		}
		out.Headlines = append(out.Headlines, h+".")
		if w.Throttled > 0 && w.RejectedLocally == 0 {
			out.Detail = append(out.Detail, fmt.Sprintf("%v's clients refused the retries of %d requests themselves once failures had drained their budgets.", w.Policy, w.Throttled))
		}
		if spread && worst.OutageAmplification > 1.1 {
			switch d := worst.SuccessRate - w.SuccessRate; {
			case d > 0.005:
				s := fmt.Sprintf("Holding the load down cost %v %.1f points of success rate against %v (%s against %s)",
					w.Policy, 100*d, worst.Policy, success(w), success(worst))
				if w.RecoveryGoodput > 0 || worst.RecoveryGoodput > 0 {
					s += fmt.Sprintf(", and after the %s it completed %s requests/s against %s", outageWord(c), rate(w.RecoveryGoodput), rate(worst.RecoveryGoodput))
				}
				out.Detail = append(out.Detail, s+".")
			case d <= 0:
				out.Detail = append(out.Detail, fmt.Sprintf("%v lost nothing for it: %s of its requests succeeded against %s for %v, "+
					"since retries sent into an outage fail too.", w.Policy, success(w), success(worst), worst.Policy))
			}
		}
	}

	// Every policy that did worse than no retries on what a user gets:
	// success rate, goodput over the run and after the outage. A value
	// is worse if it is lower as the table prints it.
	if base >= 0 {
		b := res[base]
		var worse []string
		for _, i := range retrying {
			x := res[i]
			var how []string
			for _, m := range []struct {
				what      string
				got, base float64
				format    func(float64) string
			}{
				{"success", x.SuccessRate, b.SuccessRate, share},
				{"goodput", x.Goodput, b.Goodput, func(v float64) string { return rate(v) + "/s" }},
				{"after the outage", x.RecoveryGoodput, b.RecoveryGoodput, func(v float64) string { return rate(v) + "/s" }},
			} {
				if m.got < m.base && m.format(m.got) != m.format(m.base) {
					how = append(how, fmt.Sprintf("%s %s against %s", m.what, m.format(m.got), m.format(m.base)))
				}
			}
			if recoveryKey(x) > recoveryKey(b) && recovered(x) != recovered(b) {
				how = append(how, fmt.Sprintf("recovery %s against %s", recovered(x), recovered(b)))
			}
			if len(how) == 0 {
				continue
			}
			worse = append(worse, fmt.Sprintf("%v (%s)", x.Policy, strings.Join(how, ", ")))
			if x.RejectedLocally > 0 && (x.Policy == sim.Adaptive || x.Policy == sim.ShedAdaptive) {
				out.Detail = append(out.Detail, fmt.Sprintf("%v: the clients' adaptive throttles kept %d attempts home, first attempts included: "+
					"they let through K times the accepts in their window, which the outage's failures fill, "+
					"so after the outage they go on rejecting until new accepts outweigh them.", x.Policy, x.RejectedLocally))
			}
		}
		if len(worse) > 0 {
			out.Headlines = append(out.Headlines, fmt.Sprintf("Worse than no retries: %s.", joinAnd(worse)))
		} else {
			out.Headlines = append(out.Headlines, "No policy did worse than no retries in success rate, goodput or recovery.")
		}
	}
	return out
}

// simCharts returns the offered load of every policy over time and its
// load amplification over time, each as small multiples: a chart per
// policy, on one scale, so that lines close together do not hide each
// other.
func simCharts(r *sim.Report) []svgplot.Figure {
	figs := []svgplot.Figure{offeredGrid(r), ampGrid(r)}
	if g := limitGrid(r); g != nil {
		figs = append(figs, g)
	}
	return figs
}

// outageWord names the shaded span of the charts: the outage, or the
// attack.
func outageWord(c sim.Config) string {
	if c.Shape == sim.FastCalls || c.Shape == sim.SlowClients {
		return "attack"
	}
	return "outage"
}

// Small multiples: the panel size, and the greys of the reference lines
// drawn under each policy's own.
const (
	panelWidth, panelHeight = 320, 260
	panelColumns            = 3
	baseColor               = "#aaaaaa"
	policyColor             = "#332288"
)

// panels returns one chart per policy, titled with the policy and its
// amplification in the outage, with the outage shaded; series gives each
// panel's lines, and the y axis reaches the largest Y of them all. Only
// the left column labels the y axis and the bottom row the x axis.
func panels(r *sim.Report, ylabel string, series func(res sim.Result) []svgplot.Series) []*svgplot.Chart {
	c := r.Config
	var out []*svgplot.Chart
	top := 0.0
	for i, res := range r.Results {
		ch := &svgplot.Chart{
			Title:  fmt.Sprintf("%v: %s in the outage", res.Policy, amp(res.OutageAmplification)),
			YLabel: ylabel,
			Width:  panelWidth,
			Height: panelHeight,
			Series: series(res),
		}
		if i >= len(r.Results)-panelColumns {
			ch.XLabel = "virtual time (s)"
		}
		if c.OutageLength > 0 {
			start := c.OutageStart.Seconds()
			ch.Bands = []svgplot.Band{{From: start, To: start + c.OutageLength.Seconds()}}
		}
		for _, s := range ch.Series {
			for _, p := range s.Points {
				if !math.IsNaN(p.Y) {
					top = max(top, p.Y)
				}
			}
		}
		out = append(out, ch)
	}
	for _, ch := range out {
		ch.YMax = top
	}
	return out
}

// offered returns the series of one policy's attempts per second.
func offered(r *sim.Report, res sim.Result) []svgplot.Point {
	iv := r.Interval.Seconds()
	var pts []svgplot.Point
	for i, v := range res.Offered {
		pts = append(pts, svgplot.Point{X: (float64(i) + 0.5) * iv, Y: v})
	}
	return pts
}

// amplification returns the series of one policy's attempts per arriving
// request.
func amplification(r *sim.Report, res sim.Result) []svgplot.Point {
	iv := r.Interval.Seconds()
	var pts []svgplot.Point
	for i, v := range res.Offered {
		a := math.NaN() // no request arrived: a gap in the line
		if i < len(r.Arrivals) && r.Arrivals[i] > 0 {
			a = v / r.Arrivals[i]
		}
		pts = append(pts, svgplot.Point{X: (float64(i) + 0.5) * iv, Y: a})
	}
	return pts
}

// baseline returns the no-retries result of r, if it has one.
func baseline(r *sim.Report) (sim.Result, bool) {
	for _, res := range r.Results {
		if res.Policy == sim.NoRetries {
			return res, true
		}
	}
	return sim.Result{}, false
}

// offeredGrid draws the offered load of each policy over time, over no
// retries' in grey and the server's capacity dashed, with the outage
// shaded.
func offeredGrid(r *sim.Report) *svgplot.Grid {
	c := r.Config
	base, hasBase := baseline(r)
	// What the server can complete: the attackers leave it all of it.
	full, down := c.Capacity, c.Capacity*c.OutageCapacity
	if outageWord(c) == "attack" {
		down = full
	}
	capacity := []svgplot.Point{{X: 0, Y: full}}
	if c.OutageLength > 0 {
		start, end := c.OutageStart.Seconds(), (c.OutageStart + c.OutageLength).Seconds()
		capacity = append(capacity, svgplot.Point{X: start, Y: full}, svgplot.Point{X: start, Y: down},
			svgplot.Point{X: end, Y: down}, svgplot.Point{X: end, Y: full})
	}
	capacity = append(capacity, svgplot.Point{X: c.Duration.Seconds(), Y: full})
	charts := panels(r, "attempts/s", func(res sim.Result) []svgplot.Series {
		var s []svgplot.Series
		if hasBase {
			s = append(s, svgplot.Series{Points: offered(r, base), Color: baseColor})
		}
		return append(s, svgplot.Series{Points: capacity, Color: "#000000", Dashed: true},
			svgplot.Series{Points: offered(r, res), Color: policyColor})
	})
	title := fmt.Sprintf("Offered load: %d clients at %.6g req/s each, %.6g req/s in all; server %.6g req/s",
		c.Clients, c.Rate, float64(c.Clients)*c.Rate, c.Capacity)
	if c.OutageLength > 0 {
		title += fmt.Sprintf(", %v %s (%s)", c.OutageLength, outageWord(c), c.Shape)
	}
	return &svgplot.Grid{
		Title:   title,
		Note:    fmt.Sprintf("Each panel: one policy (dark) against no retries (grey) and the server's capacity (dashed), on one scale; %v intervals; the %s shaded.", r.Interval, outageWord(c)),
		Columns: panelColumns,
		Charts:  charts,
	}
}

// ampGrid draws each policy's attempts per arriving request over time,
// over no retries' in grey, with the outage shaded: 1 is one attempt per
// request, and the area above it the load that retries add.
func ampGrid(r *sim.Report) *svgplot.Grid {
	base, hasBase := baseline(r)
	charts := panels(r, "attempts per new request", func(res sim.Result) []svgplot.Series {
		var s []svgplot.Series
		if hasBase {
			s = append(s, svgplot.Series{Points: amplification(r, base), Color: baseColor})
		}
		return append(s, svgplot.Series{Points: amplification(r, res), Color: policyColor})
	})
	for _, ch := range charts {
		ch.Marks = []svgplot.Mark{{Horizontal: true, Value: 1, Label: "1x"}}
	}
	return &svgplot.Grid{
		Title:   "Load amplification over time: attempts sent per request arriving",
		Note:    fmt.Sprintf("Each panel: one policy (dark) against no retries (grey), on one scale; %v intervals; the %s shaded.", r.Interval, outageWord(r.Config)),
		Columns: panelColumns,
		Charts:  charts,
	}
}

// limitGrid draws the concurrency limit of each policy's shedder over
// time, against the workers serving (dashed), with the outage shaded; nil
// when no policy sheds.
func limitGrid(r *sim.Report) *svgplot.Grid {
	c := r.Config
	iv := r.Interval.Seconds()
	workers := float64(c.Workers())
	serving := []svgplot.Point{{X: 0, Y: workers}}
	if c.OutageLength > 0 && (c.Shape == sim.Refuse || c.Shape == sim.Slow) {
		start, end, down := c.OutageStart.Seconds(), (c.OutageStart + c.OutageLength).Seconds(), math.Floor(workers*c.OutageCapacity)
		serving = append(serving, svgplot.Point{X: start, Y: workers}, svgplot.Point{X: start, Y: down},
			svgplot.Point{X: end, Y: down}, svgplot.Point{X: end, Y: workers})
	}
	serving = append(serving, svgplot.Point{X: c.Duration.Seconds(), Y: workers})
	var charts []*svgplot.Chart
	top := workers
	for _, res := range r.Results {
		if res.Limit == nil {
			continue
		}
		var pts []svgplot.Point
		for i, v := range res.Limit {
			pts = append(pts, svgplot.Point{X: float64(i+1) * iv, Y: v})
			top = max(top, v)
		}
		ch := &svgplot.Chart{
			Title: fmt.Sprintf("%v: the shedder's limit", res.Policy), XLabel: "virtual time (s)", YLabel: "requests in flight",
			Width: panelWidth, Height: panelHeight,
			Series: []svgplot.Series{{Points: serving, Color: "#000000", Dashed: true}, {Points: pts, Color: policyColor, Steps: true}},
		}
		if c.OutageLength > 0 {
			start := c.OutageStart.Seconds()
			ch.Bands = []svgplot.Band{{From: start, To: start + c.OutageLength.Seconds()}}
		}
		charts = append(charts, ch)
	}
	if charts == nil {
		return nil
	}
	for _, ch := range charts {
		ch.YMax = top
	}
	return &svgplot.Grid{
		Title:   "The shedder's concurrency limit over time (package shed's limiter on virtual time)",
		Note:    fmt.Sprintf("Each panel: the limit at the end of each %v (dark) against the server's workers serving (dashed); the %s shaded.", r.Interval, outageWord(c)),
		Columns: panelColumns,
		Charts:  charts,
	}
}
