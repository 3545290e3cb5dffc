// Package quotatest is a server's quota in fixed windows, published in
// one of the header families rebound reads (or none): the front doors'
// tests of WithRateLimitQuota, and the bench module's servers, share it.
package quotatest

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Family is the fields a Quota publishes its state in.
type Family int

// The families.
const (
	None     Family = iota // nothing published
	IETF                   // RateLimit and RateLimit-Policy, draft 08 on
	IETFDict               // RateLimit, drafts 05-07
	Separate               // RateLimit-Limit, -Remaining, -Reset, drafts 00-04
	X                      // X-RateLimit-Limit, -Remaining, -Reset in delta-seconds
	XUnix                  // the same, the reset a Unix time
)

func (f Family) String() string {
	return [...]string{"none", "IETF", "IETF dictionary", "RateLimit-*", "X-RateLimit-*", "X-RateLimit-* Unix"}[f]
}

// Quota accepts Limit requests in each Window (windows start at the
// first request), refuses the rest, and publishes what is left. It is
// safe for concurrent use.
type Quota struct {
	Limit  int
	Window time.Duration
	Family Family
	// Publish, when set, replaces the fields published (an absurd
	// server); the name is as net/http canonicalizes it.
	Publish func(now time.Time) map[string]string

	mu    sync.Mutex
	start time.Time
	used  int

	seen, refused atomic.Int64
}

// Take counts a request at now and reports whether the server accepts it,
// the fields it publishes (canonical header names), and, when it refuses,
// the seconds to the window's end (for a Retry-After).
func (q *Quota) Take(now time.Time) (ok bool, fields map[string]string, retryAfter int) {
	q.seen.Add(1)
	q.mu.Lock()
	if q.start.IsZero() {
		q.start = now
	}
	for !now.Before(q.start.Add(q.Window)) {
		q.start, q.used = q.start.Add(q.Window), 0
	}
	ok = q.used < q.Limit
	if ok {
		q.used++
	} else {
		q.refused.Add(1)
	}
	rem, end := q.Limit-q.used, q.start.Add(q.Window)
	q.mu.Unlock()
	// Whole seconds, rounded up, as servers publish them: the reset is
	// never earlier than said.
	reset := int((end.Sub(now) + time.Second - 1) / time.Second)
	if q.Publish != nil {
		return ok, q.Publish(now), reset
	}
	lim, r, t, w := strconv.Itoa(q.Limit), strconv.Itoa(rem), strconv.Itoa(reset), strconv.Itoa(int(q.Window/time.Second))
	switch q.Family {
	case IETF:
		fields = map[string]string{"Ratelimit": `"default";r=` + r + `;t=` + t, "Ratelimit-Policy": `"default";q=` + lim + `;w=` + w}
	case IETFDict:
		fields = map[string]string{"Ratelimit": "limit=" + lim + ", remaining=" + r + ", reset=" + t}
	case Separate:
		fields = map[string]string{"Ratelimit-Limit": lim, "Ratelimit-Remaining": r, "Ratelimit-Reset": t}
	case X:
		fields = map[string]string{"X-Ratelimit-Limit": lim, "X-Ratelimit-Remaining": r, "X-Ratelimit-Reset": t}
	case XUnix:
		fields = map[string]string{"X-Ratelimit-Limit": lim, "X-Ratelimit-Remaining": r, "X-Ratelimit-Reset": strconv.FormatInt(end.Add(time.Second-1).Unix(), 10)}
	}
	return ok, fields, reset
}

// PacedRun is how long the front doors' tests of a client's pacing run
// their paced callers (see Enough) against a quota of 3s windows: 4s, a
// second into the window after the first reset, or with short (go test
// -short) half a second into it. Either way the callers, paced, cross the
// reset, and are served the limit with none refused.
func PacedRun(short bool) time.Duration {
	if short {
		return 3500 * time.Millisecond
	}
	return 4 * time.Second
}

// Enough reports whether callers that have called q since start have run
// long enough to show what a test of a client's pacing asserts. Paced by
// the quota, they must run for at least run (past a window's reset) and
// have been served at least Limit requests, which a busy machine takes
// longer to make; unpaced (the test's control), they must have been
// refused once. A test also bounds the loop by a time of its own.
func (q *Quota) Enough(paced bool, start time.Time, run time.Duration) bool {
	if !paced {
		return q.Refused() > 0
	}
	return time.Since(start) >= run && q.Seen()-q.Refused() >= int64(q.Limit)
}

// Seen returns the requests the server saw.
func (q *Quota) Seen() int64 { return q.seen.Load() }

// Refused returns the requests the server refused.
func (q *Quota) Refused() int64 { return q.refused.Load() }
