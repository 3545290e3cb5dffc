package rebound

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
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
	low     float64 // the lowest remainder since, of answers to attempts before last's
	reset   time.Time
	limit   int64
	maxWait time.Duration

	// The remainder's fall per second (everyone's sends), measured from
	// from to last once that spans enough; next takes from's place
	// halfway, so that the measure is of the last few seconds.
	from, next reading
	fall       float64
	measured   bool

	// The pace: share × quota ÷ window. The quota is the published limit,
	// else the most a window was seen to start with; the window is the
	// time between two windows' resets (see turned). Every limiter
	// reading the same server comes to the same two numbers.
	share  float64
	quota  float64
	window float64   // seconds
	prev   time.Time // the reset of the window before
	opened int64     // the last attempt given a turn before the window's first answer
	turns  int       // windows whose length was measured

	// The reset as read (the earliest of the window's answers); whether
	// every answer read the same (fixed), and answers that were not a
	// whole number of seconds after the window's first (at first) did
	// (shown): a reset written as a time. late is what is taken off such
	// a reset (see turned).
	raw          time.Time
	first        time.Time
	fixed, shown bool
	late         time.Duration
	rate         float64   // the rate the quota allows this limiter, at updated
	updated      time.Time // when share was last steered
	expires      time.Time // when rate stops applying: a window after the reset
}

// reading is a remainder published with the answer at at to the
// attempt seq.
type reading struct {
	rem float64
	seq int64
	at  time.Time
	ok  bool
}

// fixedSlop is how far apart two answers may read a reset written as a
// time: the answers are read a little after the server wrote them. Resets
// written in seconds from the answer, read over a window, are as far
// apart as the answers are, up to a second.
const fixedSlop = 50 * time.Millisecond

// windowSlop is how far apart two answers may put the reset of one
// window: the reset is published in whole seconds, rounded. Half the
// window's length, when that is more (see quotaState.slop).
const windowSlop = 1100 * time.Millisecond

// The span the remainder's fall is measured over: at least quotaSpan,
// and a fall of quotaFell, or quotaSpanMax; it slides by halves of that.
const (
	quotaSpan    = 250 * time.Millisecond
	quotaFell    = 8
	quotaSpanMax = 10 * time.Second
)

// How the share is steered (see steer): the pull, per second, of the
// remainder's lead on an even pace, and the climb of the share per
// second. Measured in `rebound sim -ratelimited` and in
// TestRateLimitedQuotaConverges (windows of 5s that start off the second,
// ten processes, seeds 1-4): a pull of 3 or more, or a climb of 0.01,
// left them less even (Jain 0.90-0.99); a climb of 0.05 with a pull of 2
// lost 1.5% of the calls in the rows of 10s windows; a climb of 0.03 with
// a pull of 1 kept Jain at 0.993 or more and lost none.
const (
	quotaPull  = 1
	quotaClimb = 0.03
	quotaFloor = 1e-3 // the least share: the limiter still sends
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
	same := s.on && now.Before(s.reset) && !reset.After(s.raw.Add(s.slop()))
	if same && seq <= s.opened && s.stale(reset) {
		return nil
	}
	if same && s.limit != 0 && q.Limit != 0 && q.Limit != s.limit {
		return fmt.Errorf("%w: limit %d within the window of limit %d", ErrQuota, q.Limit, s.limit)
	}
	s.maxWait = q.MaxWait
	if s.maxWait == 0 {
		s.maxWait = DefaultRetryDelayCap
	}
	cur := reading{rem: float64(q.Remaining), seq: seq, at: now, ok: true}
	if !same {
		// A quota seen first, or again after its window and another
		// passed with none, starts afresh.
		first := !s.on || !now.Before(s.expires) || s.share <= 0
		if first {
			s.prev, s.turns, s.late = time.Time{}, 0, 0
		} else {
			s.turned(now, reset)
		}
		s.on, s.last, s.low, s.raw, s.limit = true, cur, cur.rem, reset, q.Limit
		s.opened = l.seq
		s.fixed, s.shown, s.first, s.reset = true, false, now, reset
		s.expires = reset.Add(q.Reset)
		s.from, s.next, s.measured = cur, reading{}, false
		if first {
			// Until a window is seen from its start, the pace is the
			// remainder over the time to the reset.
			s.share, s.updated = 0, now
			s.quota, s.window = cur.rem, q.Reset.Seconds()
		} else {
			s.quota = max(s.quota, cur.rem+1)
			if q.Limit > 0 {
				s.quota = float64(q.Limit)
			}
		}
		l.steer(now, first)
		return nil
	}
	if d := reset.Sub(s.raw); d > fixedSlop || d < -fixedSlop {
		s.fixed, s.shown = false, false
	} else if f := math.Mod(now.Sub(s.first).Seconds(), 1); s.fixed && f > 0.1 && f < 0.9 {
		// Answers a whole number of seconds apart read the same reset
		// written in seconds from the answer too: these are not.
		s.shown = true
	}
	s.raw = minTime(s.raw, reset)
	s.reset = s.raw
	if s.shown {
		s.reset = s.raw.Add(-s.late)
	}
	if q.Limit != 0 {
		s.limit = q.Limit
	}
	if seq <= s.last.seq {
		// An answer older than the freshest: the pace keeps to the
		// freshest. But its attempt, given its turn first, may have
		// reached the server last (see unanswered): in a window the
		// remainder only falls, so a lower one is the later, and the
		// turns count against it.
		s.low = min(s.low, cur.rem)
		return nil
	}
	s.last, s.low = cur, cur.rem
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

// slop is how far after the window's reset an answer may put it and still
// be of the window: windowSlop, or half the window's length when that is
// more. An answer read late (its goroutine stalled, its stream read late)
// puts the reset as much later, on top of up to a second of rounding; the
// next window's answers put it a window later. Taking a late answer for a
// new window would measure the window's length as the second or two
// between the two readings, and pace the next window that many times too
// fast (TestQuotaLateAnswerSameWindow).
func (s *quotaState) slop() time.Duration {
	return max(windowSlop, time.Duration(s.window*float64(time.Second)/2))
}

// stale reports whether an answer that puts the reset at reset, taken for
// one of the window in force, to an attempt given its turn before this
// window's first answer came (s.opened), is the window before's, read
// after this window began (its goroutine stalled, its stream read late):
// its reset is nearer the window before's than this window's. It says
// nothing of this window: taken for it, its reset would pull this window's
// back, hold turns until then, and shorten the window's measured length
// (TestQuotaStaleAnswerIgnored). An answer of this window puts the reset
// within a second or so of this window's, whenever its attempt went.
func (s *quotaState) stale(reset time.Time) bool {
	return !s.prev.IsZero() && reset.Sub(s.prev) < s.raw.Sub(reset)
}

// turned notes, at now, the first answer of a window that resets at
// reset, after the window that reset at s.reset. The window's length is
// the time between the resets of the two windows before, to the second
// (windows are whole seconds, and a reset read in whole seconds from the
// answers is off by less than the time between two of them), once two
// turns were seen; until then, the longest time to a reset seen at a
// window's first answer. Every limiter reading the server comes to the
// same length: that is what keeps their paces alike.
//
// A reset written as a time (X-RateLimit-Reset as a Unix time), the same
// in every answer of the window, is rounded up to the second: late by up
// to a second, by as much in every window. A window that turns before the
// reset read says by how much at least; the most of those, up to a
// second, is taken off such resets, which brings the one process that
// sends the whole quota to its end instead of stopping short.
func (s *quotaState) turned(now, reset time.Time) {
	if !reset.After(s.raw.Add(s.slop())) {
		return // not a later window: a reset read anew
	}
	if !s.prev.IsZero() {
		if w := math.Round(s.raw.Sub(s.prev).Seconds()); w >= 1 && (s.turns == 0 || w <= 1.5*s.window) {
			s.window = w
			s.turns++
		}
	}
	if s.turns == 0 {
		s.window = max(s.window, reset.Sub(now).Seconds())
	}
	if s.shown {
		s.late = max(s.late, min(s.raw.Sub(now), time.Second))
	}

	s.prev = s.raw
}

// steer sets the limiter's share of the quota at now. The first quota
// seen gives it the whole: the limiter may be alone. Then the limiters
// reading the quota each send share × quota ÷ window, and each compares
// the remainder with an even pace through the window (quota × time to
// the reset ÷ window): all of them read the same remainder, so all see
// the same lead, at once, and each cuts its share in proportion to it
// (by e^-lead per second; a remainder behind the pace lifts it), while
// each adds the same small amount per second. That is AIMD with a
// decrease every limiter takes together, which evens out their shares: a
// limiter that starts late, or lost its share to chance, gains on the
// others until they are even. (Cuts that each limiter took when its own
// measure of the remainder's fall crossed the budget came at different
// times to different limiters, so their shares wandered apart.)
func (l *AdaptiveRateLimit) steer(now time.Time, first bool) {
	s := &l.quota
	dt := min(max(now.Sub(s.updated).Seconds(), 0), 1)
	s.updated = now
	if first {
		s.share = 1
	} else {
		pace := s.quota * max(s.reset.Sub(now).Seconds(), 0) / s.window
		lead := (pace - s.last.rem) / s.quota
		s.share = min(max(s.share*math.Exp(-quotaPull*lead*dt)+quotaClimb*dt, quotaFloor), 1)
	}
	s.rate, _ = l.quotaCeiling(now)
}

// quotaCeiling returns the rate the quota allows at now, the share of the
// quota's even pace; ok is false when no quota applies (none was
// published, or the last one's window has passed by a window's length).
// The pace of a window not seen from its start yet is the remainder over
// the time to the reset.
func (l *AdaptiveRateLimit) quotaCeiling(now time.Time) (float64, bool) {
	s := &l.quota
	if !s.on || !now.Before(s.expires) || s.share <= 0 || s.quota <= 0 || s.window <= 0 {
		return 0, false
	}
	return s.share * s.quota / s.window, true
}

// left returns the remainder estimated at now, with the attempts the
// freshest answer may not count taken off (this limiter's unanswered, see
// unanswered, and the others' since at the rate the remainder fell); ok
// is false when no quota is in force.
func (l *AdaptiveRateLimit) left(now time.Time) (rem float64, ok bool) {
	s := &l.quota
	if !s.on || !now.Before(s.reset) {
		return 0, false
	}
	others := max(s.fall-s.rate, 0) * max(now.Sub(s.last.at).Seconds(), 0)
	return min(s.last.rem, s.low) - l.unanswered() - others, true
}

// unanswered returns how many of the limiter's attempts the freshest
// answer's remainder may not count: those given turns after its attempt,
// and those given turns before it that are not answered yet. On a busy
// machine an attempt given its turn before another may reach the server
// after it (its goroutine stalled, its connection still dialling): the
// later one's answer then publishes a remainder without it, and a turn
// counted against that remainder alone took the slot the stalled attempt
// takes, and was refused. (That is what the front doors' tests of
// WithRateLimitQuota met under load: a refusal just before the reset.)
// Attempts more than 64 turns back are taken as answered.
func (l *AdaptiveRateLimit) unanswered() float64 {
	k := l.seq - l.quota.last.seq
	if k >= 64 {
		return float64(k)
	}
	return float64(k + int64(bits.OnesCount64(l.open>>k)))
}

// quotaTurn returns when an attempt whose turn is at may go as the quota
// sees it: when the remainder is spent, at the reset, or MaxWait from now
// if that is sooner. The attempts after it take turns at the rate from
// there, not at the reset all at once.
func (l *AdaptiveRateLimit) quotaTurn(now, at time.Time) time.Time {
	s := &l.quota
	// The remainder as it will be at the turn: the others send until
	// then too.
	rem, ok := l.left(at)
	if !ok || rem >= 1 {
		return at
	}
	if t := now.Add(s.maxWait); t.Before(s.reset) {
		return maxTime(at, t)
	}
	return maxTime(at, s.reset)
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
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
