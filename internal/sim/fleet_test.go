package sim

import (
	"context"
	"testing"
)

// fleetRows returns TestFleet's base config and rows: issue 19's table,
// or with -short the same rows at a fifth of the size, 10 clients x 20
// req/s and 2,000 x 0.1 req/s against a fifth of the capacity. What
// TestFleet asserts depends on each client's rate, not on how many there
// are: over seeds 1-8 the fifth gives the A6 throttle 1.00-1.01x and
// 2.17-2.22x (full size 1.01x and 2.20x), shed+adaptive 1.00-1.01 of no
// retries' goodput in the brownout (full 1.00), and the adaptive throttle
// 1.03-1.06x between the two rates (full 1.03x).
func fleetRows() (Config, []FleetScenario) {
	if !testing.Short() {
		return DefaultConfig, FleetScenarios
	}
	const fifth = 5
	c := DefaultConfig
	c.Capacity /= fifth
	rows := make([]FleetScenario, len(FleetScenarios))
	for i, s := range FleetScenarios {
		s.Clients /= fifth
		rows[i] = s
	}
	return c, rows
}

// The fleet-scale table: per-client budgets lose their grip when each
// client sees a thin slice of the traffic, the server's shedder does not,
// and the adaptive throttle does not depend on the fleet's size.
func TestFleet(t *testing.T) {
	t.Parallel()
	base, rows := fleetRows()
	reports, err := RunFleet(context.Background(), base, rows)
	if err != nil {
		t.Fatal(err)
	}
	few, many, brown := reports[0].Results, reports[1].Results, reports[2].Results
	for _, r := range reports {
		checkInvariants(t, r)
	}
	// The cliff: the per-client budgets protect 50 busy clients, not
	// 10,000 thin ones (with -short, 10 and 2,000).
	if few[Throttled].OutageAmplification > 1.1 || many[Throttled].OutageAmplification < 2 {
		t.Errorf("A6 throttle: %.2fx with %d clients, %.2fx with %d; want <= 1.1x and >= 2x",
			few[Throttled].OutageAmplification, rows[0].Clients, many[Throttled].OutageAmplification, rows[1].Clients)
	}
	if many[Bucket].OutageAmplification != many[Naive].OutageAmplification {
		t.Errorf("token bucket with the thin clients: %.2fx, naive %.2fx; want no protection",
			many[Bucket].OutageAmplification, many[Naive].OutageAmplification)
	}
	// The target: in the thin brownout, the shedder holds the
	// amplification to 1.1x without losing goodput to no retries.
	for _, p := range []Policy{Shed, ShedAdaptive} {
		if a := brown[p].OutageAmplification; a > 1.1 {
			t.Errorf("%v in the brownout: %.2fx, want <= 1.1x", p, a)
		}
		if g, none := brown[p].Goodput, brown[NoRetries].Goodput; g < 0.99*none {
			t.Errorf("%v in the brownout: goodput %.1f/s, no retries %.1f/s", p, g, none)
		}
	}
	if brown[Shed].Goodput < brown[NoRetries].Goodput {
		t.Errorf("shed in the brownout: goodput %.1f/s below no retries' %.1f/s", brown[Shed].Goodput, brown[NoRetries].Goodput)
	}
	// A full outage: the shedder says "don't retry" to nearly every
	// refusal, and the throttles on top send less than one attempt per
	// request.
	for _, res := range [][]Result{few, many} {
		if a := res[Shed].OutageAmplification; a > 1.1 {
			t.Errorf("shed in a full outage: %.2fx", a)
		}
		if res[Shed].PushedBack == 0 {
			t.Error("shed: no request was told to stop")
		}
	}
	if a := many[ShedAdaptive].OutageAmplification; a >= 1 {
		t.Errorf("shed+adaptive, thin clients, full outage: %.2fx, want below 1", a)
	}
	// The adaptive throttle counts every attempt, so a thin client learns
	// as fast as a busy one: within 10% across a 200-fold change in rate.
	if a, b := few[Adaptive].OutageAmplification, many[Adaptive].OutageAmplification; b > 1.1*a || a > 1.1*b || b >= many[Naive].OutageAmplification {
		t.Errorf("adaptive: %.2fx with %d clients, %.2fx with %d (naive %.2fx)", a, rows[0].Clients, b, rows[1].Clients, many[Naive].OutageAmplification)
	}
}
