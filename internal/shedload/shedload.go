// Package shedload runs load scenarios on loopback against a real server
// (grpc-go, connect-go or net/http) whose backend has a fixed number of
// slots, with or without a shed.Shedder in front, and measures what the
// honest clients get: the share of their calls shed, their goodput, the
// attempts per call during an outage and the time goodput takes to come
// back after it. Attackers are functions that run beside the honest
// clients. Tests, benchmarks and demos share it, so that a scenario is
// run the same way wherever its figures are quoted.
//
// Times are real: a scenario's figures vary from run to run and with the
// machine's load. Compare a run with the Shedder against one without it,
// made just before, rather than against fixed figures.
package shedload

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/rebound-go/rebound/shed"
)

// Outage is an outage during a run.
type Outage struct {
	// Shape is what it does; Healthy for none.
	Shape Shape
	// Start is when it begins, from the start of the run; Length how long
	// it lasts.
	Start, Length time.Duration
	// Share is the share of the honest requests it hits, drawn at random
	// (FailFast and Hang); 0 means all.
	Share float64
}

// End is when the outage ends.
func (o Outage) End() time.Duration { return o.Start + o.Length }

// Scenario is one run: a server, its honest clients, an outage, an
// attacker.
type Scenario struct {
	// Protocol, Slots and Work set the server (see ServerConfig).
	Protocol Protocol
	Slots    int
	Work     time.Duration
	// Honest is the number of closed-loop clients: each makes one honest
	// call after another, with up to Attempts attempts each.
	Honest int
	// Fleet is the number of open-loop clients: each starts honest calls
	// at Rate per second (Poisson arrivals), whether or not the earlier
	// ones have ended, with up to Attempts attempts each.
	Fleet int
	Rate  float64
	// Attempts is the attempts per call, in [1, 5]; 0 means 1.
	Attempts int
	// HonestIPs spreads the honest clients over as many loopback
	// addresses (see Loopback), so that the server sees as many peers;
	// 0 means 1.
	HonestIPs int
	// Deadline bounds each honest call; 0 means 5s.
	Deadline time.Duration
	// Duration is how long honest calls start; the run ends when the
	// last has ended.
	Duration time.Duration
	// Outage is the run's outage, if any.
	Outage Outage
	// Attack, when not nil, runs in its own goroutine from AttackStart
	// until AttackEnd (the end of the run when 0), with a context that
	// ends then; it must return once its context is done.
	Attack                 func(ctx context.Context, s *Server)
	AttackStart, AttackEnd time.Duration
	// Shed, when not nil, puts a Shedder made of it and ShedOptions in
	// front of the server.
	Shed        *shed.Config
	ShedOptions []shed.Option
	// Tap adds the Shedder's tap handle (GRPC only).
	Tap bool
	// Seed seeds the fleet's arrivals.
	Seed uint64
}

// Call is one honest call of a run.
type Call struct {
	// Start and End are its times from the start of the run.
	Start, End time.Duration
	Result
}

// Report is what a run saw.
type Report struct {
	Scenario Scenario
	// Calls are the honest calls, in the order they ended.
	Calls []Call
	// Stats is the Shedder's at the end of the run (zero without one).
	Stats shed.Stats
	// Timeline is the Shedder's Stats every 50ms of the run.
	Timeline []Sample
	// Served is how long the service took over each honest request it
	// served, by when it ended, from the start of the run.
	Served []Call
}

// Sample is the Shedder's Stats at a time of a run.
type Sample struct {
	At time.Duration
	shed.Stats
}

// Run runs sc and returns what its honest clients saw.
func Run(ctx context.Context, sc Scenario) (*Report, error) {
	if sc.Attempts == 0 {
		sc.Attempts = 1
	}
	if sc.Deadline == 0 {
		sc.Deadline = 5 * time.Second
	}
	switch {
	case sc.Honest < 0 || sc.Fleet < 0 || sc.Honest+sc.Fleet == 0:
		return nil, fmt.Errorf("shedload: Scenario.Honest and Fleet must be >= 0 and one of them > 0, got %d, %d", sc.Honest, sc.Fleet)
	case sc.Fleet > 0 && !(sc.Rate > 0):
		return nil, fmt.Errorf("shedload: Scenario.Rate must be > 0 with a Fleet, got %v", sc.Rate)
	case sc.Duration <= 0:
		return nil, fmt.Errorf("shedload: Scenario.Duration must be > 0, got %v", sc.Duration)
	case sc.Outage.Shape != Healthy && (sc.Outage.Length <= 0 || sc.Outage.End() > sc.Duration):
		return nil, fmt.Errorf("shedload: Scenario.Outage must end within the run, got %+v", sc.Outage)
	case !(sc.Outage.Share >= 0 && sc.Outage.Share <= 1):
		return nil, fmt.Errorf("shedload: Scenario.Outage.Share must be in [0, 1], got %v", sc.Outage.Share)
	}
	cfg := ServerConfig{Protocol: sc.Protocol, Slots: sc.Slots, Work: sc.Work, Tap: sc.Tap}
	if sc.Shed != nil {
		s, err := shed.New(*sc.Shed, sc.ShedOptions...)
		if err != nil {
			return nil, err
		}
		cfg.Shedder = s
	}
	srv, err := Start(cfg)
	if err != nil {
		return nil, err
	}
	defer srv.Close()

	callers := make([]*Caller, sc.Honest+sc.Fleet)
	for i := range callers {
		c, err := srv.NewCaller(i, sc.Attempts, Loopback(i%max(sc.HonestIPs, 1)))
		if err != nil {
			for _, c := range callers[:i] {
				c.Close()
			}
			return nil, err
		}
		callers[i] = c
	}
	defer func() {
		for _, c := range callers {
			c.Close()
		}
	}()

	// Every client's connection is up before the clock starts: a run
	// measures the server, not how long hundreds of connections take to
	// come up on a busy machine.
	// A ping the Shedder sheds came back over the connection all the
	// same. At most 16 at once, as the Shedder's limit starts at 20.
	var warm sync.WaitGroup
	warmErrs := make([]error, len(callers))
	sem := make(chan struct{}, 16)
	for i, c := range callers {
		sem <- struct{}{}
		warm.Go(func() {
			defer func() { <-sem }()
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := c.Ping(wctx); err != nil && !isShedMessage(err.Error()) {
				warmErrs[i] = err
			}
		})
	}
	warm.Wait()
	if err := errors.Join(warmErrs...); err != nil {
		return nil, fmt.Errorf("shedload: warming up: %w", err)
	}
	var (
		mu    sync.Mutex
		calls []Call
		wg    sync.WaitGroup
	)
	start := time.Now()
	runCtx, stop := context.WithTimeout(ctx, sc.Duration)
	defer stop()
	call := func(c *Caller) {
		began := time.Since(start)
		cctx, cancel := context.WithTimeout(ctx, sc.Deadline)
		r := c.Call(cctx, "")
		cancel()
		ended := time.Since(start)
		mu.Lock()
		calls = append(calls, Call{Start: began, End: ended, Result: r})
		mu.Unlock()
	}
	for _, c := range callers[:sc.Honest] {
		wg.Go(func() {
			for runCtx.Err() == nil {
				call(c)
			}
		})
	}
	for i, c := range callers[sc.Honest:] {
		rnd := rand.New(rand.NewPCG(sc.Seed, uint64(i)))
		wg.Go(func() {
			// A random phase, then Poisson arrivals.
			next := time.Duration(rnd.ExpFloat64() / sc.Rate * float64(time.Second))
			for {
				wait := time.Until(start.Add(next))
				if next >= sc.Duration {
					return
				}
				if wait > 0 {
					t := time.NewTimer(wait)
					select {
					case <-t.C:
					case <-runCtx.Done():
						t.Stop()
						return
					}
				}
				wg.Go(func() { call(c) })
				next += time.Duration(rnd.ExpFloat64() / sc.Rate * float64(time.Second))
			}
		})
	}
	if sc.Outage.Shape != Healthy {
		wg.Go(func() {
			if !sleepUntil(runCtx, start.Add(sc.Outage.Start)) {
				return
			}
			octx, cancel := context.WithDeadline(runCtx, start.Add(sc.Outage.End()))
			srv.StartOutage(octx, sc.Outage.Shape, sc.Outage.Share)
			cancel()
			// The outage ends on time even when the run is cut short,
			// so that the calls it holds come back.
			_ = sleepUntil(ctx, start.Add(sc.Outage.End()))
			srv.EndOutage()
		})
	}
	var timeline []Sample
	if srv.Shedder != nil {
		wg.Go(func() {
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-tick.C:
					timeline = append(timeline, Sample{At: time.Since(start), Stats: srv.Shedder.Stats()})
				case <-runCtx.Done():
					return
				}
			}
		})
	}
	if sc.Attack != nil {
		end := sc.AttackEnd
		if end == 0 {
			end = sc.Duration
		}
		wg.Go(func() {
			if !sleepUntil(runCtx, start.Add(sc.AttackStart)) {
				return
			}
			actx, cancel := context.WithDeadline(ctx, start.Add(end))
			defer cancel()
			sc.Attack(actx, srv)
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, context.Cause(ctx)
	}
	r := &Report{Scenario: sc, Calls: calls, Timeline: timeline}
	for _, sv := range srv.Served() {
		end := sv.End.Sub(start)
		r.Served = append(r.Served, Call{Start: end - sv.Took, End: end})
	}
	if srv.Shedder != nil {
		r.Stats = srv.Shedder.Stats()
	}
	return r, nil
}

// sleepUntil waits until t, or ctx is done, and reports whether t came.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Compare runs sc without a Shedder and with one (sc.Shed, or
// shed.DefaultConfig when nil), both at once, so that a machine whose
// load varies weighs on both alike.
func Compare(ctx context.Context, sc Scenario) (without, with *Report, err error) {
	bare := sc
	bare.Shed, bare.ShedOptions, bare.Tap = nil, nil, false
	if sc.Shed == nil {
		c := shed.DefaultConfig()
		sc.Shed = &c
	}
	var errWithout, errWith error
	var wg sync.WaitGroup
	wg.Go(func() { without, errWithout = Run(ctx, bare) })
	wg.Go(func() { with, errWith = Run(ctx, sc) })
	wg.Wait()
	switch {
	case errWithout != nil:
		return nil, nil, fmt.Errorf("without the Shedder: %w", errWithout)
	case errWith != nil:
		return nil, nil, fmt.Errorf("with the Shedder: %w", errWith)
	}
	return without, with, nil
}

// Tally counts calls.
type Tally struct {
	// Calls is the calls counted; OK, Shed and Failed split them.
	Calls, OK, Shed, Failed int
	// Attempts is their attempts.
	Attempts int
}

// ShedShare is the share of the calls shed, 0 for none.
func (t Tally) ShedShare() float64 {
	if t.Calls == 0 {
		return 0
	}
	return float64(t.Shed) / float64(t.Calls)
}

// AttemptsPerCall is Attempts / Calls, 0 for no calls.
func (t Tally) AttemptsPerCall() float64 {
	if t.Calls == 0 {
		return 0
	}
	return float64(t.Attempts) / float64(t.Calls)
}

// Started tallies the calls that started in [from, to).
func (r *Report) Started(from, to time.Duration) Tally {
	var t Tally
	for _, c := range r.Calls {
		if c.Start < from || c.Start >= to {
			continue
		}
		t.Calls++
		t.Attempts += c.Attempts
		switch c.Outcome {
		case OK:
			t.OK++
		case Shed:
			t.Shed++
		default:
			t.Failed++
		}
	}
	return t
}

// Goodput is the calls that succeeded in [from, to), per second.
func (r *Report) Goodput(from, to time.Duration) float64 {
	if to <= from {
		return 0
	}
	n := 0
	for _, c := range r.Calls {
		if c.Outcome == OK && c.End >= from && c.End < to {
			n++
		}
	}
	return float64(n) / (to - from).Seconds()
}

// OutageAttempts is the attempts per call of the calls that started
// during the outage.
func (r *Report) OutageAttempts() float64 {
	o := r.Scenario.Outage
	return r.Started(o.Start, o.End()).AttemptsPerCall()
}

// ServiceLatency is the median time the service took over the honest
// requests it served that ended in [from, to), queueing for a backend
// slot included, 0 for none: the server's latency, without what a busy
// machine adds to the clients' side.
func (r *Report) ServiceLatency(from, to time.Duration) time.Duration {
	var ds []time.Duration
	for _, c := range r.Served {
		if c.End >= from && c.End < to {
			ds = append(ds, c.End-c.Start)
		}
	}
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// SuccessShare is the share of the calls started in [from, to) that
// succeeded, 0 for none.
func (r *Report) SuccessShare(from, to time.Duration) float64 {
	t := r.Started(from, to)
	if t.Calls == 0 {
		return 0
	}
	return float64(t.OK) / float64(t.Calls)
}

// PreOutage is the success share of the calls started in the second
// before the outage (or in what there is of it).
func (r *Report) PreOutage() float64 {
	o := r.Scenario.Outage
	return r.SuccessShare(max(o.Start-time.Second, 0), o.Start)
}

// RecoveryWindow is the span over which Recovery measures the success
// share.
const RecoveryWindow = 250 * time.Millisecond

// Recovery is the time from the end of the outage until the calls that
// start succeed as often as before it, 90% of PreOutage, over a
// RecoveryWindow of starts, in steps of 10ms; ok is false when they never
// do before the run ends. The clients' load is the same throughout, so
// this is the goodput back to 90% of what it was, with no noise from how
// many calls happen to start in a window.
func (r *Report) Recovery() (d time.Duration, ok bool) {
	o := r.Scenario.Outage
	want := 0.9 * r.PreOutage()
	for t := o.End(); t+RecoveryWindow <= r.Scenario.Duration; t += 10 * time.Millisecond {
		if r.Started(t, t+RecoveryWindow).Calls > 0 && r.SuccessShare(t, t+RecoveryWindow) >= want {
			return t - o.End(), true
		}
	}
	return 0, false
}

// Summary is the figures of a run in one line.
func (r *Report) Summary() string {
	sc := r.Scenario
	all := r.Started(0, sc.Duration)
	s := fmt.Sprintf("%v, shedder %v: %d calls, %.1f%% shed, %.1f%% failed, goodput %.1f/s",
		sc.Protocol, sc.Shed != nil, all.Calls, 100*all.ShedShare(), 100*float64(all.Failed)/float64(max(all.Calls, 1)), r.Goodput(0, sc.Duration))
	if sc.Outage.Shape != Healthy {
		rec := "never"
		if d, ok := r.Recovery(); ok {
			rec = d.Round(10 * time.Millisecond).String()
		}
		s += fmt.Sprintf("; %v: %.2fx attempts per call, %.0f%% succeeded before, recovery %s",
			sc.Outage.Shape, r.OutageAttempts(), 100*r.PreOutage(), rec)
	}
	if sc.Shed != nil {
		s += fmt.Sprintf("; limit %d, %d admitted, %d shed", r.Stats.Limit, r.Stats.Admitted, r.Stats.ShedRetry+r.Stats.ShedStop)
	}
	return s
}
