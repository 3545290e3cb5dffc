package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

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

// runFleet runs the fleet-scale rows from c and prints them as a Markdown
// table: the load amplification during the outage, and the goodput over
// the run, of every policy. html, if not "", gets the same as a page.
func runFleet(ctx context.Context, c sim.Config, html string, stdout, stderr io.Writer) int {
	if code, ok := simRunError(c.Validate(), stderr); !ok {
		return code
	}
	reports, err := sim.RunFleet(ctx, c, sim.FleetScenarios)
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
	concl := conclusion{Headlines: fleetHeadlines(reports), Detail: fleetLegend(c.OutageLength)}
	fmt.Fprintln(stdout)
	concl.print(stdout)
	if html == "" {
		return 0
	}
	page := htmlReport{
		Title:      "rebound sim -fleet",
		Scenario:   []string{intro},
		Conclusion: concl,
		Tables:     []htmlTable{{Caption: "Load amplification during the outage (goodput over the run)", Rows: table}},
	}
	if err := page.write(html); err != nil {
		fmt.Fprintf(stderr, "rebound sim: -html: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "\nwrote the report (table, conclusion) to %s\n", html)
	return 0
}

func fleetIntro(reports []*sim.Report) string {
	return fmt.Sprintf("Load amplification during the outage (attempts sent per request arriving), and goodput over "+
		"the run (requests succeeded per second); the same %v outage and 1000 req/s in every row.", reports[0].Config.OutageLength)
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
			cells = append(cells, fmt.Sprintf("%s (%.0f/s)", amp(res.OutageAmplification), res.Goodput))
		}
		t = append(t, cells)
	}
	return t
}

// fleetLegend explains the fleet table, a paragraph per kind of policy;
// outage is the outage's length.
func fleetLegend(outage time.Duration) []string {
	return []string{
		"Per-client budgets (A6 throttle, token bucket) learn only from their own failures: 10,000 clients " +
			"at 0.1 req/s each see too few to react, and the load multiplies as if they had none. The budgets of " +
			"service meshes fare no better there: their floors (10 retries a second for the ratio budget, 3 in " +
			"flight for the concurrency budget) are more than a thin client ever asks for, and with 50 busy " +
			"clients the ratio budget's floor still adds half the load.",
		"The server sees every client: shedding refuses what it cannot serve at once, and once more than a tenth of " +
			"its recent requests were refused it answers \"don't retry\", so the fleet adds at most 1.1x " +
			"whatever its size. In a full outage the shedder still answers (its process is up, its capacity " +
			"is not), so every retry is called off; a server whose process is gone gives no pushback.",
		fmt.Sprintf("The adaptive throttle counts every attempt, so it learns as fast in a "+
			"thin client as in a busy one, but it lets through K (2) times the accepts still in its 2-minute "+
			"window, which a %v outage barely dents, and it keeps rejecting after the outage until new "+
			"accepts outweigh the outage's requests: it pays in goodput. On top of the shedder it sends "+
			"less than one attempt per request in a full outage.", outage),
	}
}

// fleetHeadlines says, for each row, which policies held the load during
// the outage lowest and which raised it most, with the table's figures.
func fleetHeadlines(reports []*sim.Report) []string {
	var out []string
	for i, r := range reports {
		var retrying []sim.Result
		for _, res := range r.Results {
			if res.Policy != sim.NoRetries {
				retrying = append(retrying, res)
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
		out = append(out, fmt.Sprintf("%s: least load in the outage, %s; most, %s (%s).",
			sim.FleetScenarios[i].Name, joinAnd(low), fleetHeader[worst.Policy], amp(worst.OutageAmplification)))
	}
	return out
}
