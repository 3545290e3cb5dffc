package ratelimit

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/clocktest"
)

// lateClock is a fake clock whose timers fire late, as on a starved
// machine: each by the next of lates, in turn.
type lateClock struct {
	*clocktest.Clock
	mu    sync.Mutex
	i     int
	lates []time.Duration
}

func (c *lateClock) NewTimer(d time.Duration) rebound.Timer {
	c.mu.Lock()
	late := c.lates[c.i%len(c.lates)]
	c.i++
	c.mu.Unlock()
	return c.Clock.NewTimer(d + late)
}

// fakeDeadline is a context whose deadline is on the fake clock: Wait
// reads it, and it never ends by itself (its parent ends the run).
type fakeDeadline struct {
	context.Context
	dl time.Time
}

func (c fakeDeadline) Deadline() (time.Time, bool) { return c.dl, true }

// lateRun is a client of callers that each call Wait in a loop on a late
// clock, against a server that answers each attempt it is sent after a
// round trip (a timer, so late too). A caller refused for its deadline
// tries again a millisecond (and the clock's lateness) later.
type lateRun struct {
	callers  int
	deadline time.Duration               // of each call
	lates    []time.Duration             // the clock's
	serve    func(at time.Duration) bool // the server: accepts an attempt sent at at (from the start)?
	feedback func(ok bool) rebound.RateFeedback
	length   time.Duration
	// sample, if set, sees the limiter each millisecond, every caller
	// waiting, and the number of throttles it has been told of.
	sample func(at time.Duration, l *rebound.AdaptiveRateLimit, throttles int64)
}

// lateSecond is what the server and the client saw in one second.
type lateSecond struct{ sent, accepted, refused int }

// run runs r with l and returns what each second saw.
func (r lateRun) run(t *testing.T, l *rebound.AdaptiveRateLimit) []lateSecond {
	clk := &lateClock{Clock: clocktest.New(), lates: r.lates}
	t0 := clk.Now()
	g := &Gate{Limiter: l, Clock: clk}
	secs := make([]lateSecond, int(r.length/time.Second)+1)
	var mu sync.Mutex
	record := func(f func(s *lateSecond)) {
		mu.Lock()
		defer mu.Unlock()
		f(&secs[clk.Now().Sub(t0)/time.Second])
	}
	var throttles atomic.Int64
	stop, cancel := context.WithCancel(context.Background())
	sleep := func(d time.Duration) bool {
		tm := clk.NewTimer(d)
		defer tm.Stop()
		select {
		case <-tm.C():
			return true
		case <-stop.Done():
			return false
		}
	}
	var wg sync.WaitGroup
	for range r.callers {
		wg.Go(func() {
			for {
				res, err := g.Wait(fakeDeadline{stop, clk.Now().Add(r.deadline)})
				switch {
				case stop.Err() != nil:
					return
				case errors.Is(err, rebound.ErrRateLimited):
					record(func(s *lateSecond) { s.refused++ })
					if !sleep(time.Millisecond) {
						return
					}
					continue
				case err != nil:
					t.Error(err)
					return
				}
				ok := r.serve(clk.Now().Sub(t0))
				record(func(s *lateSecond) {
					s.sent++
					if ok {
						s.accepted++
					}
				})
				if !sleep(2 * time.Millisecond) {
					return
				}
				f := r.feedback(ok)
				g.Observe(res, f)
				if f.SlowDown {
					throttles.Add(1)
				}
			}
		})
	}
	for clk.Now().Sub(t0) < r.length {
		if !clk.WaitPending(r.callers) {
			t.Fatal("the callers did not all come to wait")
		}
		clk.Advance(time.Millisecond)
		if r.sample != nil {
			r.sample(clk.Now().Sub(t0), l, throttles.Load())
		}
	}
	cancel()
	wg.Wait()
	return secs[:len(secs)-1]
}

// TestWaitLateTimersKeepTurns: timers that fire late do not cost turns.
// Forty callers with 2s deadlines at a rate held at 20/s, on a clock
// whose timers fire 0, 100 and 200ms late in turn: they send 20 a
// second, and none is refused. (When a wait that ended just after
// another's took a new turn, the turn it had waited for went unused: the
// client sent 8 a second and refused 12.)
func TestWaitLateTimersKeepTurns(t *testing.T) {
	for _, lates := range [][]time.Duration{
		{50 * time.Millisecond},
		{0, 100 * time.Millisecond, 200 * time.Millisecond},
	} {
		t.Run(fmtLates(lates), func(t *testing.T) {
			// The rate stays at the floor, 20/s: the cut falls far below
			// it, and the climb is too slow to matter.
			l, err := rebound.NewAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{MinRate: 20, Beta: 0.01, ScaleConstant: 1e-9})
			if err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			l.Observe(l.Reserve(now), now, rebound.RateFeedback{SlowDown: true})
			secs := lateRun{
				callers:  40,
				deadline: 2 * time.Second,
				lates:    lates,
				serve:    func(time.Duration) bool { return true },
				feedback: func(bool) rebound.RateFeedback { return rebound.RateFeedback{} },
				length:   20 * time.Second,
			}.run(t, l)
			var sent, refused int
			for _, s := range secs[2:] { // after the first queue formed
				sent += s.sent
				refused += s.refused
			}
			if n := len(secs) - 2; sent < 19*n || refused > 0 {
				t.Fatalf("%d sent and %d refused in %ds at 20/s, want at least %d sent and none refused", sent, refused, n, 19*n)
			}
		})
	}
}

func fmtLates(lates []time.Duration) string {
	s := "late"
	for _, d := range lates {
		s += "-" + d.String()
	}
	return s
}

// TestWaitRecoversWithLateTimers: the recovery the AdaptiveRateLimit documents
// holds on a clock whose timers fire 50ms late, all of them or one in
// three (the others 0 and 25ms late): a server that accepts 20 a second
// (a burst of 2) for 5s and then everything, twenty callers with 1s
// deadlines that try again at once when refused. After every cut, the
// rate is back at the rate it was cut from K = ∛(W·(1−β)/C) later (2.5s
// from 20/s), and 5s after that it is C·5³ above it; it never falls once
// the server has stopped refusing; the callers send at the rate. (With
// timers one in three late, a wait that ended just after another's took
// a new turn and lost its own; the client sent less than its rate, and
// the climb, which goes no higher than twice the rate measured, stalled,
// or the rate fell with no throttle at all, 7s after the server had
// stopped refusing.)
func TestWaitRecoversWithLateTimers(t *testing.T) {
	const (
		beta  = 0.7 // the defaults
		scale = 0.4
		stop  = 5 * time.Second
	)
	for _, lates := range [][]time.Duration{
		{50 * time.Millisecond},
		{0, 25 * time.Millisecond, 50 * time.Millisecond},
	} {
		t.Run(fmtLates(lates), func(t *testing.T) {
			l, err := rebound.NewAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{})
			if err != nil {
				t.Fatal(err)
			}
			var (
				mu             sync.Mutex
				tokens         = 2.0
				last           time.Duration
				prev           float64
				cutAt          time.Duration // the last cut
				from           float64       // the rate it cut from
				checked, above bool
				rates          = []float64{0} // at the start of each second
			)
			serve := func(at time.Duration) bool {
				mu.Lock()
				defer mu.Unlock()
				if at >= stop {
					return true
				}
				tokens = math.Min(2, tokens+(at-last).Seconds()*20)
				last = at
				if tokens < 1 {
					return false
				}
				tokens--
				return true
			}
			var seen int64 // throttles
			sample := func(at time.Duration, l *rebound.AdaptiveRateLimit, throttles int64) {
				r := l.Rate()
				throttled := throttles > seen
				seen = throttles
				if at%time.Second == 0 {
					rates = append(rates, r)
				}
				if r < prev && at > stop+200*time.Millisecond {
					t.Errorf("at %v the rate fell from %.1f to %.1f/s, after the server had stopped refusing at %v", at, prev, r, stop)
				}
				// A cut, or the first: the rate fell at a throttle. (It
				// also falls, by a little, when a success finds the
				// client sent less than half its rate, as in the slow
				// start's first half-second: that is no cut.)
				if r < prev && throttled || prev == 0 && r > 0 {
					cutAt, from, checked, above = at, r/beta, false, false
				}
				prev = r
				if from == 0 {
					return
				}
				k := time.Duration(math.Cbrt(from*(1-beta)/scale) * float64(time.Second))
				// An answer moves the rate: allow a few round trips.
				if since := at - cutAt; !checked && since >= k+200*time.Millisecond {
					checked = true
					if r < 0.99*from {
						t.Errorf("%v after the cut at %v from %.1f/s: the rate is %.1f/s, want it back within K = %v", since, cutAt, from, r, k)
					}
				}
				if since := at - cutAt; !above && since >= k+5*time.Second+200*time.Millisecond {
					above = true
					if want := from + scale*125; r < 0.98*want {
						t.Errorf("%v after the cut at %v from %.1f/s: the rate is %.1f/s, want at least %.1f/s, C·5³ above it 5s after K", since, cutAt, from, r, want)
					}
				}
			}
			secs := lateRun{
				callers:  20,
				deadline: time.Second,
				lates:    lates,
				serve:    serve,
				feedback: func(ok bool) rebound.RateFeedback { return rebound.RateFeedback{SlowDown: !ok} },
				length:   14 * time.Second,
				sample:   sample,
			}.run(t, l)
			if cutAt >= stop+time.Second || !above {
				t.Fatalf("last cut at %v, the climb checked: %v; want a cut before the server stopped at %v and the climb checked", cutAt, above, stop)
			}
			for i, s := range secs {
				t.Logf("second %2d: rate %5.1f, sent %3d, accepted %3d, refused %4d", i, rates[i], s.sent, s.accepted, s.refused)
			}
			// The callers send at the rate, as far as twenty callers
			// whose round trips take 52ms or more can (385/s), and a
			// second behind it: the turns of a second's queue were given
			// at the rate of when they were taken.
			for i := int(stop/time.Second) + 1; i < len(secs); i++ {
				rate := min(rates[i-1], rates[i])
				if s, want := secs[i], 0.9*min(rate, 300); float64(s.sent) < want || s.sent != s.accepted {
					t.Errorf("second %d: %d sent, %d accepted, the rate %.1f/s at its start and a second before; want at least %.0f, all accepted", i, s.sent, s.accepted, rate, want)
				}
			}
		})
	}
}
