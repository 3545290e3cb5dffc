package sim

import (
	"testing"
	"time"

	"github.com/rebound-go/rebound"
)

// TestMeshBudgetsHoldTheirRatios runs the default full outage with a
// ratio budget of 10% (no floor) and a concurrency budget of 10% with a
// floor of 1. A ratio budget bounds the retries of every 10s window by a
// tenth of its requests, so over the run by a fifth at most (a window can
// reach into the one before). In a full outage a request fails within 1ms,
// so few are in flight and the floor rules: each client has at most one
// retry in flight, waiting out its backoff (about 0.75s), against 20 new
// requests a second.
//
// Each bound is per client, so -short runs it at a fifth of the size, 10
// clients at 20 req/s against 250 req/s: over seeds 1-8 the ratio
// budget gives 1.08x over the run and 1.10x in the outage, the
// concurrency budget 1.03x and 1.03x (full size, seed 1: 1.04x and 1.10x,
// 1.01x and 1.03x).
func TestMeshBudgetsHoldTheirRatios(t *testing.T) {
	t.Parallel()
	c := DefaultConfig
	if testing.Short() {
		c = fifthOfDefault()
	}
	checkMesh(t, c)
}

// checkMesh runs c with the budgets of TestMeshBudgetsHoldTheirRatios
// and judges them.
func checkMesh(t *testing.T, c Config) {
	t.Helper()
	c.Ratio = rebound.RatioBudgetConfig{Ratio: 0.1, TTL: 10 * time.Second}
	c.Concurrency = rebound.ConcurrencyBudgetConfig{Percent: 10, MinConcurrency: 1}
	res := runPolicies(t, c, Ratio, Concurrency, Naive)
	ratio, conc, naive := res[0], res[1], res[2]
	for _, r := range []Result{ratio, conc} {
		if !(r.Amplification > 1 && r.Amplification <= 1.2) || !(r.OutageAmplification > 1 && r.OutageAmplification <= 1.2) {
			t.Errorf("%v: amplification %.3f, in the outage %.3f; want each in (1, 1.2]", r.Policy, r.Amplification, r.OutageAmplification)
		}
		if r.Throttled == 0 || r.OutageAmplification >= naive.OutageAmplification {
			t.Errorf("%v: %d throttled, outage amplification %.2f (naive %.2f)", r.Policy, r.Throttled, r.OutageAmplification, naive.OutageAmplification)
		}
	}
	t.Logf("ratio %.3f (outage %.3f), concurrency %.3f (outage %.3f)", ratio.Amplification, ratio.OutageAmplification, conc.Amplification, conc.OutageAmplification)
}

func TestMeshBudgetConfigRejected(t *testing.T) {
	for field, mod := range map[string]func(*Config){
		"Ratio.Ratio":                func(c *Config) { c.Ratio.Ratio = -1 },
		"Ratio.MinRetriesPerSecond":  func(c *Config) { c.Ratio.MinRetriesPerSecond = -1 },
		"Ratio.TTL":                  func(c *Config) { c.Ratio.TTL = 0 },
		"Concurrency.Percent":        func(c *Config) { c.Concurrency.Percent = -5 },
		"Concurrency.MinConcurrency": func(c *Config) { c.Concurrency.MinConcurrency = -1 },
	} {
		c := DefaultConfig
		mod(&c)
		fe, ok := c.Validate().(*FieldError)
		if !ok || fe.Field != field {
			t.Errorf("%s: Validate() = %v", field, c.Validate())
		}
	}
}
