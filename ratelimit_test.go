package rebound_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
)

func TestAdaptiveRateLimitValidate(t *testing.T) {
	if err := (rebound.AdaptiveRateLimitConfig{}).Validate(); err != nil {
		t.Fatalf("zero value: %v", err)
	}
	bad := []struct {
		field string
		c     rebound.AdaptiveRateLimitConfig
	}{
		{"Beta", rebound.AdaptiveRateLimitConfig{Beta: -0.1}},
		{"Beta", rebound.AdaptiveRateLimitConfig{Beta: 1}},
		{"Beta", rebound.AdaptiveRateLimitConfig{Beta: math.NaN()}},
		{"ScaleConstant", rebound.AdaptiveRateLimitConfig{ScaleConstant: math.Inf(1)}},
		{"ScaleConstant", rebound.AdaptiveRateLimitConfig{ScaleConstant: -1}},
		{"Smoothing", rebound.AdaptiveRateLimitConfig{Smoothing: 1.5}},
		{"Smoothing", rebound.AdaptiveRateLimitConfig{Smoothing: math.Inf(-1)}},
		{"MinRate", rebound.AdaptiveRateLimitConfig{MinRate: -0.5}},
		{"MinRate", rebound.AdaptiveRateLimitConfig{MinRate: math.NaN()}},
	}
	for _, b := range bad {
		_, err := rebound.NewAdaptiveRateLimit(b.c)
		if err == nil || !strings.Contains(err.Error(), "AdaptiveRateLimitConfig."+b.field+" ") {
			t.Errorf("%+v: error %v, want one naming %s", b.c, err, b.field)
		}
	}
	if _, err := rebound.NewAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{Beta: 0.5, ScaleConstant: 1, Smoothing: 1, MinRate: 2}); err != nil {
		t.Fatal(err)
	}
}

// TestDefaultAdaptiveRateLimit: DefaultAdaptiveRateLimit returns the
// documented defaults, and a zero field means the default's value: a
// limiter of the zero config and one of the defaults cut, climb and floor
// alike.
func TestDefaultAdaptiveRateLimit(t *testing.T) {
	def := rebound.DefaultAdaptiveRateLimit()
	if def != (rebound.AdaptiveRateLimitConfig{Beta: 0.7, ScaleConstant: 0.4, Smoothing: 0.8, MinRate: 0.5}) || def.Validate() != nil {
		t.Fatalf("DefaultAdaptiveRateLimit() = %+v, want Beta 0.7, ScaleConstant 0.4, Smoothing 0.8, MinRate 0.5", def)
	}
	zero, _ := rebound.NewAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{})
	full, _ := rebound.NewAdaptiveRateLimit(def)
	for _, l := range []*rebound.AdaptiveRateLimit{zero, full} {
		feed(l, 0, 2, 10, false)
		feed(l, 2, 2.1, 10, true) // a cut to Beta × 10
		feed(l, 2.1, 6, 5, false) // the climb
		feed(l, 6, 40, 10, true)  // cut after cut, down to the floor
	}
	if zero.Rate() != full.Rate() {
		t.Errorf("rate %v for the zero config, %v for DefaultAdaptiveRateLimit", zero.Rate(), full.Rate())
	}
	if got := zero.Rate(); got != 0.5 {
		t.Errorf("rate %v after cut on cut, want the 0.5 floor", got)
	}
}

// t0 is on a whole second, so that the half-second buckets of the
// measured rates fall where the tests expect.
var rlT0 = time.Unix(1_000_000, 0)

func at(s float64) time.Time { return rlT0.Add(time.Duration(s * float64(time.Second))) }

// feed sends and answers one attempt every 1/rate seconds in [from, to),
// each throttled or not, and returns the time after the last.
func feed(l *rebound.AdaptiveRateLimit, from, to, rate float64, throttled bool) {
	for s := from; s < to-1e-9; s += 1 / rate {
		r := l.Reserve(at(s))
		l.Observe(r, at(s), rebound.RateFeedback{SlowDown: throttled})
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 0.05*math.Max(1, math.Abs(b)) }

// TestAdaptiveRateLimitCubic walks the CUBIC curve on a fake clock: nothing is
// limited before the first throttle; the throttle cuts to Beta times the
// measured rate; the rate climbs back to it in K = cbrt(W·(1-β)/C)
// seconds and then probes above it.
func TestAdaptiveRateLimitCubic(t *testing.T) {
	l, _ := rebound.NewAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{})
	feed(l, 0, 2, 10, false)
	if l.Rate() != 0 {
		t.Fatalf("rate %v before any throttle, want 0 (not limiting)", l.Rate())
	}
	if r := l.Reserve(at(2)); r.Delay(at(2)) != 0 {
		t.Fatal("a reservation waits before any throttle")
	}
	r := l.Reserve(at(2))
	l.Observe(r, at(2), rebound.RateFeedback{SlowDown: true})
	if got := l.Rate(); !near(got, 7) {
		t.Fatalf("rate after the throttle %v, want 0.7 × 10", got)
	}
	k := math.Cbrt(10 * 0.3 / 0.4)
	steps := []struct {
		s, want float64
	}{
		{2 + k/2, 0.4*math.Pow(-k/2, 3) + 10},
		{2 + k, 10},
		{2 + k + 1, 10.4},
		{2 + k + 2, 13.2},
	}
	from := 2.0
	for _, st := range steps {
		feed(l, from, st.s, 10, false) // answers keep the measured rate at 10/s
		from = st.s
		r := l.Reserve(at(st.s))
		l.Observe(r, at(st.s), rebound.RateFeedback{})
		if got := l.Rate(); !near(got, st.want) {
			t.Errorf("at cut+%.2fs: rate %.2f, want %.2f", st.s-2, got, st.want)
		}
	}
}

// TestAdaptiveRateLimitMinRate: the rate never falls below MinRate.
func TestAdaptiveRateLimitMinRate(t *testing.T) {
	l, _ := rebound.NewAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{MinRate: 2})
	r := l.Reserve(at(0))
	l.Observe(r, at(0), rebound.RateFeedback{SlowDown: true})
	if l.Rate() != 2 {
		t.Fatalf("rate %v, want the floor 2", l.Rate())
	}
}

// TestAdaptiveRateLimitOneCutPerRound: a burst of throttles of attempts sent
// before a cut cuts once; a throttle of one of the first two attempts
// sent after it holds the rate; of the third, cuts again.
func TestAdaptiveRateLimitOneCutPerRound(t *testing.T) {
	l, _ := rebound.NewAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{})
	feed(l, 0, 2, 20, false)
	burst := make([]rebound.Reservation, 20)
	for i := range burst {
		burst[i] = l.Reserve(at(2))
	}
	for _, r := range burst {
		l.Observe(r, at(2.01), rebound.RateFeedback{SlowDown: true})
	}
	first := l.Rate()
	if !near(first, 14) {
		t.Fatalf("rate after a burst of 20 throttles %v, want one cut to 14", first)
	}
	for i, s := range []float64{2.1, 2.2} {
		r := l.Reserve(at(s))
		l.Observe(r, at(s), rebound.RateFeedback{SlowDown: true})
		if got := l.Rate(); !near(got, first) {
			t.Fatalf("a throttle of attempt %d after the cut changed the rate to %v, want it held at %v", i+1, got, first)
		}
	}
	r := l.Reserve(at(2.3))
	l.Observe(r, at(2.3), rebound.RateFeedback{SlowDown: true})
	if got := l.Rate(); !(got < first*0.75) {
		t.Fatalf("a throttle of the third attempt sent after the cut left the rate at %v", got)
	}
}

// TestAdaptiveRateLimitWaitCaps: the server's wait on a throttle that does not
// cut (within the round) keeps the rate from rising until it has passed,
// at the rate it had, not at the cut value; then the climb goes on along
// the curve of the last cut.
func TestAdaptiveRateLimitWaitCaps(t *testing.T) {
	l, _ := rebound.NewAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{})
	feed(l, 0, 2, 10, false)
	r := l.Reserve(at(2))
	l.Observe(r, at(2), rebound.RateFeedback{SlowDown: true}) // 7, no wait
	// The first attempt after the cut; its answer comes late.
	slow := l.Reserve(at(2))
	feed(l, 2, 3, 10, false)
	before := l.Rate()
	if !(before > 7) {
		t.Fatalf("rate %v a second after the cut, want it climbing above 7", before)
	}
	l.Observe(slow, at(3), rebound.RateFeedback{SlowDown: true, Wait: 2 * time.Second})
	if got := l.Rate(); got != before {
		t.Fatalf("rate %v after a throttle within the round, want no cut (%v)", got, before)
	}
	feed(l, 3, 4.95, 10, false)
	if got := l.Rate(); got != before {
		t.Fatalf("rate %v within the wait of a throttle that did not cut, want it held at %v", got, before)
	}
	feed(l, 4.95, 5.1, 10, false) // the last at 5.05
	k := math.Cbrt(10 * 0.3 / 0.4)
	if got, want := l.Rate(), 0.4*math.Pow(3.05-k, 3)+10; !near(got, want) {
		t.Fatalf("rate %v after the wait, want the curve's %v", got, want)
	}
}

// TestAdaptiveRateLimitSlowStart: before the first throttle, four attempts go
// at once and the next waits for an answer; each answer that is not a
// throttle lets two go (its place and one more); the first throttle ends
// the slow start, wakes the attempts waiting, and sets the rate from what
// the client would have sent, those waiting included.
func TestAdaptiveRateLimitSlowStart(t *testing.T) {
	l, _ := rebound.NewAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{})
	var flying []rebound.Reservation
	for range 4 {
		r := l.Reserve(at(0))
		if r.Answer() != nil || r.Delay(at(0)) != 0 {
			t.Fatal("one of the first four attempts waits")
		}
		flying = append(flying, r)
	}
	w := l.Reserve(at(0))
	if w.Answer() == nil || w.Time() != at(0.25) {
		t.Fatalf("the fifth attempt: answer %v, time %v; want it to wait for an answer, until the slow start ends at %v", w.Answer(), w.Time(), at(0.25))
	}
	l.Observe(flying[0], at(0.001), rebound.RateFeedback{})
	select {
	case <-w.Answer():
	default:
		t.Fatal("an answer did not wake the attempt waiting for it")
	}
	l.Cancel(w, at(0.001))
	for i := range 2 {
		r := l.Reserve(at(0.001))
		if r.Answer() != nil {
			t.Fatalf("after one answer, attempt %d of 2 waits", i+1)
		}
		flying = append(flying, r)
	}
	var waiting []rebound.Reservation
	for range 14 {
		r := l.Reserve(at(0.001))
		if r.Answer() == nil {
			t.Fatal("a third attempt went after one answer")
		}
		waiting = append(waiting, r)
	}
	if l.Rate() != 0 {
		t.Fatalf("rate %v in the slow start, want 0 (no bucket)", l.Rate())
	}
	l.Observe(flying[1], at(0.002), rebound.RateFeedback{SlowDown: true, Wait: time.Second})
	select {
	case <-waiting[0].Answer():
	default:
		t.Fatal("the throttle that ended the slow start did not wake the attempts waiting")
	}
	// 6 sent and 14 waiting would have been 20 in the first second.
	if got := l.Rate(); !near(got, 14) {
		t.Fatalf("rate after the first throttle %v, want 0.7 × 20", got)
	}
	for _, r := range waiting {
		l.Cancel(r, at(0.002))
	}
	if r := l.Reserve(at(0.002)); r.Answer() != nil {
		t.Fatal("an attempt waits for an answer after the slow start ended")
	}
}

// TestAdaptiveRateLimitSlowStartEnds: the slow start ends a quarter-second
// after the first attempt even if no answer came (a stream answers when
// its messages end), and when the window has opened to 256.
func TestAdaptiveRateLimitSlowStartEnds(t *testing.T) {
	l, _ := rebound.NewAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{})
	for range 4 {
		l.Reserve(at(0))
	}
	if l.Reserve(at(0.249)).Answer() == nil {
		t.Fatal("a fifth attempt went before the quarter-second")
	}
	for range 100 {
		if l.Reserve(at(0.25)).Answer() != nil {
			t.Fatal("an attempt waits a quarter-second after the first")
		}
	}
	l, _ = rebound.NewAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{})
	for i := range 256 - 4 {
		r := l.Reserve(at(0))
		if r.Answer() != nil {
			t.Fatalf("attempt %d waits, sent one at a time", i)
		}
		l.Observe(r, at(0), rebound.RateFeedback{})
	}
	for range 300 {
		if l.Reserve(at(0.001)).Answer() != nil {
			t.Fatal("an attempt waits after the window reached 256")
		}
	}
}

// TestAdaptiveRateLimitConverges: a client that would send 40/s, paced by the
// limiter, against a server that accepts 20/s with a burst of 2, settles
// just under the server's limit: after the start, nearly every attempt
// is accepted and the accepted rate is close to 20/s.
func TestAdaptiveRateLimitConverges(t *testing.T) {
	l, _ := rebound.NewAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{})
	srv := struct{ tokens, last float64 }{tokens: 2}
	allow := func(s float64) bool {
		srv.tokens = math.Min(2, srv.tokens+(s-srv.last)*20)
		srv.last = s
		if srv.tokens >= 1 {
			srv.tokens--
			return true
		}
		return false
	}
	var sent, accepted int
	for s := 0.0; s < 20; s += 1.0 / 40 {
		r := l.Reserve(at(s))
		s = r.Time().Sub(rlT0).Seconds()
		ok := allow(s)
		l.Observe(r, at(s), rebound.RateFeedback{SlowDown: !ok, Wait: time.Second})
		if s >= 5 {
			sent++
			if ok {
				accepted++
			}
		}
	}
	t.Logf("after the start: %d of %d accepted", accepted, sent)
	if rate := float64(accepted) / 15; rate < 16 || float64(accepted)/float64(sent) < 0.95 {
		t.Fatalf("after the start: %d of %d accepted (%.1f/s), want at least 95%% and 16/s", accepted, sent, rate)
	}
}

// TestAdaptiveRateLimitHold: the server's explicit wait holds the rate at its
// cut value until it has passed; then the climb starts, reaching the old
// rate K seconds later.
func TestAdaptiveRateLimitHold(t *testing.T) {
	l, _ := rebound.NewAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{})
	feed(l, 0, 2, 10, false)
	r := l.Reserve(at(2))
	l.Observe(r, at(2), rebound.RateFeedback{SlowDown: true, Wait: 3 * time.Second})
	feed(l, 2, 4.95, 10, false)
	if got := l.Rate(); !near(got, 7) {
		t.Fatalf("rate %v within the server's wait, want it held at 7", got)
	}
	k := math.Cbrt(10 * 0.3 / 0.4)
	feed(l, 4.95, 5+k, 10, false)
	r = l.Reserve(at(5 + k))
	l.Observe(r, at(5+k), rebound.RateFeedback{})
	if got := l.Rate(); !near(got, 10) {
		t.Fatalf("rate %v K after the server's wait, want 10", got)
	}
}

// TestAdaptiveRateLimitReserveCancel: reservations are spaced at the rate; a
// cancelled one gives its token back, unless later ones counted on it.
func TestAdaptiveRateLimitReserveCancel(t *testing.T) {
	l, _ := rebound.NewAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{MinRate: 10})
	r := l.Reserve(at(0))
	l.Observe(r, at(0), rebound.RateFeedback{SlowDown: true}) // limits at the floor, 10/s
	now := at(0)
	var rs []rebound.Reservation
	for range 3 {
		rs = append(rs, l.Reserve(now))
	}
	for i, r := range rs {
		if want := time.Duration(i+1) * 100 * time.Millisecond; r.Delay(now) != want {
			t.Fatalf("reservation %d waits %v, want %v", i, r.Delay(now), want)
		}
	}
	l.Cancel(rs[2], now)
	if d := l.Reserve(now).Delay(now); d != 300*time.Millisecond {
		t.Fatalf("after cancelling the last, the next waits %v, want its 300ms", d)
	}
	l.Cancel(rs[0], now) // the later ones counted on its token
	if d := l.Reserve(now).Delay(now); d != 400*time.Millisecond {
		t.Fatalf("after cancelling one others counted on, the next waits %v, want 400ms", d)
	}
}

// TestAdaptiveRateLimitBounded: the limiter's state is a fixed set of numbers,
// whatever it sees: reserving and observing allocate nothing.
func TestAdaptiveRateLimitBounded(t *testing.T) {
	l, _ := rebound.NewAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{})
	s := 0.0
	allocs := testing.AllocsPerRun(10_000, func() {
		s += 0.001
		r := l.Reserve(at(s))
		l.Observe(r, at(s), rebound.RateFeedback{SlowDown: int(s*1000)%7 == 0, Wait: time.Second})
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per attempt, want 0", allocs)
	}
}

func TestErrRateLimited(t *testing.T) {
	if !errors.Is(rebound.ErrRateLimited, rebound.ErrRejectedLocally) || !errors.Is(rebound.ErrRateLimited, rebound.ErrThrottled) {
		t.Fatal("ErrRateLimited must be a local rejection, so that no strategy retries it")
	}
}

// TestAdaptiveRateLimitReady: an attempt whose wait ended after a cut takes a
// new turn at the new rate; of waits that end together (late timers), the
// first goes and each of the others keeps its turn and goes half a
// spacing after the one before, so that no turn is lost: the next
// reservation is where it would have been.
func TestAdaptiveRateLimitReady(t *testing.T) {
	l, _ := rebound.NewAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{MinRate: 10})
	r := l.Reserve(at(0))
	l.Observe(r, at(0), rebound.RateFeedback{SlowDown: true}) // 10/s
	a, b, c := l.Reserve(at(0)), l.Reserve(at(0)), l.Reserve(at(0))
	// All three timers fire 250ms late, together.
	woke := c.Time().Add(250 * time.Millisecond)
	for i, want := range []time.Duration{0, 50 * time.Millisecond, 100 * time.Millisecond} {
		got, ok := l.Ready([]rebound.Reservation{a, b, c}[i], woke)
		if !ok || got.Sub(woke) != want {
			t.Fatalf("wait %d of three that ended together: go %v after they ended (ready %v), want %v", i, got.Sub(woke), ok, want)
		}
	}
	if d := l.Reserve(at(0)); d.Time() != c.Time().Add(100*time.Millisecond) {
		t.Fatalf("the next turn is %v after the last, want 100ms: a turn was lost", d.Time().Sub(c.Time()))
	}
	e := l.Reserve(at(1))
	l.Observe(e, at(1), rebound.RateFeedback{SlowDown: true})
	f := l.Reserve(at(1))
	if _, ok := l.Ready(f, f.Time()); !ok {
		t.Fatal("after a cut, a new reservation was not ready")
	}
	if _, ok := l.Ready(e, at(1.5)); ok {
		t.Fatal("after a cut, a reservation from before it was ready")
	}
}

// TestAdaptiveRateLimitReserveBy: a turn that would come after the deadline is
// refused without a trace: the queue, the rounds of cuts and the measured
// rate are as if it had not been asked for. With Reserve and Cancel, two
// refusals that interleave lose a turn, and a tight loop of refusals on a
// busy machine ran the queue ahead of every deadline.
func TestAdaptiveRateLimitReserveBy(t *testing.T) {
	l, _ := rebound.NewAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{MinRate: 10})
	l.Observe(l.Reserve(at(0)), at(0), rebound.RateFeedback{SlowDown: true}) // 10/s
	first := l.Reserve(at(0))
	for range 100 {
		if r, ok := l.ReserveBy(at(0), at(0.05)); ok {
			t.Fatalf("a turn at %v reserved with a deadline 50ms away", r.Time().Sub(at(0)))
		}
	}
	if r, ok := l.ReserveBy(at(0), at(10)); !ok || r.Time() != first.Time().Add(100*time.Millisecond) {
		t.Fatalf("after 100 refusals the next turn is %v after the last one given (ok %v), want 100ms", r.Time().Sub(first.Time()), ok)
	}
	// The refusals were not attempts: a throttle of the next two sent
	// after a cut does not complete a round.
	c := l.Reserve(at(1))
	l.Observe(c, at(1), rebound.RateFeedback{SlowDown: true})
	cut := l.Rate()
	for range 10 {
		l.ReserveBy(at(1), at(1.01))
	}
	for i := range 2 {
		r := l.Reserve(at(1.1))
		l.Observe(r, at(1.1), rebound.RateFeedback{SlowDown: true})
		if l.Rate() != cut {
			t.Fatalf("a throttle of attempt %d after the cut changed the rate %v -> %v: the refusals counted as attempts", i+1, cut, l.Rate())
		}
	}
}

// TestAdaptiveRateLimitMeasureWhileRefusing: a success may bring the rate down
// to twice the rate measured, as in the AWS SDKs, when the client sends
// little; not while its callers are refused for want of turns, when a
// low measure is the client's own (answers late on a loaded machine,
// turns left unused by waits that ended past their deadlines).
func TestAdaptiveRateLimitMeasureWhileRefusing(t *testing.T) {
	for _, refusing := range []bool{false, true} {
		l, _ := rebound.NewAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{})
		feed(l, 0, 2, 10, false)
		r := l.Reserve(at(2))
		l.Observe(r, at(2), rebound.RateFeedback{SlowDown: true})
		cut := l.Rate() // about 7/s
		// Four seconds without an answer: when refusing, the callers hold
		// turns whose waits will end past their deadlines, and the next
		// is refused.
		if refusing {
			for range 3 {
				l.Reserve(at(5.5))
			}
			if _, ok := l.ReserveBy(at(5.5), at(5.501)); ok {
				t.Fatal("a turn within 1ms was given behind three")
			}
		}
		l.Observe(rebound.Reservation{}, at(6), rebound.RateFeedback{})
		switch got := l.Rate(); {
		case refusing && got < cut:
			t.Errorf("a success while callers were refused lowered the rate from %.1f to %.1f", cut, got)
		case !refusing && got >= cut:
			t.Errorf("a success after four quiet seconds left the rate at %.1f, want it lowered to twice the measure", got)
		}
	}
}

// BenchmarkAdaptiveRateLimit is the limiter's cost per attempt, Reserve and
// Observe, from parallel goroutines sharing one limiter: before any
// throttle, limiting at a rate no attempt has to wait for, and paced by a
// quota every answer publishes, one no attempt has to wait for either.
func BenchmarkAdaptiveRateLimit(b *testing.B) {
	for _, name := range []string{"open", "limiting", "quota"} {
		b.Run(name, func(b *testing.B) {
			l, _ := rebound.NewAdaptiveRateLimit(rebound.AdaptiveRateLimitConfig{MinRate: 1e12})
			var f rebound.RateFeedback
			switch name {
			case "limiting":
				l.Observe(l.Reserve(time.Now()), time.Now(), rebound.RateFeedback{SlowDown: true})
			case "quota":
				f.Quota = rebound.Quota{Remaining: 1e15, Limit: 1e15, Reset: time.Hour}
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					now := time.Now()
					r := l.Reserve(now)
					l.Observe(r, now, f)
				}
			})
		})
	}
}
