package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/shedrule"
)

// Streams of the seeded generator for the fleet-scale policies, apart from
// the arrivals' and the backoff jitter's, so that adding them changes
// nothing for the others.
const (
	streamThrottle = 3
	streamShed     = 4
)

// errUnavailable is the server's refusal when it sheds with pushback; each
// refusal carries its own pushback, see refusal.
var errUnavailable = errors.New("unavailable")

// refusal is the error of a refused attempt: a plain retryable refusal, or
// one carrying the shedder's pushback (a delay, or stop when pushback < 0).
func refusal(pushback time.Duration) error {
	switch {
	case pushback == 0:
		return errRefused
	case pushback < 0:
		return rebound.Mark(errUnavailable, rebound.RetryInfo{Safety: rebound.SafetyYes, ServerStop: true})
	}
	return rebound.Mark(errUnavailable, rebound.RetryInfo{Safety: rebound.SafetyYes, HasRetryAfter: true, RetryAfter: pushback})
}

// sheds reports whether p puts the server's shedder in front.
func (p Policy) sheds() bool { return p == Shed || p == ShedAdaptive }

// throttles reports whether p gives each client an adaptive throttle.
func (p Policy) throttles() bool { return p == Adaptive || p == ShedAdaptive }

// fleet is the state of the fleet-scale policies in an engine: each
// client's adaptive throttle, and the server's shed window.
type fleet struct {
	throttles []*rebound.AdaptiveThrottle // by client; nil unless the policy throttles
	draw      *rand.Rand                  // for the throttles
	shed      *shedrule.Window            // nil unless the policy sheds
	shedDraw  *rand.Rand                  // spreads the pushback delays
}

func newFleet(c Config, p Policy) (fleet, error) {
	var f fleet
	if p.throttles() {
		f.draw = rand.New(rand.NewPCG(c.Seed, streamThrottle))
		f.throttles = make([]*rebound.AdaptiveThrottle, c.Clients)
		for i := range f.throttles {
			th, err := rebound.NewAdaptiveThrottle(c.Adaptive)
			if err != nil {
				return f, err
			}
			f.throttles[i] = th
		}
	}
	if p.sheds() {
		f.shed = shedrule.NewWindow(time.Second)
		f.shedDraw = rand.New(rand.NewPCG(c.Seed, streamShed))
	}
	return f, nil
}

// allow asks client's throttle whether to send an attempt at now.
func (f *fleet) allow(client int32, now time.Time) bool {
	if f.throttles == nil {
		return true
	}
	return f.throttles[client].Allow(now, f.draw.Float64())
}

// accepted tells client's throttle that the server accepted an attempt.
func (f *fleet) accepted(client int32, now time.Time) {
	if f.throttles != nil {
		f.throttles[client].Accepted(now)
	}
}

// admitted counts an attempt the server admitted.
func (f *fleet) admitted(now time.Time) {
	if f.shed != nil {
		f.shed.Admit(now)
	}
}

// pushback is what a refused attempt is told: 0 without a shedder, else
// the shedder's delay, or -1 for stop. The shedder's limit is the number
// of workers serving: the simulation gives it the limit an adaptive
// limiter converges to, and models its pushback rule, which is shared
// with package shed.
func (f *fleet) pushback(c Config, now time.Time, limit int) time.Duration {
	if f.shed == nil {
		return 0
	}
	share, perSecond := f.shed.Shed(now)
	d, stop := shedrule.Pushback(share, c.RetryShare, perSecond, c.Latency, limit, f.shedDraw.Float64())
	if stop {
		return -1
	}
	return d
}

func adaptiveK(c Config) float64 {
	if c.Adaptive.K == 0 {
		return rebound.DefaultAdaptiveThrottle().K
	}
	return c.Adaptive.K
}

func adaptiveWindow(c Config) time.Duration {
	if c.Adaptive.Window == 0 {
		return rebound.DefaultAdaptiveThrottle().Window
	}
	return c.Adaptive.Window
}

// FleetScenario is one row of the fleet-scale comparison: the same total
// load of 1000 requests per second, from few busy clients or from many
// thin ones, through a full outage or a brownout.
type FleetScenario struct {
	// Name describes the row, such as "10,000 x 0.1 req/s, full outage".
	Name string
	// Clients and Rate replace those of the base config.
	Clients int
	Rate    float64
	// OutageCapacity replaces the base config's.
	OutageCapacity float64
}

// FleetScenarios are the rows of issue 19's table: 50 clients at 20
// requests per second and 10,000 at 0.1, through the default 30s outage,
// full or at half capacity.
var FleetScenarios = []FleetScenario{
	{"50 x 20 req/s, full outage", 50, 20, 0},
	{"10,000 x 0.1 req/s, full outage", 10_000, 0.1, 0},
	{"10,000 x 0.1 req/s, 50% brownout", 10_000, 0.1, 0.5},
}

// RunFleet runs every policy on each of scenarios, built from base, and
// returns their reports in order. It stops at the first error, as [Run].
func RunFleet(ctx context.Context, base Config, scenarios []FleetScenario) ([]*Report, error) {
	out := make([]*Report, 0, len(scenarios))
	for _, sc := range scenarios {
		c := base
		c.Clients, c.Rate, c.OutageCapacity = sc.Clients, sc.Rate, sc.OutageCapacity
		r, err := Run(ctx, c)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sc.Name, err)
		}
		out = append(out, r)
	}
	return out, nil
}
