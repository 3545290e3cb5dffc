package sim

import (
	"context"
	"testing"
)

// The fleet-scale table: per-client budgets lose their grip when each
// client sees a thin slice of the traffic, the server's shedder does not,
// and the adaptive throttle does not depend on the fleet's size.
func TestFleet(t *testing.T) {
	reports, err := RunFleet(context.Background(), DefaultConfig, FleetScenarios)
	if err != nil {
		t.Fatal(err)
	}
	few, many, brown := reports[0].Results, reports[1].Results, reports[2].Results
	for _, r := range reports {
		checkInvariants(t, r)
	}
	// The cliff: the per-client budgets protect 50 busy clients, not
	// 10,000 thin ones.
	if few[Throttled].OutageAmplification > 1.1 || many[Throttled].OutageAmplification < 2 {
		t.Errorf("A6 throttle: %.2fx with 50 clients, %.2fx with 10,000; want <= 1.1x and >= 2x",
			few[Throttled].OutageAmplification, many[Throttled].OutageAmplification)
	}
	if many[Bucket].OutageAmplification != many[Naive].OutageAmplification {
		t.Errorf("token bucket with 10,000 clients: %.2fx, naive %.2fx; want no protection",
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
		t.Errorf("shed+adaptive, 10,000 clients, full outage: %.2fx, want below 1", a)
	}
	// The adaptive throttle counts every attempt, so a thin client learns
	// as fast as a busy one: within 10% across a 200-fold change in rate.
	if a, b := few[Adaptive].OutageAmplification, many[Adaptive].OutageAmplification; b > 1.1*a || a > 1.1*b || b >= many[Naive].OutageAmplification {
		t.Errorf("adaptive: %.2fx with 50 clients, %.2fx with 10,000 (naive %.2fx)", a, b, many[Naive].OutageAmplification)
	}
}
