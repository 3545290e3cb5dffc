// Package adaptive keeps the client-side adaptive throttles
// (rebound.AdaptiveThrottle) of the process, one per server name or host,
// and says which answers count as accepted in each protocol.
package adaptive

import (
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/bounded"
)

type key struct {
	name   string
	k      float64
	window time.Duration
}

// throttles holds the throttles in use, weakly (see bounded.Shared), as
// internal/a6 holds the A6 throttles.
var throttles bounded.Shared[key, rebound.AdaptiveThrottle]

// Throttle returns the process-wide throttle of name under c, made on first
// use; clients with the same name and config share it. c must be valid
// (the options check it); an invalid c gives nil.
func Throttle(name string, c rebound.AdaptiveThrottleConfig) *rebound.AdaptiveThrottle {
	th, err := throttles.Get(key{name, c.K, c.Window}, func() (*rebound.AdaptiveThrottle, error) {
		return rebound.NewAdaptiveThrottle(c)
	})
	if err != nil {
		return nil
	}
	return th
}

// Count returns the number of throttles registered, for tests.
func Count() int { return throttles.Len() }

// Gate is one client's view of a throttle: its clock and random source.
// A nil *Gate, or one without a throttle, sends everything.
type Gate struct {
	Throttle *rebound.AdaptiveThrottle
	Clock    rebound.Clock  // nil: the real clock
	Random   rebound.Random // nil: math/rand/v2
}

// Allow counts a request and reports whether to send it, and when it
// counted it (for Withdraw).
func (g *Gate) Allow() (time.Time, bool) {
	if g == nil || g.Throttle == nil {
		return time.Time{}, true
	}
	u := 0.0
	if g.Random != nil {
		u = g.Random.Float64()
	} else {
		u = rand.Float64()
	}
	now := g.now()
	return now, g.Throttle.Allow(now, u)
}

// Withdraw takes back the request Allow counted at at, which was let go
// but never reached the server: the adaptive rate limit behind the
// throttle kept it home (its error is ratelimit.IsKeptHome).
func (g *Gate) Withdraw(at time.Time) {
	if g != nil && g.Throttle != nil {
		g.Throttle.Withdraw(at)
	}
}

// Accepted counts a request the server accepted.
func (g *Gate) Accepted() {
	if g != nil && g.Throttle != nil {
		g.Throttle.Accepted(g.now())
	}
}

func (g *Gate) now() time.Time {
	if g.Clock != nil {
		return g.Clock.Now()
	}
	return time.Now()
}

// Code numbers of gRPC (and Connect, whose codes agree) that are signs of
// overload rather than an answer.
const (
	codeDeadlineExceeded  = 4
	codeResourceExhausted = 8
	codeUnavailable       = 14
)

// AcceptedCode reports whether a gRPC or Connect status code means the
// server accepted the request: every code but UNAVAILABLE,
// RESOURCE_EXHAUSTED and DEADLINE_EXCEEDED (OK is 0).
func AcceptedCode(code uint32) bool {
	switch code {
	case codeDeadlineExceeded, codeResourceExhausted, codeUnavailable:
		return false
	}
	return true
}

// AcceptedStatus reports whether an HTTP response status means the server
// accepted the request: every status but 429, 502, 503 and 504.
func AcceptedStatus(status int) bool {
	switch status {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return false
	}
	return true
}
