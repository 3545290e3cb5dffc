// Package clocktest provides a fake [rebound.Clock] and a scripted
// [rebound.Random] for tests that must not sleep.
package clocktest

import (
	"sort"
	"sync"
	"time"

	"github.com/rebound-go/rebound"
)

// Clock is a fake clock: time moves only when Advance is called, or, with
// NewAuto, when a timer is made. It is safe for concurrent use.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	auto    bool
	timers  []*timer
	changed chan struct{} // closed and replaced whenever timers change
	sleeps  []time.Duration
}

// New returns a manual clock that starts at the real time, so that context
// deadlines, which run on real time, can be set from its Now.
func New() *Clock { return &Clock{now: time.Now(), changed: make(chan struct{})} }

// NewAhead returns a manual clock that starts an hour ahead of the real
// time. A deadline set x after its Now is x away for the code under test,
// which reads the clock, and an hour and x away for the network and the
// scheduler, which run on real time: what the code does with a deadline
// close on its clock then does not depend on how busy the machine is. A
// context deadline set from the real clock is an hour past on this one.
func NewAhead() *Clock {
	c := New()
	c.now = c.now.Add(time.Hour)
	return c
}

// NewAuto returns a clock whose timers fire at once, moving the clock by
// their duration: a sequential retry loop runs without sleeping, and
// Sleeps records the delays it asked for.
func NewAuto() *Clock {
	c := New()
	c.auto = true
	return c
}

// Now returns the fake time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a timer that fires when the clock reaches now+d.
func (c *Clock) NewTimer(d time.Duration) rebound.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{c: c, at: c.now.Add(d), ch: make(chan time.Time, 1)}
	c.sleeps = append(c.sleeps, d)
	if c.auto {
		c.now = t.at
		t.ch <- c.now
		return t
	}
	c.timers = append(c.timers, t)
	c.notify()
	return t
}

// Sleeps returns the durations of every timer made so far, in order.
func (c *Clock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

// Advance moves the clock by d, firing due timers in order.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	sort.SliceStable(c.timers, func(i, j int) bool { return c.timers[i].at.Before(c.timers[j].at) })
	kept := c.timers[:0]
	for _, t := range c.timers {
		if !t.at.After(c.now) {
			t.ch <- t.at
			continue
		}
		kept = append(kept, t)
	}
	c.timers = kept
	c.notify()
}

// Pending returns the number of timers that have not fired or been stopped.
func (c *Clock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// WaitPending blocks until exactly n timers are pending, so a test can
// advance the clock once the code under test is waiting. It gives up after
// 10 seconds of real time and reports false.
func (c *Clock) WaitPending(n int) bool {
	return c.waitFor(func() bool { return len(c.timers) == n })
}

// WaitCreated blocks until at least n timers have been made since the clock
// was created. It gives up after 10 seconds of real time and reports false.
func (c *Clock) WaitCreated(n int) bool {
	return c.waitFor(func() bool { return len(c.sleeps) >= n })
}

func (c *Clock) waitFor(cond func() bool) bool {
	deadline := time.After(10 * time.Second)
	for {
		c.mu.Lock()
		ok, ch := cond(), c.changed
		c.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-deadline:
			return false
		}
	}
}

func (c *Clock) notify() {
	close(c.changed)
	c.changed = make(chan struct{})
}

type timer struct {
	c  *Clock
	at time.Time
	ch chan time.Time
}

func (t *timer) C() <-chan time.Time { return t.ch }

func (t *timer) Stop() bool {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, o := range c.timers {
		if o == t {
			c.timers = append(c.timers[:i], c.timers[i+1:]...)
			c.notify()
			return true
		}
	}
	return false
}

// Rand is a [rebound.Random] that returns a fixed sequence, cycling. An
// empty Rand returns 0.5. It is safe for concurrent use.
type Rand struct {
	mu   sync.Mutex
	vals []float64
	i    int
}

// NewRand returns a Rand that yields vals in order.
func NewRand(vals ...float64) *Rand { return &Rand{vals: vals} }

// Float64 returns the next value.
func (r *Rand) Float64() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.vals) == 0 {
		return 0.5
	}
	v := r.vals[r.i%len(r.vals)]
	r.i++
	return v
}
