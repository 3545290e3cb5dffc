package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/rebound-go/rebound/internal/sim"
)

const rateLimitedIntro = "A rate-limited API: a server accepting 20 req/s with a burst of 2, refusing the rest with a 1s wait; " +
	"calls with a 10s deadline, up to 3 attempts. Succeeded, requests the server saw per call, and, with " +
	"ten processes, the least and most any process got of the server over the second half, in fair shares, " +
	"and Jain's fairness index of those shares (1 when all are equal)."

// runRateLimited prints the rate-limited API table: every policy against
// a server limited to 20 req/s with a burst of 2, in each of scenarios
// (sim.RateScenarios: one process and ten sharing the limit). html, if not
// "", gets the same as a page.
func runRateLimited(ctx context.Context, scenarios []sim.RateScenario, seed uint64, html string, stdout, stderr io.Writer) int {
	cols := []string{"scenario"}
	for _, p := range sim.RatePolicies {
		cols = append(cols, p.String())
	}
	table := [][]string{cols}
	for _, s := range scenarios {
		res, err := sim.RunRateLimited(ctx, s, seed)
		if err != nil {
			fmt.Fprintf(stderr, "rebound sim: -ratelimited: %v\n", err)
			return 1
		}
		cells := []string{s.Name}
		for _, r := range res {
			c := fmt.Sprintf("%.1f%%, %.2fx", 100*r.Succeeded, r.Load)
			if s.Processes > 1 {
				c += fmt.Sprintf(", %.2f-%.2f, Jain %.3f", r.MinShare, r.MaxShare, r.Jain)
			}
			cells = append(cells, c)
		}
		table = append(table, cells)
	}
	fmt.Fprintf(stdout, "%s\n\n", wrap(rateLimitedIntro, 100))
	fmt.Fprintf(stdout, "| %s |\n|%s\n", strings.Join(table[0], " | "), strings.Repeat("---|", len(table[0])))
	for _, row := range table[1:] {
		fmt.Fprintf(stdout, "| %s |\n", strings.Join(row, " | "))
	}
	if html == "" {
		return 0
	}
	page := htmlReport{
		Title:    "rebound sim -ratelimited",
		Scenario: []string{rateLimitedIntro},
		Tables:   []htmlTable{{Caption: fmt.Sprintf("Results (seed %d)", seed), Rows: table}},
	}
	if err := page.write(html); err != nil {
		fmt.Fprintf(stderr, "rebound sim: -html: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "\nwrote the report (table) to %s\n", html)
	return 0
}
