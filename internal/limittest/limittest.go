// Package limittest is a server's rate limit that lasts a while, and a
// client that calls it from many goroutines until the rate it gets
// accepted comes back after the limit stops: the front doors' tests of
// the adaptive rate limit's recovery, on the real clock, share it.
package limittest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
)

// Limit is a server's rate limit: it accepts Rate requests a second, with
// a burst of Burst, until it stops, then everything. It is safe for
// concurrent use.
type Limit struct {
	rate, burst float64

	mu       sync.Mutex
	until    time.Time // when it stops
	tokens   float64
	last     time.Time
	accepted []time.Time
}

// New returns a Limit of rate a second, with a burst of burst, that stops
// d from now.
func New(rate, burst float64, d time.Duration) *Limit {
	now := time.Now()
	return &Limit{rate: rate, burst: burst, until: now.Add(d), tokens: burst, last: now}
}

// Length is how long the front doors' recovery tests limit the server:
// 2s, or with -short 1s. Either is long enough for the client's rate limit
// to be throttled and cut its rate (the first cut comes within a
// quarter-second of the first attempt); what Recovery then asserts, the
// climb back once the limit stops, is the same, a second sooner.
func Length() time.Duration {
	if testing.Short() {
		return time.Second
	}
	return 2 * time.Second
}

// Allow reports whether the server accepts a request now: the handler
// answers as the server's protocol says "too many requests" when it does
// not.
func (l *Limit) Allow() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if now.Before(l.until) {
		l.tokens = min(l.burst, l.tokens+now.Sub(l.last).Seconds()*l.rate)
		l.last = now
		if l.tokens < 1 {
			return false
		}
		l.tokens--
	}
	l.accepted = append(l.accepted, now)
	return true
}

// Stop returns when the limit stops.
func (l *Limit) Stop() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// acceptedSince returns how many requests the server accepted from t on.
func (l *Limit) acceptedSince(t time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for i := len(l.accepted) - 1; i >= 0 && !l.accepted[i].Before(t); i-- {
		n++
	}
	return n
}

// Recovery has callers goroutines call back to back, each call with a
// deadline a second away, until the server, its limit stopped, has
// accepted more than the limit's rate over the last second. It reports how
// long after the stop that was, and how many calls the client's rate limit
// refused (rebound.ErrRateLimited); it fails t when that takes more than
// within after the stop, with rate, the client's rate, each second. A call
// refused at once is tried again 10ms later, as busy callers do: on a
// loaded machine, that is what ran the adaptive rate limit's queue ahead
// of every deadline. (The twenty callers still ask a hundred times a
// second each for one of the rate's twenty turns. Tried again at once,
// with no pause, they kept the process's CPU from the callers whose turn
// had come: under -race with the CPUs saturated those went late, past
// their deadline, and the server saw two calls a second with the client's
// rate at 15.)
func Recovery(t testing.TB, l *Limit, callers int, within time.Duration, call func(context.Context) error, rate func() float64) (took time.Duration, refused int) {
	t.Helper()
	stop := l.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg sync.WaitGroup
		n  atomic.Int64
	)
	for range callers {
		wg.Go(func() {
			for ctx.Err() == nil {
				cctx, ccancel := context.WithTimeout(ctx, time.Second)
				err := call(cctx)
				ccancel()
				if errors.Is(err, rebound.ErrRateLimited) {
					n.Add(1)
					select {
					case <-ctx.Done():
					case <-time.After(10 * time.Millisecond):
					}
				}
			}
		})
	}
	defer func() {
		cancel()
		wg.Wait()
	}()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var rates []float64 // the client's rate, each second
	for i := 1; ; i++ {
		now := <-tick.C
		if i%20 == 0 {
			rates = append(rates, rate())
		}
		last := l.acceptedSince(now.Add(-time.Second))
		if now.After(stop.Add(time.Second)) && last > int(l.rate) {
			return now.Sub(stop), int(n.Load())
		}
		if now.After(stop.Add(within)) {
			t.Errorf("%v after the server stopped limiting, it accepted %d requests in the last second (the client refused %d calls in all; its rate each second: %.1f), want more than its limit, %v a second", within, last, n.Load(), rates, l.rate)
			return now.Sub(stop), int(n.Load())
		}
	}
}
