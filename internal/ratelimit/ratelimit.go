// Package ratelimit keeps the adaptive rate limits (rebound.AdaptiveRateLimit)
// of the process, one per server name or host and settings, and makes an
// attempt wait for its send token.
package ratelimit

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/bounded"
)

type key struct {
	name string
	c    rebound.AdaptiveRateLimitConfig
}

// limiters holds the limiters in use, weakly (see bounded.Shared), as
// package adaptive holds the adaptive throttles.
var limiters bounded.Shared[key, rebound.AdaptiveRateLimit]

// Limiter returns the process-wide limiter of name under c, made on first
// use; clients with the same name and settings share it. c must be valid
// (the options check it); an invalid c gives nil.
func Limiter(name string, c rebound.AdaptiveRateLimitConfig) *rebound.AdaptiveRateLimit {
	l, err := limiters.Get(key{name, c}, func() (*rebound.AdaptiveRateLimit, error) {
		return rebound.NewAdaptiveRateLimit(c)
	})
	if err != nil {
		return nil
	}
	return l
}

// Count returns the number of limiters registered, for tests.
func Count() int { return limiters.Len() }

// Gate is one client's view of a limiter: its clock. A nil *Gate, or one
// without a limiter, sends everything at once.
type Gate struct {
	Limiter *rebound.AdaptiveRateLimit
	Clock   rebound.Clock // nil: the real clock
}

// Wait takes a send token and waits for its turn, within ctx. When the
// turn would come after ctx's deadline it takes none and returns
// rebound.ErrRateLimited at once (see rebound.AdaptiveRateLimit.ReserveBy);
// when ctx ends first it gives the token back and returns the context's
// cause. When its turn no longer holds as its wait ends (see
// rebound.AdaptiveRateLimit.Ready) it takes a new one; when another attempt
// went just before, it keeps its turn and waits out half a spacing. In
// the limiter's slow start it waits for an answer to an attempt in
// flight, then reserves again; that wait has no known end but the slow
// start's, so it does not fail at once for a deadline (an answer usually
// comes within a round trip). No lock is held while it waits.
func (g *Gate) Wait(ctx context.Context) (rebound.Reservation, error) {
	if g == nil || g.Limiter == nil {
		return rebound.Reservation{}, nil
	}
	clk := g.clock()
	dl, _ := ctx.Deadline()
	for {
		now := clk.Now()
		r, ok := g.Limiter.ReserveBy(now, dl)
		if !ok {
			return r, rebound.ErrRateLimited
		}
		d := r.Delay(now)
		if d == 0 {
			return r, nil
		}
		if a := r.Answer(); a != nil {
			err := g.sleep(ctx, clk, d, a)
			g.Limiter.Cancel(r, clk.Now())
			if err != nil {
				return r, err
			}
			continue
		}
		if err := g.sleep(ctx, clk, d, nil); err != nil {
			g.Limiter.Cancel(r, clk.Now())
			return r, err
		}
		at, ok := g.Limiter.Ready(r, clk.Now())
		if !ok {
			continue
		}
		if d := at.Sub(clk.Now()); d > 0 {
			if err := g.sleep(ctx, clk, d, nil); err != nil {
				g.Limiter.Cancel(r, clk.Now())
				return r, err
			}
		}
		return r, nil
	}
}

// sleep waits d, or until wake is closed (a nil wake never is), or until
// ctx ends, which it reports with the context's cause.
func (g *Gate) sleep(ctx context.Context, clk rebound.Clock, d time.Duration, wake <-chan struct{}) error {
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
	case <-wake:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	return nil
}

// KeptHome is the error of an attempt that Wait kept home, in the front
// door's words: refused for its deadline, or its context ended while it
// waited for its turn. It never reached the server, so an adaptive
// throttle in front of the rate limit takes it back (see IsKeptHome)
// rather than count it as the server's refusal, or, cancelled, as the
// server's answer.
type KeptHome interface {
	error
	KeptHome()
}

// Kept returns err as a KeptHome error that unwraps to err.
func Kept(err error) error { return kept{err} }

type kept struct{ error }

func (k kept) Unwrap() error { return k.error }
func (kept) KeptHome()       {}

// IsKeptHome reports whether err is, or wraps, a KeptHome error.
func IsKeptHome(err error) bool {
	var k KeptHome
	return errors.As(err, &k)
}

// Cancel gives back the turn r that Wait gave an attempt that did not go
// after all (an adaptive throttle kept it home).
func (g *Gate) Cancel(r rebound.Reservation) {
	if g != nil && g.Limiter != nil {
		g.Limiter.Cancel(r, g.clock().Now())
	}
}

// Observe tells the limiter the answer to the attempt sent with r.
func (g *Gate) Observe(r rebound.Reservation, f rebound.RateFeedback) {
	if g != nil && g.Limiter != nil {
		g.Limiter.Observe(r, g.clock().Now(), f)
	}
}

// Answer tells the limiter the answer to the attempt sent with r, whose
// context is ctx, as f judges it; when ctx carries a [Verdict] and the
// attempt failed, it leaves the answer there for the classifier's
// verdict to settle.
func (g *Gate) Answer(ctx context.Context, r rebound.Reservation, failed bool, f rebound.RateFeedback) {
	if g == nil || g.Limiter == nil {
		return
	}
	if v := Of(ctx); v != nil && failed && v.hold(g, r, f) {
		return
	}
	g.Observe(r, f)
}

// Verdict carries a failed attempt's answer from the rate limit, which
// sees it first, below the retry loop, to the client's classifier (a
// WithClassifier), which decides in the loop whether it was a throttle:
// the limiter hears of the answer once, with the verdict's word. It is
// safe for concurrent use; a nil *Verdict holds nothing.
type Verdict struct {
	mu   sync.Mutex
	g    *Gate
	r    rebound.Reservation
	f    rebound.RateFeedback
	held bool
}

type verdictKey struct{}

// Await returns ctx carrying a new Verdict for the attempt made with it,
// when on (a rate limit and a classifier are both set); else ctx and nil.
func Await(ctx context.Context, on bool) (context.Context, *Verdict) {
	if !on {
		return ctx, nil
	}
	v := new(Verdict)
	return context.WithValue(ctx, verdictKey{}, v), v
}

// hold keeps the answer, unless one is kept already (the context of one
// attempt reached the limit twice).
func (v *Verdict) hold(g *Gate, r rebound.Reservation, f rebound.RateFeedback) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.held {
		return false
	}
	v.g, v.r, v.f, v.held = g, r, f, true
	return true
}

// Settle tells the limiter the answer held, if any, with the classifier's
// word on whether it was a throttle: builtin is the verdict the
// classifier was given, final the one it returned. A failure it marks as
// throttling counts as one; a throttle of the built-in rules that it
// unmarks (a 503 with Retry-After that is the server's maintenance, not
// its limit) does not cut the rate; when it leaves the mark as it was,
// the rate limit's own rules stand (they also count a pushback or a
// RESOURCE_EXHAUSTED that the built-in verdict does not mark). The
// server's explicit wait is the answer's own, else the verdict's pushback
// or minimum delay.
func (v *Verdict) Settle(builtin, final rebound.RetryInfo) {
	g, r, f, held := v.take()
	if !held {
		return
	}
	if final.SlowDown != builtin.SlowDown {
		f.SlowDown = final.SlowDown
	}
	switch {
	case !f.SlowDown:
		f.Wait = 0
	case f.Wait > 0:
	case final.HasRetryAfter:
		f.Wait = final.RetryAfter
	default:
		f.Wait = final.MinDelay
	}
	g.Observe(r, f)
}

// Release tells the limiter the answer held, if any, as the rate limit's
// own rules judge it: the attempt ended where no classifier ran (it
// succeeded, or its own timer cut it).
func (v *Verdict) Release() {
	if g, r, f, held := v.take(); held {
		g.Observe(r, f)
	}
}

func (v *Verdict) take() (*Gate, rebound.Reservation, rebound.RateFeedback, bool) {
	if v == nil {
		return nil, rebound.Reservation{}, rebound.RateFeedback{}, false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	g, r, f, held := v.g, v.r, v.f, v.held
	v.g, v.held = nil, false
	return g, r, f, held
}

// Of returns the Verdict that ctx carries, or nil.
func Of(ctx context.Context) *Verdict {
	v, _ := ctx.Value(verdictKey{}).(*Verdict)
	return v
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
	return rebound.RateFeedback{SlowDown: true, Wait: max(wait, 0)}
}
