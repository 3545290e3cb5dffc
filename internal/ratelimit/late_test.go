package ratelimit

import (
	"context"
	"errors"
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
	sample func(at time.Duration, l *rebound.RateLimiter, throttles int64)
}

// lateSecond is what the server and the client saw in one second.
type lateSecond struct{ sent, accepted, refused int }

// run runs r with l and returns what each second saw.
func (r lateRun) run(t *testing.T, l *rebound.RateLimiter) []lateSecond {
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
				if f.Throttled {
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
			l, err := rebound.NewRateLimiter(rebound.AdaptiveRateLimit{MinRate: 20, Beta: 0.01, ScaleConstant: 1e-9})
			if err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			l.Observe(l.Reserve(now), now, rebound.RateFeedback{Throttled: true})
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
