package clocktest

import (
	"time"

	"github.com/rebound-go/rebound"
)

// Instant returns a clock that stands still at one time and whose timers
// fire at once, without allocating: for benchmarks of paths that wait, so
// that they measure the work and not the wait.
func Instant() rebound.Clock { return instant{} }

type instant struct{}

var (
	epoch = time.Unix(1700000000, 0)
	fired = func() chan time.Time {
		c := make(chan time.Time)
		close(c)
		return c
	}()
)

func (instant) Now() time.Time                       { return epoch }
func (instant) NewTimer(time.Duration) rebound.Timer { return instant{} }
func (instant) C() <-chan time.Time                  { return fired }
func (instant) Stop() bool                           { return false }
