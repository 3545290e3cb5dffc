package rebound

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// ErrRateLimited is the error of an attempt that an adaptive rate limit
// ([AdaptiveRateLimit]) did not send because its turn would come after the
// call's deadline. It wraps [ErrRejectedLocally]: the attempt never left,
// no strategy retries it, and the call ends at once, with [ErrThrottled]
// as its reason, rather than queue until it times out.
var ErrRateLimited = fmt.Errorf("rebound: waiting for the adaptive rate limit would pass the deadline: %w", ErrRejectedLocally)

// AdaptiveRateLimitConfig sets an [AdaptiveRateLimit]: an adaptive
// client-side limit on the rate of attempts sent to one server, which
// learns the server's limit from its answers. A zero field means its
// default, [DefaultAdaptiveRateLimit]'s value: the constants of the AWS
// SDKs' adaptive retry mode (botocore, aws-sdk-java-v2, aws-sdk-go-v2),
// which have years of use against rate-limited APIs behind them. Every
// field is either 0, for its default, or a finite positive number in its
// range; anything else is an error naming the field. What the limiter
// adds to the AWS SDKs' mode (a slow start before the first throttle, a
// round of at least three attempts between cuts, a bucket of a tenth of a
// second: see [AdaptiveRateLimit], which says why) has fixed constants,
// not settings: each was measured against the AWS SDKs' mode with these
// defaults.
type AdaptiveRateLimitConfig struct {
	// Beta is the factor the rate is cut by on a throttling answer, as in
	// CUBIC. 0 means 0.7; else it must be in (0, 1). Lower gives room to
	// other clients sooner, at the cost of a deeper dip after each
	// throttle.
	Beta float64
	// ScaleConstant is CUBIC's C, in requests/s per s³: how fast the rate
	// climbs back after a cut. 0 means 0.4; else it must be positive.
	ScaleConstant float64
	// Smoothing is the weight of the newest half-second in the measured
	// rate (an exponentially weighted moving average). 0 means 0.8; else
	// it must be in (0, 1].
	Smoothing float64
	// MinRate is the floor of the rate, in requests per second, so that
	// a client always probes the server again. 0 means 0.5; else it must
	// be positive.
	MinRate float64
}

// DefaultAdaptiveRateLimit returns the defaults of
// [AdaptiveRateLimitConfig], the values its zero fields stand for: the AWS
// SDKs' constants, Beta 0.7, ScaleConstant 0.4, Smoothing 0.8 and MinRate
// 0.5.
func DefaultAdaptiveRateLimit() AdaptiveRateLimitConfig {
	return AdaptiveRateLimitConfig{Beta: 0.7, ScaleConstant: 0.4, Smoothing: 0.8, MinRate: 0.5}
}

// withDefaults returns c with zero fields set to their defaults, or an
// error naming the first invalid field.
func (c AdaptiveRateLimitConfig) withDefaults() (AdaptiveRateLimitConfig, error) {
	def := DefaultAdaptiveRateLimit()
	fields := []struct {
		name      string
		v         *float64
		def       float64
		atMostOne bool // the field is a fraction: at most 1
		belowOne  bool // strictly below 1
	}{
		{"Beta", &c.Beta, def.Beta, false, true},
		{"ScaleConstant", &c.ScaleConstant, def.ScaleConstant, false, false},
		{"Smoothing", &c.Smoothing, def.Smoothing, true, false},
		{"MinRate", &c.MinRate, def.MinRate, false, false},
	}
	for _, f := range fields {
		v := *f.v
		switch {
		case v == 0:
			*f.v = f.def
			continue
		case math.IsNaN(v) || math.IsInf(v, 0) || v < 0:
			return c, fmt.Errorf("rebound: AdaptiveRateLimitConfig.%s must be a finite positive number (0 for %v), got %v", f.name, f.def, v)
		case f.belowOne && v >= 1:
			return c, fmt.Errorf("rebound: AdaptiveRateLimitConfig.%s must be below 1 (0 for %v), got %v", f.name, f.def, v)
		case f.atMostOne && v > 1:
			return c, fmt.Errorf("rebound: AdaptiveRateLimitConfig.%s must be at most 1 (0 for %v), got %v", f.name, f.def, v)
		}
	}
	return c, nil
}

// Validate reports the first invalid field of c, or nil.
func (c AdaptiveRateLimitConfig) Validate() error {
	_, err := c.withDefaults()
	return err
}

// RateFeedback is what one answer says about the server's limit.
type RateFeedback struct {
	// SlowDown says the server refused the attempt because the client
	// sends too fast: HTTP 429, 503 with Retry-After, gRPC and Connect
	// RESOURCE_EXHAUSTED, any answer with pushback ([RetryInfo.SlowDown]).
	SlowDown bool
	// Wait is the server's explicit wait (Retry-After, pushback,
	// google.rpc.RetryInfo), 0 for none.
	Wait time.Duration
	// Quota is the quota the server published with the answer, the
	// zero Quota for none.
	Quota Quota
}

// Reservation is a send token taken from an [AdaptiveRateLimit]: the attempt
// may go at Time, or, during the limiter's slow start, once Answer is
// closed. Its zero value is a token of a limiter that was not limiting.
type Reservation struct {
	at     time.Time
	cut    int64 // the limiter's cut count when it was taken
	seq    int64 // the limiter's attempts sent, this one included
	paid   bool  // it took a token from the bucket
	slot   bool  // it took a slow-start slot
	answer chan struct{}
}

// Time returns when the attempt may go. For a reservation that waits for
// an answer (see Answer) it is when the slow start ends at the latest.
func (r Reservation) Time() time.Time { return r.at }

// Answer returns nil, or, when the attempt may not go yet because the
// limiter's slow start has as many attempts in flight as it allows, a
// channel closed at the next answer to one of them (or when the slow
// start ends). The attempt then waits for the channel or for Time,
// whichever comes first, gives the reservation back with
// [AdaptiveRateLimit.Cancel], and reserves again.
func (r Reservation) Answer() <-chan struct{} { return r.answer }

// Delay returns how long from now the attempt must wait, 0 if none.
func (r Reservation) Delay(now time.Time) time.Duration { return max(0, r.at.Sub(now)) }

// AdaptiveRateLimit is an adaptive client-side rate limit on the attempts sent
// to one server. It does what the AWS SDKs' adaptive retry mode does: it
// limits nothing until the first throttling answer, then sends through a
// token bucket whose rate follows CUBIC (a cut to Beta times the rate at
// a throttle, then a climb back along a cubic curve that levels off at
// that rate and then probes above it). It does better in these ways, each
// from what the server says:
//
//   - Until the first throttle it is in slow start, as TCP is: at most
//     four attempts are in flight until answers come back, and each
//     answer that is not a throttle lets one more go besides its own
//     place, so the window doubles every round trip. Callers that start
//     together (a process starting, a queue draining) meet a server that
//     allows a burst of two with four attempts, not all of them: in
//     issue 24's benchmark 2 are refused where the AWS SDKs' mode sends
//     20 and has 18 refused. The first throttle ends the slow start and
//     sets the rate to Beta times what the client would have sent over
//     the first second, the attempts waiting included: the few answered
//     in the first milliseconds tell the server's burst, not its rate.
//     The slow start also ends when the window reaches 256 or a
//     quarter-second after the first attempt, whichever comes first: a
//     server that is not limited costs a few round trips once (an
//     attempt waits within its context, and a deadline does not fail it
//     at once: an answer usually comes within a round trip), and never
//     more than that quarter-second, even if answers do not come (a
//     stream answers when its messages end).
//   - It cuts once per round: a throttle of an attempt sent before the
//     last cut tells nothing new and is ignored, where the AWS SDKs cut
//     again for every one of a burst of throttles and fall to the
//     minimum rate. A round is also at least three attempts: a throttle
//     of one of the first two sent after a cut holds the rate (it does
//     not climb) but does not cut again. When clients share a limit, the
//     server refuses whoever arrives while its bucket is empty, and a
//     client is refused about as often whatever it sends (in `rebound
//     sim -ratelimited`, 63-75 refusals each over two and a half minutes
//     for 191-412 attempts); a cut for every one of a run of refusals
//     drove a client with a run of bad luck down to the minimum while the
//     others took its share. Three attempts per round keeps each client's
//     cuts at most in proportion to its own rate, as TCP's one cut per
//     window does, which is what lets cuts by a factor even the shares
//     out: ten processes sharing a limit keep 0.66-0.99 of a fair share
//     on average over eight seeds (0.62 the least in any), Jain's index
//     0.985, against 0.55-1.03 (0.43) and 0.963 with a cut for every
//     refusal and the hold below (the AWS SDKs' mode 0.63-0.98 (0.56) and
//     0.982), for 1.35 requests per call where a cut for every refusal
//     sent 1.28 (the AWS SDKs' mode 1.32): the fairer share costs a
//     little more load.
//   - A server's explicit wait (Retry-After, pushback, RetryInfo) holds
//     the rate until the wait has passed: it does not probe a server
//     that said it is not ready. The wait of the throttle that cuts holds
//     the rate at its cut value, and the climb starts from there, so that
//     it reaches the old rate that much later, which is fewer throttles
//     per second. The wait of a throttle that does not cut only keeps
//     the rate from rising above where it is: holding it at the cut
//     value for every refusal kept a client with a run of refusals at
//     its lowest while the others climbed (ten processes sharing a limit
//     kept 0.64-0.98 of a fair share on average over eight seeds that
//     way, against 0.66-0.99; the AWS SDKs' mode has no hold).
//
// A cut starts from the rate the client was sending, never from the rate
// the server accepted of it: when clients share a limit, what the server
// accepts of one is the share it happens to have, and cutting to it would
// cut deepest the client that has the least (in `rebound sim
// -ratelimited`, ten processes kept 0.47-1.14 of a fair share on average
// over eight seeds that way, against 0.55-1.03 without).
//
// The bucket holds at most a tenth of a second of tokens (at least one),
// where the AWS SDKs hold a second: a rate-limited server usually allows
// only a small burst, and a second's worth sent at once after a pause
// would be refused.
//
// Once the server stops refusing, the rate is back at the rate W it was
// cut from K = ∛(W·(1−Beta)/ScaleConstant) seconds after the last cut (or
// after the server's explicit wait, if that ends later), and from there
// it climbs by ScaleConstant·t³. With the defaults, K is 2.5s from 20/s
// and 5.3s from 200/s; the rate is 10/s above W 2.9s after that, 100/s
// above it 6.3s after; from the floor of 0.5/s it is at 20/s about 4.4s
// after the cut. The climb goes no higher than twice the rate the client
// is measured to send (and a success may bring the rate down to that, as
// in the AWS SDKs), so this holds while the callers ask for more than the
// rate. It holds on a busy machine too: a wait whose timer fires late
// keeps its turn (see [AdaptiveRateLimit.Ready]), an attempt refused for its
// deadline takes none (see [AdaptiveRateLimit.ReserveBy]), and while callers
// are refused for want of turns a success never lowers the rate, whatever
// the measure (answers come in late on a loaded machine, and a wait that
// ends past its deadline leaves its turn unused). Before, a client under
// -race on a loaded machine fell to a request or two a second after the
// server had stopped refusing: its refusals, its late timers and its
// late answers cost it turns and measure, and each success then lowered
// the rate.
//
// A server that publishes its quota (the remainder of its window and the
// time to its reset, [RateFeedback.Quota]) sets a ceiling on the rate
// from the first answer, before any refusal: the remainder over the time
// to the reset at first; then a share of the quota's even pace (the
// window's quota over its length, both learned from the answers). Every
// process that shares the quota reads the same falling remainder, so
// every one sees at once how far it runs ahead of an even pace through
// the window: each cuts its share in proportion to that lead, together,
// and otherwise lifts it by the same small step, as TCP's AIMD does, so
// that processes that never talk converge on even shares, a late one
// too. Sends spread through the window at that pace: no burst at the
// reset. A turn waits for the reset when the remainder, as it will be at
// that turn, is spent; the turns after it follow at the rate, not at the
// reset all at once. The learned rate still applies below the ceiling (a
// refusal cuts it as ever), and it is in charge alone again once a window
// has passed its reset by its own length with no quota since. No quota
// keeps a turn waiting longer than its MaxWait (the caller's Retry-After
// cap). In `rebound sim -ratelimited`, ten processes sharing a published
// limit of 20/s complete every call at 1.00 requests per call, Jain's
// index 0.9998, where they complete 97.5% at 1.35 learning from refusals.

// Time is an argument, so that tests and simulations drive it; waiting is
// the caller's (the clients of grpcretry, connectretry and httpretry wait
// within the call's context, never holding a lock). An AdaptiveRateLimit
// is safe for concurrent use. Use [NewAdaptiveRateLimit]; the zero value
// is not usable.
type AdaptiveRateLimit struct {
	c AdaptiveRateLimitConfig

	mu      sync.Mutex
	enabled bool // a throttle has been seen: the bucket limits

	// Slow start, before the first throttle.
	slowEnd  bool          // it has ended (or the bucket limits)
	inFlight int64         // attempts sent in it, not yet answered
	window   int64         // how many may be in flight
	waiting  int64         // attempts waiting for an answer to go
	wanted   int64         // the most of seq+waiting so far
	answer   chan struct{} // closed at the next answer; nil if no one waits

	// The token bucket.
	rate    float64   // tokens per second
	learned float64   // the rate the server's answers set: rate, but for the quota
	tokens  float64   // may be negative: reserved ahead
	last    time.Time // when tokens was last brought up to date
	latest  time.Time // the latest reservation's time
	lastGo  time.Time // when the last waiting attempt went

	// Until a half-second has been measured: the attempts sent, from
	// firstSent.
	sent      int64
	firstSent time.Time

	// The measured rate, per half-second bucket, smoothed.
	first    time.Time // the first answer
	bucket   float64   // start of the current half-second, in seconds
	count    int64     // answers in it
	txRate   float64   // smoothed answers per second
	measured bool      // a bucket has closed

	// CUBIC.
	wMax     float64   // the rate at the last cut
	k        float64   // seconds from the cut to when the curve reaches wMax
	cutAt    time.Time // the last cut
	cuts     int64     // cuts so far
	cutSeq   int64     // attempts sent before the last cut
	seq      int64     // attempts sent
	open     uint64    // bit i: the attempt seq-i is neither answered nor given back
	holdTill time.Time // the server's explicit wait: no climb before
	refused  time.Time // the last attempt refused for its deadline

	quota quotaState // the quota the server publishes
}

// The slow start: the attempts in flight at first, the window at which
// it ends, how long it lasts at most after the first attempt, and the
// attempts a round of cuts lasts at least.
const (
	slowStartWindow = 4
	slowStartMax    = 256
	slowStartTime   = time.Second / 4
	roundAttempts   = 3
)

// NewAdaptiveRateLimit returns an AdaptiveRateLimit that has seen nothing
// and does not limit yet, or an error naming the bad field of c.
func NewAdaptiveRateLimit(c AdaptiveRateLimitConfig) (*AdaptiveRateLimit, error) {
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	return &AdaptiveRateLimit{c: c, window: slowStartWindow}, nil
}

// Reserve takes a send token at now. The attempt may go at the returned
// reservation's Time, or, if its Answer is not nil, must wait for that
// first (see [Reservation.Answer]); one that will not wait that long
// gives the token back with [AdaptiveRateLimit.Cancel]. Before the first
// throttle, once the slow start has ended, every reservation is for now.
func (l *AdaptiveRateLimit) Reserve(now time.Time) Reservation {
	r, _ := l.ReserveBy(now, time.Time{})
	return r
}

// ReserveBy is Reserve for an attempt that must go by deadline (the zero
// time for none). When its turn would come after deadline it takes nothing
// and reports false: the attempt is refused locally, and the refusal
// leaves no trace in the limiter's queue or rounds, however many callers
// are refused at once; the limiter only notes that callers ask for more
// than its rate (see [AdaptiveRateLimit]). (A token taken and given back with
// Cancel is not the same: when another caller reserved in between, the
// first token cannot be given back, and on a busy machine, where callers
// are refused in a tight loop, each of those left a turn in the queue that
// no attempt used, until the queue ran ahead of every deadline and nothing
// was sent at all.) A reservation of the slow start (see
// [Reservation.Answer]) is not refused: its wait has no known end but the
// slow start's, and an answer usually comes within a round trip.
func (l *AdaptiveRateLimit) ReserveBy(now, deadline time.Time) (Reservation, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.enabled && !l.slowEnd {
		if l.sent == 0 {
			l.firstSent = now
		}
		if l.window >= slowStartMax || now.Sub(l.firstSent) >= slowStartTime {
			l.endSlowStart()
		} else if l.inFlight >= l.window {
			if l.answer == nil {
				l.answer = make(chan struct{})
			}
			l.waiting++
			l.wanted = max(l.wanted, l.seq+l.waiting)
			return Reservation{at: l.firstSent.Add(slowStartTime), cut: l.cuts, answer: l.answer}, true
		}
	}
	if !l.enabled {
		l.took(now)
		if !l.slowEnd {
			l.inFlight++
			l.wanted = max(l.wanted, l.seq+l.waiting)
			return Reservation{at: now, cut: l.cuts, seq: l.seq, slot: true}, true
		}
		return Reservation{at: now, cut: l.cuts, seq: l.seq}, true
	}
	if l.quota.on {
		l.setRate(now, l.learned)
	}
	l.refill(now)
	tokens := l.tokens - 1
	at := now
	if tokens < 0 {
		at = now.Add(seconds(-tokens / l.rate))
		// After the rate rose, the debt is worth less time than the
		// reservations already given out: the new one goes after the
		// last of them, not among them as a burst.
		if next := l.latest.Add(seconds(1 / l.rate)); l.latest.After(now) && at.Before(next) {
			at = next
			tokens = -next.Sub(now).Seconds() * l.rate
		}
	}
	if l.quota.on {
		if q := l.quotaTurn(now, at); !q.Equal(at) {
			at = q
			tokens = -at.Sub(now).Seconds() * l.rate
		}
	}
	if !deadline.IsZero() && at.After(deadline) {
		l.refused = now
		return Reservation{at: at}, false
	}
	l.took(now)
	l.tokens = tokens
	if at.After(l.latest) {
		l.latest = at
	}
	return Reservation{at: at, cut: l.cuts, seq: l.seq, paid: true}, true
}

// took counts an attempt reserved at now: it will be sent.
func (l *AdaptiveRateLimit) took(now time.Time) {
	if !l.measured {
		if l.sent == 0 {
			l.firstSent = now
		}
		l.sent++
	}
	l.seq++
	l.open = l.open<<1 | 1
}

// settled notes that the attempt seq was answered, or will not go.
func (l *AdaptiveRateLimit) settled(seq int64) {
	if d := l.seq - seq; seq > 0 && d >= 0 && d < 64 {
		l.open &^= 1 << d
	}
}

// endSlowStart ends the slow start and lets every attempt waiting in it
// reserve again.
func (l *AdaptiveRateLimit) endSlowStart() {
	l.slowEnd = true
	l.wake()
}

// wake lets the attempts waiting for an answer in the slow start reserve
// again.
func (l *AdaptiveRateLimit) wake() {
	if l.answer != nil {
		close(l.answer)
		l.answer = nil
	}
}

// answered frees the slow-start slot of r, if it took one.
func (l *AdaptiveRateLimit) answered(r Reservation) {
	if r.slot && l.inFlight > 0 {
		l.inFlight--
		l.wake()
	}
}

// Cancel gives back the token of r, which was not used, at now. Tokens
// that later reservations have counted on are not given back (as in
// golang.org/x/time/rate): they would go earlier than promised.
func (l *AdaptiveRateLimit) Cancel(r Reservation, now time.Time) {
	if !r.paid && !r.slot && r.answer == nil && r.seq == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.answer != nil {
		l.waiting = max(l.waiting-1, 0)
		return
	}
	l.settled(r.seq)
	l.answered(r)
	if !r.paid || !l.enabled || !r.at.After(now) {
		return
	}
	l.refill(now)
	back := 1 - l.rate*l.latest.Sub(r.at).Seconds()
	if back <= 0 {
		return
	}
	l.tokens += back
	if r.at.Equal(l.latest) {
		l.latest = l.latest.Add(-seconds(back / l.rate))
	}
	l.tokens = min(l.tokens, l.capacity())
}

// Observe tells the limiter the answer at now to the attempt sent with r.
// It returns an error that wraps [ErrQuota] when it ignored f's quota.
func (l *AdaptiveRateLimit) Observe(r Reservation, now time.Time, f RateFeedback) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.measure(now)
	l.settled(r.seq)
	l.answered(r)
	err := l.publish(f.Quota, r.seq, now)
	l.observe(r, now, f)
	l.applyQuota(now)
	return err
}

// observe is Observe's rate rules, but for the quota.
func (l *AdaptiveRateLimit) observe(r Reservation, now time.Time, f RateFeedback) {
	if f.SlowDown && f.Wait > 0 {
		if till := now.Add(f.Wait); till.After(l.holdTill) {
			l.holdTill = till
		}
	}
	var next float64
	switch {
	case f.SlowDown && !l.enabled && !l.slowEnd:
		// The first cut, from the slow start's reference (see cut): the
		// attempts answered so far are too few to cap it.
		l.setRate(now, l.cut(now, f.Wait))
		return
	case f.SlowDown && (!l.enabled || r.cut == l.cuts && r.seq-l.cutSeq >= roundAttempts):
		next = l.cut(now, f.Wait)
	case f.SlowDown && r.cut == l.cuts:
		// Within the round: the rate holds (the server's wait, above,
		// holds it longer).
		return
	case !l.enabled:
		if r.slot && !l.slowEnd {
			if l.window++; l.window >= slowStartMax {
				l.endSlowStart()
			}
		}
		return
	default:
		// The climb goes no higher than twice the rate measured, so that
		// a client that sends little does not earn a rate it never
		// tried, and a success may bring the rate down to that. Not
		// while callers are refused for want of turns, though: the
		// client then asks for more than the rate, and a measure below
		// it is its own doing (on a loaded machine its answers come in
		// late, and a wait that ends past its deadline leaves its turn
		// unused), not the server's word. Lowering the rate on it
		// spiralled a client under -race on a loaded machine down to a
		// request or two a second after the server had stopped refusing.
		limit := 2 * l.sendRate(now)
		if l.quota.on {
			// The quota paces the client: what it sends is the quota's
			// doing, not the server's word.
			limit = math.Inf(1)
		}
		if !l.refused.IsZero() && now.Sub(l.refused) < time.Second {
			limit = max(limit, l.learned)
		}
		l.setRate(now, min(l.climb(now), limit))
		return
	}
	l.setRate(now, min(next, 2*l.sendRate(now)))
}

// cut starts a new CUBIC round at now and returns the rate to use. The
// climb starts once the server's wait has passed.
func (l *AdaptiveRateLimit) cut(now time.Time, wait time.Duration) float64 {
	ref := l.sendRate(now)
	if !l.enabled && !l.slowEnd {
		// The slow start kept the attempts waiting from going: what the
		// client would have sent is the reference, as if it had sent
		// them (a handful sent in the first milliseconds tell nothing
		// of the server's rate, only of its burst). The most it wanted
		// at once, because a waiting attempt that an answer woke is
		// not counted again until it has reserved again.
		ref = float64(max(l.wanted, l.seq+l.waiting)) / max(now.Sub(l.firstSent).Seconds(), 1)
	}
	if l.enabled {
		l.refill(now)
		if l.tokens < 1 {
			// Attempts wait for tokens: the client sends at the
			// bucket's rate, which the smoothed measure lags.
			ref = l.rate
		} else {
			ref = min(ref, l.rate)
		}
	}
	l.wMax = ref
	l.k = math.Cbrt(ref * (1 - l.c.Beta) / l.c.ScaleConstant)
	l.cutAt = now.Add(max(wait, 0))
	l.cuts++
	l.cutSeq = l.seq
	if !l.enabled {
		l.enabled, l.last, l.latest = true, now, now
		l.endSlowStart()
	}
	// The attempts waiting were given times at the old rate; they take
	// new ones (see Current), so their debt is forgiven.
	l.tokens, l.latest = max(l.tokens, 0), now
	return ref * l.c.Beta
}

// Ready reports whether the attempt that waited for r may go, and when:
// at now, or, when another waiting attempt went less than half a
// reservation's spacing before, once that half has passed. Timers end
// late on a busy machine, and several at once: the attempts whose waits
// ended together go half a spacing apart rather than reach the server as
// a burst, and each keeps its turn (an attempt that took a new one
// instead gave up the turn it had waited for, and one such loss for
// every late timer left a client on a loaded machine sending a fraction
// of its rate, its callers refused for want of turns). It may not go when
// a cut came after r was taken: r's time was set at the old rate, and the
// attempt takes a new reservation, so that a cut applies at once to the
// attempts already waiting rather than after they have gone at the old
// rate.
func (l *AdaptiveRateLimit) Ready(r Reservation, now time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !r.paid {
		return now, true
	}
	if r.cut != l.cuts {
		l.settled(r.seq) // the attempt takes a new turn instead
		return time.Time{}, false
	}
	at := now
	if next := l.lastGo.Add(seconds(0.5 / l.rate)); at.Before(next) {
		at = next
	}
	l.lastGo = at
	return at, true
}

// climb returns CUBIC's rate at now, no higher than the rate is while a
// server's explicit wait lasts (a cut set it to the cut value).
func (l *AdaptiveRateLimit) climb(now time.Time) float64 {
	t := max(now.Sub(l.cutAt).Seconds(), 0)
	r := l.c.ScaleConstant*math.Pow(t-l.k, 3) + l.wMax
	if now.Before(l.holdTill) {
		r = min(r, l.learned)
	}
	return r
}

// sendRate returns the measured rate of answers, smoothed, once a
// half-second has closed. Before, it is the attempts sent so far over at
// least a second: a burst's throttles can come back before any of its
// successes, and the answers alone would then say the client sent one.
func (l *AdaptiveRateLimit) sendRate(now time.Time) float64 {
	if l.measured {
		return l.txRate
	}
	return float64(max(l.sent, l.count)) / max(now.Sub(l.firstSent).Seconds(), 1)
}

// measure counts an answer at now in the measured rate.
func (l *AdaptiveRateLimit) measure(now time.Time) {
	if l.first.IsZero() {
		l.first = now
		l.bucket = halfSecond(now)
	}
	if b := halfSecond(now); b > l.bucket {
		span := b - l.bucket
		s := l.c.Smoothing
		if !l.measured {
			// The first half-second's rate stands alone: there is no
			// history to weigh it against.
			s = 1
		}
		l.txRate = float64(l.count)/span*s + l.txRate*(1-s)
		l.count, l.bucket, l.measured = 0, b, true
	}
	l.count++
}

func halfSecond(t time.Time) float64 {
	return math.Floor(float64(t.UnixNano())/float64(time.Second)*2) / 2
}

// setRate brings the bucket to now and changes its rate.
func (l *AdaptiveRateLimit) setRate(now time.Time, r float64) {
	l.refill(now)
	l.learned = max(r, l.c.MinRate)
	l.rate = l.learned
	if c, ok := l.quotaCeiling(now); ok {
		// The quota's rate is a ceiling, below the floor too; but it
		// never keeps sends further apart than its MaxWait.
		l.rate = max(min(l.rate, c), 1/l.quota.maxWait.Seconds())
	}
	l.tokens = min(l.tokens, l.capacity())
}

// capacity is the most tokens the bucket holds: a tenth of a second's, at
// least one.
func (l *AdaptiveRateLimit) capacity() float64 { return max(1, l.rate/10) }

func (l *AdaptiveRateLimit) refill(now time.Time) {
	if now.After(l.last) {
		l.tokens = min(l.tokens+l.rate*now.Sub(l.last).Seconds(), l.capacity())
		l.last = now
	}
}

// Rate returns the limiter's rate in requests per second, 0 while it does
// not limit (before the first throttle).
func (l *AdaptiveRateLimit) Rate() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.enabled {
		return 0
	}
	return l.rate
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
