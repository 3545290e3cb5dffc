package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/rebound-go/rebound/internal/sim"
)

// fleetHeader names each policy's column in the fleet table.
var fleetHeader = map[sim.Policy]string{
	sim.NoRetries:    "no retries",
	sim.Naive:        "naive",
	sim.Throttled:    "A6 throttle per client",
	sim.Bucket:       "token bucket per client",
	sim.Adaptive:     "adaptive throttle per client",
	sim.Shed:         "server shedding + pushback",
	sim.ShedAdaptive: "shedding + adaptive throttle",
	sim.Ratio:        "ratio budget per client",
	sim.Concurrency:  "concurrency budget per client",
}

// runFleet runs the fleet-scale rows (sim.FleetScenarios) from c and
// prints them as a Markdown table: the load amplification during the
// outage, and the goodput over the run, of every policy. html, if not "",
// gets the same as a page.
func runFleet(ctx context.Context, c sim.Config, rows []sim.FleetScenario, html string, stdout, stderr io.Writer) int {
	if code, ok := simRunError(c.Validate(), stderr); !ok {
		return code
	}
	reports, err := sim.RunFleet(ctx, c, rows)
	if err != nil {
		fmt.Fprintf(stderr, "rebound sim: -fleet: %v\n", err)
		return 1
	}
	intro := fleetIntro(reports)
	table := fleetTable(reports)
	fmt.Fprintf(stdout, "%s\n\n", wrap(intro, 100))
	fmt.Fprintf(stdout, "| %s |\n", strings.Join(table[0], " | "))
	fmt.Fprintf(stdout, "|%s\n", strings.Repeat("---|", len(table[0])))
	for _, row := range table[1:] {
		fmt.Fprintf(stdout, "| %s |\n", strings.Join(row, " | "))
	}
	concl := conclusion{Headlines: fleetHeadlines(reports), Detail: fleetLegend(reports)}
	fmt.Fprintln(stdout)
	concl.print(stdout)
	if html == "" {
		return 0
	}
	page := htmlReport{
		Title:      "rebound sim -fleet",
		Scenario:   []string{intro},
		Conclusion: concl,
		Tables:     []htmlTable{{Caption: "Load amplification during the outage (goodput over the run, recovery)", Rows: table}},
	}
	if err := page.write(html); err != nil {
		fmt.Fprintf(stderr, "rebound sim: -html: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "\nwrote the report (table, conclusion) to %s\n", html)
	return 0
}

func fleetIntro(reports []*sim.Report) string {
	return fmt.Sprintf("Load amplification during the outage (attempts sent per request arriving), goodput over "+
		"the run (requests succeeded per second) and recovery (the time from the outage's end until the requests "+
		"arriving succeed at 90%% of their share before it, or never); the same %v outage, or attack, and 1000 req/s "+
		"in every row. The first three rows' server has no queue and refuses at once what its workers cannot take "+
		"(a full outage: every attempt fails at once, as when a dependency is down); the others' queues it, up to "+
		"each request's %v deadline.", reports[0].Config.OutageLength, reports[0].Config.Deadline)
}

// fleetCell is a policy's cell of the fleet table, and how the
// conclusion quotes it: its load amplification during the outage, its
// goodput and its recovery.
func fleetCell(res sim.Result) string {
	return fmt.Sprintf("%s (%.0f/s, %s)", amp(res.OutageAmplification), res.Goodput, recovered(res))
}

// fleetTable returns the rows of every scenario, headings first.
func fleetTable(reports []*sim.Report) [][]string {
	cols := []string{"clients x rate"}
	for _, p := range sim.Policies {
		cols = append(cols, fleetHeader[p])
	}
	t := [][]string{cols}
	for i, r := range reports {
		cells := []string{sim.FleetScenarios[i].Name}
		for _, res := range r.Results {
			cells = append(cells, fleetCell(res))
		}
		t = append(t, cells)
	}
	return t
}

// fleetLegend explains the fleet table, a paragraph per kind of policy
// and of row, with the figures of reports.
func fleetLegend(reports []*sim.Report) []string {
	outage := reports[0].Config.OutageLength
	most := 0.0 // the shedder's highest amplification in any row
	for _, r := range reports {
		most = max(most, r.Results[sim.Shed].OutageAmplification)
	}
	out := []string{
		"Per-client budgets (A6 throttle, token bucket) learn only from their own failures: 10,000 clients " +
			"at 0.1 req/s each see too few to react, and the load multiplies as if they had none. The budgets of " +
			"service meshes fare no better there: their floors (10 retries a second for the ratio budget, 3 in " +
			"flight for the concurrency budget) are more than a thin client ever asks for, and with 50 busy " +
			"clients the ratio budget's floor still adds half the load.",
		fmt.Sprintf("The server sees every client: its shedder (package shed's limiter, on virtual time) sheds what is beyond "+
			"its limit and speaks for the server's own fast UNAVAILABLE, and once more than a tenth of its recent "+
			"requests were shed or refused it answers \"don't retry\", so the load it sees during the outage is at "+
			"most %s in any row, from 50 busy clients as from 10,000 thin ones. In a full outage the shedder still "+
			"answers (its process is up, its capacity is not), so every retry is called off; a server whose process "+
			"is gone gives no pushback.", amp(most)),
		fmt.Sprintf("The adaptive throttle counts every attempt, so it learns as fast in a "+
			"thin client as in a busy one, but it lets through K (2) times the accepts still in its 2-minute "+
			"window, which a %v outage barely dents, and it keeps rejecting after the outage until new "+
			"accepts outweigh the outage's requests: it pays in goodput and recovery.", outage),
	}
	// What a queue changes, from the rows that have one.
	for _, r := range reports {
		res := r.Results
		when := map[sim.Shape]string{sim.Slow: "When capacity halves and requests queue", sim.Hang: "When requests hang"}[r.Config.Shape]
		if when == "" || r.Config.Clients != 10_000 {
			continue
		}
		none, shed := res[sim.NoRetries], res[sim.Shed]
		out = append(out, fmt.Sprintf("%s, nothing fails retryably, so no client policy retries; without a shedder the "+
			"server holds what it cannot serve up to the deadline (p99 time to success %s, against %s with the shedder) "+
			"and completes more of it (%.0f/s against %.0f/s), late.", when, simDuration(none.P99), simDuration(shed.P99), none.Goodput, shed.Goodput))
	}
	out = append(out, "The attackers run beside the honest clients from the outage's start to its end: "+
		"one client's fast calls (half failing at once, half succeeding without work), or slow clients' "+
		"streams that hold nothing while they send nothing. Without a shedder they cost the honest clients "+
		"nothing; the rows show whether they turn the shedder against them.")
	return out
}

// fleetHeadlines says, for each row, which policies held the load during
// the outage lowest and which raised it most, and which did worse than no
// retries, with the table's figures.
func fleetHeadlines(reports []*sim.Report) []string {
	var out []string
	for i, r := range reports {
		var retrying []sim.Result
		var base sim.Result
		for _, res := range r.Results {
			if res.Policy != sim.NoRetries {
				retrying = append(retrying, res)
			} else {
				base = res
			}
		}
		if len(retrying) == 0 {
			continue
		}
		idx := leaders(len(retrying), func(j int) float64 { return retrying[j].OutageAmplification }, false, 0.02)
		slices.SortStableFunc(idx, func(a, b int) int {
			return cmpFloat(retrying[a].OutageAmplification, retrying[b].OutageAmplification)
		})
		var low []string
		for _, j := range idx {
			low = append(low, fmt.Sprintf("%s (%s)", fleetHeader[retrying[j].Policy], amp(retrying[j].OutageAmplification)))
		}
		worst := slices.MaxFunc(retrying, func(a, b sim.Result) int { return cmpFloat(a.OutageAmplification, b.OutageAmplification) })
		h := fmt.Sprintf("%s: least load in the outage, %s; most, %s (%s).",
			sim.FleetScenarios[i].Name, joinAnd(low), fleetHeader[worst.Policy], amp(worst.OutageAmplification))
		if len(idx) == len(retrying) {
			least, most := retrying[idx[0]], retrying[idx[len(idx)-1]]
			h = fmt.Sprintf("%s: every policy that retries between %s and %s in the outage.",
				sim.FleetScenarios[i].Name, amp(least.OutageAmplification), amp(most.OutageAmplification))
			if amp(least.OutageAmplification) == amp(most.OutageAmplification) {
				h = fmt.Sprintf("%s: every policy that retries at %s in the outage.", sim.FleetScenarios[i].Name, amp(least.OutageAmplification))
			}
		}
		// Worse than no retries: less goodput, or a later recovery, as
		// the table prints them.
		var worse []string
		for _, x := range retrying {
			var how []string
			if g, b := fmt.Sprintf("%.0f/s", x.Goodput), fmt.Sprintf("%.0f/s", base.Goodput); x.Goodput < base.Goodput && g != b {
				how = append(how, "goodput "+g+" against "+b)
			}
			if recoveryKey(x) > recoveryKey(base) && recovered(x) != recovered(base) {
				how = append(how, "recovery "+recovered(x)+" against "+recovered(base))
			}
			if len(how) > 0 {
				worse = append(worse, fmt.Sprintf("%s (%s)", fleetHeader[x.Policy], strings.Join(how, ", ")))
			}
		}
		if len(worse) > 0 {
			h += " Worse than no retries: " + joinAnd(worse) + "."
		} else {
			h += " None did worse than no retries."
		}
		out = append(out, h)
	}
	return out
}
