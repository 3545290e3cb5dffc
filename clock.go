package rebound

import (
	"math/rand/v2"
	"time"
)

// Clock is the source of time for waits and deadlines. Implementations must
// be safe for concurrent use. The real clock is used when none is given.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that fires once after d.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer made by a [Clock].
type Timer interface {
	// C returns the channel on which the fire time is delivered.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it did so.
	Stop() bool
}

// Random is the source of jitter: Float64 returns a uniform value in [0, 1).
// Implementations must be safe for concurrent use. The default draws from
// math/rand/v2's top-level generator.
type Random interface {
	Float64() float64
}

// RealClock returns the [Clock] backed by package time.
func RealClock() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop() bool          { return r.t.Stop() }

type globalRandom struct{}

func (globalRandom) Float64() float64 { return rand.Float64() }

// clocked is implemented by strategies that carry their own clock; Do waits
// on it.
type clocked interface{ Clock() Clock }

func clockOf(v any) Clock {
	if c, ok := v.(clocked); ok {
		if clk := c.Clock(); clk != nil {
			return clk
		}
	}
	return realClock{}
}
