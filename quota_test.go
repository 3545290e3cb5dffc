package rebound

import (
	"errors"
	"math"
	"testing"
	"time"
)

func newQuotaLimit(t *testing.T) *AdaptiveRateLimit {
	t.Helper()
	l, err := NewAdaptiveRateLimit(AdaptiveRateLimitConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestQuotaPaces: the first quota a server publishes starts the limit at
// the remainder over the time to its reset, before any refusal, and the
// turns that follow are that far apart.
func TestQuotaPaces(t *testing.T) {
	l := newQuotaLimit(t)
	now := time.Unix(1_000_000, 0)
	if err := l.Observe(l.Reserve(now), now, RateFeedback{Quota: Quota{Remaining: 20, Reset: 10 * time.Second, Limit: 40}}); err != nil {
		t.Fatal(err)
	}
	if r := l.Rate(); math.Abs(r-2) > 0.01 {
		t.Fatalf("rate %.3f/s after a quota of 20 left for 10s, want 2/s", r)
	}
	var prev time.Time
	for i := range 5 {
		r := l.Reserve(now)
		if i > 0 {
			if gap := r.Time().Sub(prev); gap < 490*time.Millisecond || gap > 510*time.Millisecond {
				t.Fatalf("turn %d is %v after the one before, want 0.5s", i, gap)
			}
		}
		prev = r.Time()
	}
}

// TestQuotaSpentWaitsForReset: with nothing left, the next turn is at the
// reset, and the turns after it follow at the rate, not all at the reset;
// a reset further than the caller's cap (MaxWait) keeps no turn longer
// than the cap.
func TestQuotaSpentWaitsForReset(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	l := newQuotaLimit(t)
	if err := l.Observe(l.Reserve(now), now, RateFeedback{Quota: Quota{Remaining: 0, Reset: 3 * time.Second}}); err != nil {
		t.Fatal(err)
	}
	first := l.Reserve(now).Time()
	if want := now.Add(3 * time.Second); !first.Equal(want) {
		t.Fatalf("the first turn with nothing left is %v after the answer, want at the reset, 3s", first.Sub(now))
	}
	second := l.Reserve(now).Time()
	if gap := second.Sub(first); gap <= 0 {
		t.Fatalf("the second turn is %v after the first: a burst at the reset", gap)
	}

	l = newQuotaLimit(t)
	if err := l.Observe(l.Reserve(now), now, RateFeedback{Quota: Quota{Remaining: 0, Reset: time.Hour, MaxWait: 5 * time.Second}}); err != nil {
		t.Fatal(err)
	}
	if d := l.Reserve(now).Delay(now); d > 5*time.Second {
		t.Fatalf("a turn waits %v for a reset an hour away, want at most the 5s cap", d)
	}
	if _, ok := l.ReserveBy(now, now.Add(2*time.Second)); ok {
		t.Fatal("a turn past the deadline was given")
	}
}

// TestQuotaAbsurdIgnored: a quota absurd in itself is ignored with an
// error that says why, and the limiter goes on as if none had come.
func TestQuotaAbsurdIgnored(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	for name, q := range map[string]Quota{
		"negative remaining":   {Remaining: -1, Reset: time.Second},
		"negative limit":       {Remaining: 1, Reset: time.Second, Limit: -5},
		"reset in the past":    {Remaining: 1, Reset: -time.Second},
		"reset years away":     {Remaining: 1, Reset: 3 * 365 * 24 * time.Hour},
		"remaining over limit": {Remaining: 11, Reset: time.Second, Limit: 10},
		"negative MaxWait":     {Remaining: 1, Reset: time.Second, MaxWait: -1},
	} {
		t.Run(name, func(t *testing.T) {
			l := newQuotaLimit(t)
			err := l.Observe(l.Reserve(now), now, RateFeedback{Quota: q})
			if !errors.Is(err, ErrQuota) {
				t.Fatalf("Observe(%+v) = %v, want ErrQuota", q, err)
			}
			if r := l.Rate(); r != 0 {
				t.Fatalf("rate %v after an ignored quota, want 0 (not limiting)", r)
			}
		})
	}
}

// TestQuotaContradiction: a limit other than the one published before
// within the same window is ignored, and the pace stays.
func TestQuotaContradiction(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	l := newQuotaLimit(t)
	if err := l.Observe(l.Reserve(now), now, RateFeedback{Quota: Quota{Remaining: 50, Reset: 10 * time.Second, Limit: 100}}); err != nil {
		t.Fatal(err)
	}
	before := l.Rate()
	now = now.Add(time.Second)
	err := l.Observe(l.Reserve(now), now, RateFeedback{Quota: Quota{Remaining: 1, Reset: 9 * time.Second, Limit: 5}})
	if !errors.Is(err, ErrQuota) {
		t.Fatalf("a limit of 5 within a window of 100: Observe = %v, want ErrQuota", err)
	}
	if r := l.Rate(); r < before*0.9 {
		t.Fatalf("rate %.2f/s after the contradiction, was %.2f/s", r, before)
	}
}

// TestQuotaExpires: once a window has passed its reset by its own length
// with no quota since, the learned rate is in charge again; a throttle
// under the quota cuts below the quota's rate.
func TestQuotaExpires(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	l := newQuotaLimit(t)
	if err := l.Observe(l.Reserve(now), now, RateFeedback{Quota: Quota{Remaining: 10, Reset: 10 * time.Second}}); err != nil {
		t.Fatal(err)
	}
	if r := l.Rate(); math.Abs(r-1) > 0.01 {
		t.Fatalf("rate %.3f/s, want 1/s", r)
	}
	// Successes with no quota, past the window and another: the answers
	// lift the learned rate, and nothing caps it at the old quota's.
	for i := range 40 {
		at := now.Add(21*time.Second + time.Duration(i)*100*time.Millisecond)
		l.Observe(l.Reserve(at), at, RateFeedback{})
	}
	if r := l.Rate(); r <= 2 {
		t.Fatalf("rate %.3f/s after the quota expired, want the learned rate above the old quota's 1/s", r)
	}

	l = newQuotaLimit(t)
	q := Quota{Remaining: 100, Reset: 10 * time.Second}
	l.Observe(l.Reserve(now), now, RateFeedback{Quota: q})
	for i := range 10 {
		at := now.Add(time.Duration(i) * 100 * time.Millisecond)
		q.Remaining--
		q.Reset = 10*time.Second - time.Duration(i)*100*time.Millisecond
		l.Observe(l.Reserve(at), at, RateFeedback{Quota: q})
	}
	paced := l.Rate()
	at := now.Add(time.Second)
	l.Observe(l.Reserve(at), at, RateFeedback{SlowDown: true, Quota: q})
	if r := l.Rate(); r >= paced {
		t.Fatalf("rate %.2f/s after a throttle under a quota pace of %.2f/s, want a cut", r, paced)
	}
}

// TestQuotaSpentFirstCapped: a quota spent when first seen keeps turns no
// further apart than the caller's cap.
func TestQuotaSpentFirstCapped(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	l := newQuotaLimit(t)
	if err := l.Observe(l.Reserve(now), now, RateFeedback{Quota: Quota{Remaining: 0, Reset: time.Minute, MaxWait: 200 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	prev := now
	for i := range 5 {
		at := l.Reserve(now).Time()
		if gap := at.Sub(prev); gap > 200*time.Millisecond {
			t.Fatalf("turn %d is %v after the one before, want at most the 200ms cap", i, gap)
		}
		prev = at
	}
}

// TestQuotaTurnCountsOthers: a turn is held for the reset when the
// remainder, as it will be at that turn, is spent, the others' sends until
// then counted at the rate the remainder fell: here it falls by 40 a
// second, this limiter's pace is slower, and 10 are left half a second
// before the reset, so a turn goes at the reset before this limiter has
// taken the 10 by itself.
func TestQuotaTurnCountsOthers(t *testing.T) {
	l := newQuotaLimit(t)
	t0 := time.Unix(1_000_000, 0)
	reset := t0.Add(time.Second)
	for i := range 11 {
		at := t0.Add(time.Duration(i) * 50 * time.Millisecond)
		q := Quota{Remaining: int64(30 - 2*i), Reset: reset.Sub(at), Limit: 100}
		if err := l.Observe(l.Reserve(at), at, RateFeedback{Quota: q}); err != nil {
			t.Fatal(err)
		}
	}
	now := t0.Add(500 * time.Millisecond)
	for i := range 10 {
		if r := l.Reserve(now); !r.Time().Before(reset) {
			switch {
			case i == 0:
				t.Fatal("the first turn, with 10 left, waits for the reset")
			case i >= 9:
				t.Fatalf("turn %d is the first at the reset: the others' sends until the turns were not counted", i)
			}
			return
		}
	}
	t.Fatal("no turn of ten waits for the reset, with 10 left and the remainder falling by 40 a second")
}

// TestQuotaTurnCountsAttemptsReordered: an attempt given its turn before
// another may reach the server after it (on a busy machine its goroutine
// stalls), and the later attempt's answer then publishes a remainder
// that does not count it. A turn is held for the reset when the
// remainder, with every attempt not answered yet taken off, is spent; and
// the earlier attempt's answer, which comes last with the lower
// remainder, is not passed over as older. Here a window of 15 in 3s has 2
// left when B's answer comes, A (given its turn before B) still on its
// way, then 1 when A's comes: either way one more turn fits before the
// reset, not two.
func TestQuotaTurnCountsAttemptsReordered(t *testing.T) {
	for _, answered := range []bool{false, true} {
		l := newQuotaLimit(t)
		t0 := time.Unix(1_000_000, 0)
		quota := func(rem int64, at, reset time.Time) RateFeedback {
			return RateFeedback{Quota: Quota{Remaining: rem, Reset: reset.Sub(at), Limit: 15}}
		}
		observe := func(r Reservation, at time.Time, f RateFeedback) {
			t.Helper()
			if err := l.Observe(r, at, f); err != nil {
				t.Fatal(err)
			}
		}
		// A first window, then the next one seen from its start.
		observe(l.Reserve(t0), t0, quota(14, t0, t0.Add(3*time.Second)))
		t1 := t0.Add(3 * time.Second)
		reset := t1.Add(3 * time.Second)
		observe(l.Reserve(t1), t1, quota(14, t1, reset))
		a, b := l.Reserve(t1), l.Reserve(t1)
		if !a.Time().Before(b.Time()) || !b.Time().Before(reset) {
			t.Fatalf("turns at %v and %v after the window's start, want both before the reset at 3s", a.Time().Sub(t1), b.Time().Sub(t1))
		}
		// Other processes took 11 at the window's start; B reached the
		// server before A.
		now := t1.Add(200 * time.Millisecond)
		observe(b, now, quota(2, now, reset))
		if answered {
			now = now.Add(10 * time.Millisecond)
			observe(a, now, quota(1, now, reset))
		}
		n := 0
		for range 5 {
			if l.Reserve(now).Time().Before(reset) {
				n++
			}
		}
		if n != 1 {
			if answered {
				t.Errorf("%d turns before the reset after B's answer said 2 left and A's, later, 1; want 1", n)
			} else {
				t.Errorf("%d turns before the reset with 2 left and A on its way, want 1", n)
			}
		}
	}
}

// An answer of the window before, read after the next window began (its
// goroutine stalled, or its stream was read late), says nothing of the
// window in force: the reset, the pace and the window's length stay as the
// window's own answers put them, and turns are not held for it.
func TestQuotaStaleAnswerIgnored(t *testing.T) {
	l := newQuotaLimit(t)
	t0 := time.Unix(1_000_000, 0)
	const w = 5 * time.Second
	observe := func(r Reservation, at time.Time, rem int64, reset time.Duration) {
		t.Helper()
		if err := l.Observe(r, at, RateFeedback{Quota: Quota{Remaining: rem, Reset: reset, Limit: 50}}); err != nil {
			t.Fatal(err)
		}
	}
	// Three windows seen from their start: the length is measured.
	t2 := t0.Add(2 * w)
	reset := t2.Add(w)
	var stale Reservation
	for i := range 3 {
		at := t0.Add(time.Duration(i) * w)
		if i == 2 {
			stale = l.Reserve(at.Add(-100 * time.Millisecond)) // sent in the window before
		}
		observe(l.Reserve(at), at, 49, w)
	}
	observe(l.Reserve(t2.Add(100*time.Millisecond)), t2.Add(100*time.Millisecond), 45, w-100*time.Millisecond)
	before, _ := l.quotaCeiling(t2.Add(100 * time.Millisecond))
	// The server answered the stale attempt at t2-50ms, "reset in 1 s"
	// (rounded up), with nothing left; read 650 ms later.
	at := t2.Add(600 * time.Millisecond)
	observe(stale, at, 0, time.Second)
	if !l.quota.reset.Equal(reset) {
		t.Errorf("reset at %v after the stale answer, want the window's own, %v", l.quota.reset.Sub(t2), reset.Sub(t2))
	}
	if r := l.Reserve(at); r.Time().Sub(at) > 500*time.Millisecond {
		t.Errorf("a turn %v after the stale answer with 45 left, want one within the pace", r.Time().Sub(at))
	}
	// The window's next answer, and the window after: its length is
	// still 5 s, and the pace as before.
	at = t2.Add(time.Second)
	observe(l.Reserve(at), at, 40, reset.Sub(at))
	at = reset.Add(50 * time.Millisecond)
	observe(l.Reserve(at), at, 49, w-50*time.Millisecond)
	if l.quota.window != w.Seconds() {
		t.Errorf("window %vs after the stale answer, want %vs", l.quota.window, w.Seconds())
	}
	if after, _ := l.quotaCeiling(at); after > 1.5*before {
		t.Errorf("pace %.1f/s after the stale answer, was %.1f/s", after, before)
	}
}

// An answer read late (its goroutine stalled, its stream read half a second
// after the server wrote it), whose reset in whole seconds was rounded up,
// puts the window's reset more than a second after the others: it is still
// the window's, not the start of a new one, which would cut the window's
// measured length to the second or two between the two readings and pace
// the next window that many times too fast.
func TestQuotaLateAnswerSameWindow(t *testing.T) {
	l := newQuotaLimit(t)
	t0 := time.Unix(1_000_000, 0)
	const w = 5 * time.Second
	observe := func(at time.Time, rem int64, reset time.Duration) {
		t.Helper()
		if err := l.Observe(l.Reserve(at), at, RateFeedback{Quota: Quota{Remaining: rem, Reset: reset, Limit: 50}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		observe(t0.Add(time.Duration(i)*w), 49, w)
	}
	t2 := t0.Add(2 * w)
	// Written at t2+1.99s, "reset in 4 s" (3.01 rounded up), read at
	// t2+2.5s: a reset 1.5 s after the window's.
	observe(t2.Add(2500*time.Millisecond), 40, 4*time.Second)
	observe(t2.Add(2600*time.Millisecond), 39, 3*time.Second)
	if !l.quota.reset.Equal(t2.Add(w)) || l.quota.window != w.Seconds() {
		t.Errorf("reset %v, window %vs after a late answer; want %v, %vs", l.quota.reset.Sub(t2), l.quota.window, w, w.Seconds())
	}
	for i := range 2 {
		at := t2.Add(time.Duration(i+1) * w)
		observe(at, 49, w)
	}
	if l.quota.window != w.Seconds() {
		t.Errorf("window %vs two windows after a late answer, want %vs", l.quota.window, w.Seconds())
	}
}
