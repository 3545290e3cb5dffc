package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/shedrule"
	"github.com/rebound-go/rebound/shed"
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
// client's adaptive throttle, and the server's shedder.
type fleet struct {
	throttles []*rebound.AdaptiveThrottle // by client; nil unless the policy throttles
	draw      *rand.Rand                  // for the throttles
	// lim is the shedder's limiter, package shed's own rules on
	// virtual time; nil unless the policy sheds.
	lim      *shedrule.Limiter
	shedDraw *rand.Rand // spreads the pushback delays
}

// shedConfig is the shedder's: shed.DefaultConfig, with c's RetryShare.
func shedConfig(c Config) shedrule.Config {
	d := shed.DefaultConfig()
	return shedrule.Config{InitialLimit: d.InitialLimit, MinLimit: d.MinLimit, MaxLimit: d.MaxLimit,
		Tolerance: d.Tolerance, RetryShare: c.RetryShare, Window: d.Window}
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
		f.lim = shedrule.NewLimiter(shedConfig(c))
		f.shedDraw = rand.New(rand.NewPCG(c.Seed, streamShed))
		warm(f.lim, c)
	}
	return f, nil
}

// warmUp is how long the shedder serves the healthy load before the run,
// and warmUpRate the most requests a second it serves then.
const (
	warmUp     = 20 * time.Second
	warmUpRate = 10_000
)

// warm has lim serve the healthy load for warmUp before time 0: requests
// from every client in turn, at the clients' rate (at most the server's
// capacity and warmUpRate), each served in Latency. The run then starts
// from a shedder in its steady state, with a baseline and a limit learnt,
// as the server it models is before its outage, rather than from
// InitialLimit, which would shed the first fraction of a second's load
// of any server that needs more in flight.
func warm(lim *shedrule.Limiter, c Config) {
	rate := min(float64(c.Clients)*c.Rate, c.Capacity, warmUpRate)
	gap := time.Duration(float64(time.Second) / rate)
	var (
		held []shedrule.Request // admitted, in the order they end
		ends []time.Time
		head int
	)
	client := 0
	for t := epoch.Add(-warmUp); !t.Add(c.Latency).After(epoch); t = t.Add(gap) {
		for head < len(held) && !ends[head].After(t) {
			lim.End(ends[head], &held[head], true)
			head++
		}
		if head == len(held) {
			held, ends, head = held[:0], ends[:0], 0
		}
		held = append(held, shedrule.Request{})
		if v := lim.Admit(t, nil, "", peerOf(int32(client)), 0.5, &held[len(held)-1]); v.Admitted {
			ends = append(ends, t.Add(c.Latency))
		} else {
			held = held[:len(held)-1]
		}
		client = (client + 1) % c.Clients
	}
	for ; head < len(held); head++ {
		lim.End(ends[head], &held[head], true)
	}
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

// admit asks the shedder, if any, to admit a request from peer at now
// into r. When it sheds the request, ok is false and pushback is what the
// client is told: a delay, or -1 for stop.
func (f *fleet) admit(now time.Time, peer uint64, r *shedrule.Request) (pushback time.Duration, ok bool) {
	if f.lim == nil {
		return 0, true
	}
	v := f.lim.Admit(now, nil, "", peer, f.shedDraw.Float64(), r)
	if v.Admitted {
		return 0, true
	}
	return pushbackOf(v), false
}

// refuse ends r, which its handler failed at once with UNAVAILABLE and
// no pushback of its own, and returns the pushback the shedder, if any,
// gives it: 0 without a shedder.
func (f *fleet) refuse(now time.Time, r *shedrule.Request) time.Duration {
	if f.lim == nil {
		return 0
	}
	v := f.lim.Refuse(now, r, f.shedDraw.Float64())
	f.lim.End(now, r, false)
	return pushbackOf(v)
}

// end ends r at now, served whole or not.
func (f *fleet) end(now time.Time, r *shedrule.Request, served bool) {
	if f.lim != nil {
		f.lim.End(now, r, served)
	}
}

// wait and unwait bracket a handler's wait on its client.
func (f *fleet) wait(now time.Time, r *shedrule.Request) {
	if f.lim != nil {
		f.lim.Wait(now, r)
	}
}

func (f *fleet) unwait(now time.Time, r *shedrule.Request) {
	if f.lim != nil {
		f.lim.Unwait(now, r)
	}
}

// pushbackOf is a verdict's pushback as an event carries it: a delay, or
// -1 for stop.
func pushbackOf(v shedrule.Verdict) time.Duration {
	if v.Stop {
		return -1
	}
	return max(v.Delay, 1) // 0 means no pushback; the rule's floor is 1ms anyway
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
// thin ones, through an outage of some shape, or beside an attacker.
type FleetScenario struct {
	// Name describes the row, such as "10,000 x 0.1 req/s, full outage".
	Name string
	// Clients, Rate, OutageCapacity, Shape and AttackRate replace those
	// of the base config.
	Clients        int
	Rate           float64
	OutageCapacity float64
	Shape          Shape
	AttackRate     float64
}

// FleetScenarios are the rows of the fleet table: issue 19's, 50 clients
// at 20 requests per second and 10,000 at 0.1 through the default 30s
// outage of a server that refuses what it cannot serve, full or at half
// capacity; and issue 29's, 10,000 at 0.1 against a server that queues,
// through the outage shapes it names and beside its attackers.
var FleetScenarios = []FleetScenario{
	{Name: "50 x 20 req/s, full outage", Clients: 50, Rate: 20},
	{Name: "10,000 x 0.1 req/s, full outage", Clients: 10_000, Rate: 0.1},
	{Name: "10,000 x 0.1 req/s, 50% brownout", Clients: 10_000, Rate: 0.1, OutageCapacity: 0.5},
	{Name: "10,000 x 0.1 req/s, capacity halved, requests queue", Clients: 10_000, Rate: 0.1, OutageCapacity: 0.5, Shape: Slow},
	{Name: "10,000 x 0.1 req/s, requests hang", Clients: 10_000, Rate: 0.1, Shape: Hang},
	{Name: "10,000 x 0.1 req/s, half the requests fail fast", Clients: 10_000, Rate: 0.1, OutageCapacity: 0.5, Shape: FailFast},
	{Name: "10,000 x 0.1 req/s, attacker: 6000 fast calls/s", Clients: 10_000, Rate: 0.1, Shape: FastCalls, AttackRate: FastCalls.DefaultAttackRate()},
	{Name: "10,000 x 0.1 req/s, attacker: slow clients, 100 streams/s", Clients: 10_000, Rate: 0.1, Shape: SlowClients, AttackRate: SlowClients.DefaultAttackRate()},
}

// LoopbackFleet is internal/shedload's fleet (FleetScenario, issue 29's),
// simulated: 200 client processes at 0.75 requests per second each (150/s),
// 75% of a server of 40 workers of 200ms (200/s), through a 1.5s outage
// from 2s of a 6s run; 5 attempts with the loopback clients' backoff (50ms
// doubling to 500ms), a 2s deadline. Set Shape and OutageCapacity for the
// outage: Slow at 0.5 (capacity halved), Hang, FailFast at 0 (the loopback
// harness's CapacityHalved, Hang and FailFast).
var LoopbackFleet = func() Config {
	c := DefaultConfig
	c.Clients, c.Rate, c.Capacity, c.Latency = 200, 0.75, 200, 200*time.Millisecond
	c.Duration, c.OutageStart, c.OutageLength = 6*time.Second, 2*time.Second, 1500*time.Millisecond
	c.Deadline = 2 * time.Second
	c.Backoff = rebound.Backoff{Initial: 50 * time.Millisecond, Max: 500 * time.Millisecond, Multiplier: 2}
	return c
}()

// RunFleet runs every policy on each of scenarios, built from base, and
// returns their reports in order. It stops at the first error, as [Run].
func RunFleet(ctx context.Context, base Config, scenarios []FleetScenario) ([]*Report, error) {
	out := make([]*Report, 0, len(scenarios))
	for _, sc := range scenarios {
		c := base
		c.Clients, c.Rate, c.OutageCapacity, c.Shape, c.AttackRate = sc.Clients, sc.Rate, sc.OutageCapacity, sc.Shape, sc.AttackRate
		r, err := Run(ctx, c)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sc.Name, err)
		}
		out = append(out, r)
	}
	return out, nil
}
