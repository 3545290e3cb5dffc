package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/rebound-go/rebound/internal/sim"
)

// runRateLimited prints the rate-limited API table: every policy against
// a server limited to 20 req/s with a burst of 2, one process and ten
// sharing the limit.
func runRateLimited(ctx context.Context, seed uint64, stdout, stderr io.Writer) int {
	fmt.Fprintln(stdout, "A rate-limited API: a server accepting 20 req/s with a burst of 2, refusing the rest with a 1s wait;")
	fmt.Fprintln(stdout, "calls with a 10s deadline, up to 3 attempts. Succeeded, requests the server saw per call, and, with")
	fmt.Fprintln(stdout, "ten processes, the least and most any process got of the server over the second half, in fair shares,")
	fmt.Fprintln(stdout, "and Jain's fairness index of those shares (1 when all are equal).")
	fmt.Fprintln(stdout)
	cols := []string{"scenario"}
	for _, p := range sim.RatePolicies {
		cols = append(cols, p.String())
	}
	fmt.Fprintf(stdout, "| %s |\n|%s\n", strings.Join(cols, " | "), strings.Repeat("---|", len(cols)))
	for _, s := range sim.RateScenarios {
		res, err := sim.RunRateLimited(ctx, s, seed)
		if err != nil {
			fmt.Fprintf(stderr, "sim: -ratelimited: %v\n", err)
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
		fmt.Fprintf(stdout, "| %s |\n", strings.Join(cells, " | "))
	}
	return 0
}
