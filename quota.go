package rebound

import (
	"errors"
	"fmt"
	"time"
)

// Quota is the quota a server published with an answer: how many more
// requests it accepts in its current window, and when that window
// resets. Its zero value is no quota.
type Quota struct {
	// Remaining is the requests the server still accepts before the
	// reset; at least 0.
	Remaining int64
	// Reset is how long after the answer the window resets; a quota
	// without one (0) says nothing of a rate and is not used.
	Reset time.Duration
	// Limit is the quota of a whole window, 0 if the server did not say.
	Limit int64
	// MaxWait is the longest the quota may keep the limiter's sends
	// apart: the caller's cap on a server's waits (the front doors'
	// WithRetryDelayCap), 0 for [DefaultRetryDelayCap].
	MaxWait time.Duration
}

// MaxQuotaReset is the longest reset of a [Quota] a limiter believes: a
// day, the longest window of the quotas in use; a longer one (a Unix time
// read as seconds to wait, a clock years off) is ignored.
const MaxQuotaReset = 24 * time.Hour

// ErrQuota is the error of a [Quota] that a limiter ignored: absurd in
// itself, or contradicting the ones before it.
var ErrQuota = errors.New("rebound: quota ignored")

// check returns nil, or why q is absurd in itself.
func (q Quota) check() error {
	switch {
	case q.Remaining < 0:
		return fmt.Errorf("%w: remaining %d is negative", ErrQuota, q.Remaining)
	case q.Limit < 0:
		return fmt.Errorf("%w: limit %d is negative", ErrQuota, q.Limit)
	case q.Reset < 0:
		return fmt.Errorf("%w: reset %v is in the past", ErrQuota, q.Reset)
	case q.Reset > MaxQuotaReset:
		return fmt.Errorf("%w: reset %v is more than a day away", ErrQuota, q.Reset)
	case q.Limit > 0 && q.Remaining > q.Limit:
		return fmt.Errorf("%w: remaining %d is more than the limit %d", ErrQuota, q.Remaining, q.Limit)
	case q.MaxWait < 0:
		return fmt.Errorf("%w: MaxWait %v is negative", ErrQuota, q.MaxWait)
	}
	return nil
}

// quotaState is what an AdaptiveRateLimit knows of the quota a server
// publishes, and the rate it allows this limiter.
type quotaState struct {
	on      bool    // a quota is in force
	last    reading // the freshest answer's: later attempts are not in it
	reset   time.Time
	limit   int64
	maxWait time.Duration

	// The remainder's fall per second (everyone's sends), measured from
	// from to last once that spans enough; next takes from's place
	// halfway, so that the measure is of the last few seconds.
	from, next reading
	fall       float64
	measured   bool

	rate    float64   // the rate the quota allows this limiter
	updated time.Time // when rate was last set
	expires time.Time // when rate stops applying: a window after the reset
}

// reading is a remainder published with the answer at at to the
// attempt seq.
type reading struct {
	rem float64
	seq int64
	at  time.Time
	ok  bool
}

// windowSlop is how far apart two answers may put the reset of one
// window: the reset is published in whole seconds, rounded.
const windowSlop = 1100 * time.Millisecond

// The span the remainder's fall is measured over: at least quotaSpan,
// and a fall of quotaFell, or quotaSpanMax; it slides by halves of that.
const (
	quotaSpan    = 250 * time.Millisecond
	quotaFell    = 8
	quotaSpanMax = 10 * time.Second
)

// Of the quota's rate: how far above the budget the remainder may fall
// before the rate is cut, and how fast it climbs, in budgets per second.
// Measured in `rebound sim -ratelimited` over eight seeds: a cut at once
// (no margin) or a climb of 0.05 left ten processes less even (a
// scaled-down ceiling while the remainder falls fast, and turns after
// the reset at the quota's rate, cost 5-10% of the calls).
const (
	quotaOver  = 0.05
	quotaClimb = 0.02
)

// publish takes q, published with the answer at now to the attempt seq.
func (l *AdaptiveRateLimit) publish(q Quota, seq int64, now time.Time) error {
	if err := q.check(); err != nil {
		return err
	}
	if q.Reset == 0 {
		return nil
	}
	s := &l.quota
	reset := now.Add(q.Reset)
	same := s.on && now.Before(s.reset) && !reset.After(s.reset.Add(windowSlop))
	if same && s.limit != 0 && q.Limit != 0 && q.Limit != s.limit {
		return fmt.Errorf("%w: limit %d within the window of limit %d", ErrQuota, q.Limit, s.limit)
	}
	s.maxWait = q.MaxWait
	if s.maxWait == 0 {
		s.maxWait = DefaultRetryDelayCap
	}
	cur := reading{rem: float64(q.Remaining), seq: seq, at: now, ok: true}
	if !same {
		// A quota that allowed nothing (the window spent when first
		// seen) gave no pace to start from: this one starts afresh.
		first := !s.on || !now.Before(s.expires) || s.rate <= 0
		s.on, s.last, s.reset, s.limit = true, cur, reset, q.Limit
		s.expires = reset.Add(q.Reset)
		s.from, s.next, s.measured = cur, reading{}, false
		if first {
			s.rate, s.updated = 0, now
		}
		l.steer(now, first)
		return nil
	}
	if reset.Before(s.reset) {
		s.reset = reset
	}
	if q.Limit != 0 {
		s.limit = q.Limit
	}
	if seq <= s.last.seq {
		return nil // an answer older than the freshest
	}
	s.last = cur
	span := now.Sub(s.from.at)
	fell := s.from.rem - cur.rem
	if span >= quotaSpanMax || span >= quotaSpan && fell >= quotaFell {
		s.fall, s.measured = fell/span.Seconds(), true
		switch {
		case !s.next.ok:
			s.next = cur
		case now.Sub(s.next.at) >= span/2:
			s.from, s.next = s.next, cur
		}
	}
	l.steer(now, false)
	return nil
}

// steer sets the quota's rate at now: first, the budget; then it is cut
// by the budget over the fall when the remainder falls faster than the
// budget (every limiter reading it sees that at once, and cuts in
// proportion to what it sends; by half at most), and the measure starts
// again; it climbs by the same amount for every limiter otherwise, which
// evens their shares out (as AIMD does), never above the budget.
func (l *AdaptiveRateLimit) steer(now time.Time, first bool) {
	s := &l.quota
	b, _ := l.budget(now)
	dt := now.Sub(s.updated).Seconds()
	s.updated = now
	switch {
	case first:
		s.rate = b
	case s.measured && s.fall > b*(1+quotaOver) && s.reset.Sub(now) >= max(time.Second, 2*now.Sub(s.from.at)):
		// At most by half: a remainder spent to 0 leaves a pace to
		// start the next window from.
		s.rate *= max(b/s.fall, 0.5)
		s.from, s.next, s.measured = s.last, reading{}, false
	default:
		s.rate = min(s.rate+quotaClimb*b*dt, max(s.rate, b))
	}
}

// quotaCeiling returns the rate the quota allows at now; ok is false
// when no quota applies (none was published, or the last one's window
// has passed by a window's length).
func (l *AdaptiveRateLimit) quotaCeiling(now time.Time) (float64, bool) {
	s := &l.quota
	if !s.on || !now.Before(s.expires) || s.rate <= 0 {
		return 0, false
	}
	return s.rate, true
}

// left returns the remainder estimated at now, with the attempts given
// turns since the freshest answer taken off (all of this limiter's, and
// the others' at the rate the remainder fell); ok is false when no quota
// is in force.
func (l *AdaptiveRateLimit) left(now time.Time) (rem float64, ok bool) {
	s := &l.quota
	if !s.on || !now.Before(s.reset) {
		return 0, false
	}
	others := max(s.fall-s.rate, 0) * max(now.Sub(s.last.at).Seconds(), 0)
	return s.last.rem - float64(l.seq-s.last.seq) - others, true
}

// budget returns the rate that spends the remainder evenly until the
// reset, the remainder taken as falling since the freshest answer at
// the rate it fell; ok is false when no quota is in force.
func (l *AdaptiveRateLimit) budget(now time.Time) (float64, bool) {
	s := &l.quota
	if !s.on || !now.Before(s.reset) {
		return 0, false
	}
	rem := s.last.rem - max(s.fall, 0)*max(now.Sub(s.last.at).Seconds(), 0)
	return max(rem, 0) / s.reset.Sub(now).Seconds(), true
}

// quotaTurn returns when an attempt whose turn is at may go as the quota
// sees it: when the remainder is spent, at the reset, or MaxWait from now
// if that is sooner. The attempts after it take turns at the rate from
// there, not at the reset all at once.
func (l *AdaptiveRateLimit) quotaTurn(now, at time.Time) time.Time {
	s := &l.quota
	rem, ok := l.left(now)
	if !ok || rem >= 1 {
		return at
	}
	if t := now.Add(s.maxWait); t.Before(s.reset) {
		return maxTime(at, t)
	}
	return maxTime(at, s.reset)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// applyQuota brings the limiter's rate under the quota's after an
// answer at now. The first quota ends the slow start and starts the
// limit, at the quota's rate: the server has refused nothing yet, so the
// answers that follow lift the learned rate as they would after a cut
// long ago, and the quota alone paces the client.
func (l *AdaptiveRateLimit) applyQuota(now time.Time) {
	if !l.quota.on {
		return
	}
	r := l.learned
	if !l.enabled {
		l.enabled, l.last, l.latest = true, now, now
		l.endSlowStart()
		// A quota spent when first seen gives no rate: the pace until
		// the next window's answers is the one the caller's cap allows.
		l.tokens, r = 0, max(l.quota.rate, 1/l.quota.maxWait.Seconds())
	}
	l.setRate(now, r)
}
