// Package ratelimit keeps the adaptive rate limits (rebound.RateLimiter)
// of the process, one per server name or host and settings, and makes an
// attempt wait for its send token.
package ratelimit

import (
	"context"
	"runtime"
	"sync"
	"time"
	"weak"

	"github.com/rebound-go/rebound"
)

type key struct {
	name string
	c    rebound.AdaptiveRateLimit
}

// limiters holds the limiters in use, weakly, as package adaptive holds
// the adaptive throttles: a limiter lives while a client holds it in its
// per-peer state (itself bounded, see package bounded), so that a process
// talking to ever new names keeps none for the names it has dropped.
var (
	mu       sync.Mutex
	limiters = map[key]weak.Pointer[rebound.RateLimiter]{}
)

// Limiter returns the process-wide limiter of name under c, made on first
// use; clients with the same name and settings share it. c must be valid
// (the options check it); an invalid c gives nil.
func Limiter(name string, c rebound.AdaptiveRateLimit) *rebound.RateLimiter {
	k := key{name, c}
	mu.Lock()
	defer mu.Unlock()
	if l := limiters[k].Value(); l != nil {
		return l
	}
	l, err := rebound.NewRateLimiter(c)
	if err != nil {
		return nil
	}
	limiters[k] = weak.Make(l)
	runtime.AddCleanup(l, drop, k)
	return l
}

func drop(k key) {
	mu.Lock()
	defer mu.Unlock()
	if limiters[k].Value() == nil {
		delete(limiters, k)
	}
}

// Count returns the number of limiters registered, for tests.
func Count() int {
	mu.Lock()
	defer mu.Unlock()
	return len(limiters)
}

// Gate is one client's view of a limiter: its clock. A nil *Gate, or one
// without a limiter, sends everything at once.
type Gate struct {
	Limiter *rebound.RateLimiter
	Clock   rebound.Clock // nil: the real clock
}

// Wait takes a send token and waits for its turn, within ctx. When the
// turn would come after ctx's deadline it gives the token back and
// returns rebound.ErrRateLimited at once; when ctx ends first it gives the
// token back and returns the context's cause. When its turn no longer
// holds as it ends (see rebound.RateLimiter.Ready) it takes a new one. No
// lock is held while it waits.
func (g *Gate) Wait(ctx context.Context) (rebound.Reservation, error) {
	if g == nil || g.Limiter == nil {
		return rebound.Reservation{}, nil
	}
	clk := g.clock()
	for {
		now := clk.Now()
		r := g.Limiter.Reserve(now)
		d := r.Delay(now)
		if d == 0 {
			return r, nil
		}
		if dl, ok := ctx.Deadline(); ok && r.Time().After(dl) {
			g.Limiter.Cancel(r, now)
			return r, rebound.ErrRateLimited
		}
		t := clk.NewTimer(d)
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			g.Limiter.Cancel(r, clk.Now())
			return r, context.Cause(ctx)
		}
		if g.Limiter.Ready(r, clk.Now()) {
			return r, nil
		}
	}
}

// Observe tells the limiter the answer to the attempt sent with r.
func (g *Gate) Observe(r rebound.Reservation, f rebound.RateFeedback) {
	if g != nil && g.Limiter != nil {
		g.Limiter.Observe(r, g.clock().Now(), f)
	}
}

func (g *Gate) clock() rebound.Clock {
	if g.Clock != nil {
		return g.Clock
	}
	return rebound.RealClock()
}

// codeResourceExhausted is the gRPC (and Connect) code of a server that
// refuses for want of quota.
const codeResourceExhausted = 8

// Feedback returns what a gRPC or Connect answer with code says about the
// server's limit: RESOURCE_EXHAUSTED, or any answer carrying pushback
// (present), is a throttle. wait is the server's explicit wait: the
// pushback delay, else a RetryInfo's retry_delay; 0 for none.
func Feedback(code uint32, pushback bool, wait time.Duration) rebound.RateFeedback {
	if code != codeResourceExhausted && !pushback {
		return rebound.RateFeedback{}
	}
	return rebound.RateFeedback{Throttled: true, Wait: max(wait, 0)}
}
