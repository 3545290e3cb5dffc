package rebound

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Backoff is exponential backoff with jitter, a pure function of the retry
// number. The zero value is invalid; use [DefaultBackoff] or fill every
// duration and the multiplier. Backoff is a value type, safe to copy and to
// use concurrently.
type Backoff struct {
	// Initial is the ceiling of the first retry's delay. Must be > 0.
	Initial time.Duration
	// Max caps every ceiling, the first retry's too: A6 waits
	// random(0, min(Initial*Multiplier^(n-1), Max)) before retry n, so a Max
	// below Initial caps every delay at Max. Must be > 0.
	Max time.Duration
	// Multiplier grows the ceiling per retry. Must be > 0.
	Multiplier float64
	// Proportional selects the jitter. 0 (the default) is A6's full jitter:
	// the delay is uniform in [0, ceiling). A value in (0, 1] is the
	// proportional jitter of grpc-go and grpc-java: the delay is uniform in
	// ceiling*(1±Proportional), 0.2 in those libraries.
	Proportional float64
}

// DefaultBackoff returns the Smithy example strategy's backoff: ceilings of
// 1s, 2s, 4s, … capped at 20s, full jitter.
func DefaultBackoff() Backoff {
	return Backoff{Initial: time.Second, Max: 20 * time.Second, Multiplier: 2}
}

// Validate reports the first invalid field.
func (b Backoff) Validate() error {
	switch {
	case b.Initial <= 0:
		return fmt.Errorf("rebound: Backoff.Initial must be > 0, got %v", b.Initial)
	case b.Max <= 0:
		return fmt.Errorf("rebound: Backoff.Max must be > 0, got %v", b.Max)
	case !(b.Multiplier > 0) || math.IsInf(b.Multiplier, 0):
		return fmt.Errorf("rebound: Backoff.Multiplier must be a finite number > 0, got %v", b.Multiplier)
	case !(b.Proportional >= 0 && b.Proportional <= 1):
		return errors.New("rebound: Backoff.Proportional must be in [0, 1]")
	}
	return nil
}

// Ceiling returns min(Initial*Multiplier^(retry-1), Max): the upper bound of
// the delay before the given retry (1 for the first retry). Values below 1
// are treated as 1.
func (b Backoff) Ceiling(retry int) time.Duration {
	if retry <= 1 {
		return min(b.Initial, b.Max)
	}
	c := float64(b.Initial) * math.Pow(b.Multiplier, float64(retry-1))
	if !(c < float64(b.Max)) { // also catches +Inf and NaN
		return b.Max
	}
	return time.Duration(c)
}

// Delay returns the jittered delay before the given retry, where u is a
// uniform random value in [0, 1).
func (b Backoff) Delay(retry int, u float64) time.Duration {
	c := float64(b.Ceiling(retry))
	if b.Proportional > 0 {
		c *= 1 + b.Proportional*(2*u-1)
	} else {
		c *= u
	}
	if c <= 0 {
		return 0
	}
	if c >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(c)
}
