package rebound

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// AdaptiveThrottleConfig sets an [AdaptiveThrottle]. A zero field means
// its default, [DefaultAdaptiveThrottle]'s value, from the Google SRE
// book's chapter "Handling Overload": K 2 and a window of 2 minutes.
type AdaptiveThrottleConfig struct {
	// K is how many requests the client may send per request the server
	// accepts before it starts rejecting requests itself. 0 means 2; else
	// it must be a finite number >= 1. Lower rejects sooner and wastes
	// less of the server's effort on rejections, at the cost of some
	// requests rejected locally that the server would have served; the
	// book suggests 2, and 1.1 for a service that must be protected at
	// any price.
	K float64
	// Window is how far back requests and accepts count. 0 means 2
	// minutes; else it must be at least 1 second. The window moves in
	// steps of 1/60 of it.
	Window time.Duration
}

// DefaultAdaptiveThrottle returns the defaults of [AdaptiveThrottleConfig],
// the values its zero fields stand for: K 2 and a window of 2 minutes.
func DefaultAdaptiveThrottle() AdaptiveThrottleConfig {
	return AdaptiveThrottleConfig{K: 2, Window: 2 * time.Minute}
}

// adaptiveSlots is the number of steps the window moves in.
const adaptiveSlots = 60

// withDefaults returns c with zero fields set to their defaults, or an
// error naming the first invalid field.
func (c AdaptiveThrottleConfig) withDefaults() (AdaptiveThrottleConfig, error) {
	def := DefaultAdaptiveThrottle()
	if c.K == 0 {
		c.K = def.K
	}
	if c.Window == 0 {
		c.Window = def.Window
	}
	switch {
	case !(c.K >= 1) || math.IsInf(c.K, 0):
		return c, fmt.Errorf("rebound: AdaptiveThrottleConfig.K must be a finite number >= 1 (0 for 2), got %v", c.K)
	case c.Window < time.Second:
		return c, fmt.Errorf("rebound: AdaptiveThrottleConfig.Window must be >= 1s (0 for 2m), got %v", c.Window)
	}
	return c, nil
}

// Validate reports the first invalid field of c, or nil.
func (c AdaptiveThrottleConfig) Validate() error {
	_, err := c.withDefaults()
	return err
}

// AdaptiveThrottle is client-side adaptive throttling, as the Google SRE
// book's chapter "Handling Overload" describes it: the client counts, over
// a sliding window, the requests it meant to send (requests) and those the
// server accepted (accepts), and rejects each new request itself, without
// sending it, with probability
//
//	max(0, (requests − K × accepts) / (requests + 1))
//
// While the server accepts nearly everything, nothing is rejected. Once the
// window holds more than K requests per accept, requests are kept home:
// in a sustained overload the client settles at about K requests sent per
// request accepted, whatever the callers ask, so the server's load from
// refusals stays near (K − 1) times the work it does; in a long full
// outage almost nothing is sent. Unlike a retry budget, it needs no
// failures of its own to learn from: every request counts, so a client
// that sends one request a minute still sees its share of the outage in
// its window.
//
// It reacts at the pace of its window: an outage much shorter than the
// window barely moves it, and after a long one it keeps rejecting until
// new accepts outweigh the outage's requests. Once the server accepts
// again, the share of requests it sends grows about e^x-fold per window,
// where x = K·(1 − e^−x): 4.9-fold with K 2, 2.4-fold with 1.5, 1.2-fold
// with 1.1. After a full outage longer than the window, a client that
// sends N requests a second sends them all again after about
// Window·ln(N·Window)/x: with the defaults, 6 minutes at one request a
// second, 12 at a hundred. Timers play no part in it (the window moves
// with the clock's Now), so timers that fire late on a busy machine do
// not slow it.
//
// A request the throttle rejects still counts in requests, as the book
// says: that keeps the rejection probability up for as long as the server
// refuses, instead of letting every rejection raise the next request's
// chances. Each attempt of a retried or hedged call is one request. A
// request that another part of the client keeps home (the adaptive rate
// limit) is withdrawn (see [AdaptiveThrottle.Withdraw]): it is not the
// server's refusal.
//
// Time and randomness are arguments, so that tests and simulations drive
// it. An AdaptiveThrottle is safe for concurrent use. Use
// [NewAdaptiveThrottle]; the zero value is not usable.
type AdaptiveThrottle struct {
	k     float64
	width int64 // nanoseconds per slot

	mu                 sync.Mutex
	head               int64 // the newest slot, in slot numbers since the Unix epoch
	started            bool
	requests, accepts  [adaptiveSlots]int64
	sumReqs, sumAccept int64
}

// NewAdaptiveThrottle returns an AdaptiveThrottle that has seen nothing,
// or an error naming the bad field of c.
func NewAdaptiveThrottle(c AdaptiveThrottleConfig) (*AdaptiveThrottle, error) {
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	return &AdaptiveThrottle{k: c.K, width: int64(c.Window / adaptiveSlots)}, nil
}

// slot moves the window to now and returns the index of now's slot. A time
// before the newest slot counts in it: the window never moves back.
func (t *AdaptiveThrottle) slot(now time.Time) int {
	id := floorDiv(now.UnixNano(), t.width)
	switch {
	case !t.started:
		t.started, t.head = true, id
	case id <= t.head:
	case id-t.head >= adaptiveSlots:
		t.requests, t.accepts = [adaptiveSlots]int64{}, [adaptiveSlots]int64{}
		t.sumReqs, t.sumAccept = 0, 0
		t.head = id
	default:
		for t.head < id {
			t.head++
			i := ringIndex(t.head)
			t.sumReqs -= t.requests[i]
			t.sumAccept -= t.accepts[i]
			t.requests[i], t.accepts[i] = 0, 0
		}
	}
	return ringIndex(t.head)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

func ringIndex(id int64) int { return int(((id % adaptiveSlots) + adaptiveSlots) % adaptiveSlots) }

func (t *AdaptiveThrottle) probability() float64 {
	return max(0, (float64(t.sumReqs)-t.k*float64(t.sumAccept))/float64(t.sumReqs+1))
}

// Allow counts a request at now and reports whether to send it: it is
// rejected when u, a uniform random number in [0, 1), falls below the
// rejection probability. A request that is sent should be followed by
// [AdaptiveThrottle.Accepted] if the server accepts it.
func (t *AdaptiveThrottle) Allow(now time.Time, u float64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := t.slot(now)
	p := t.probability()
	t.requests[i]++
	t.sumReqs++
	return u >= p
}

// Withdraw takes back a request that [AdaptiveThrottle.Allow] counted at
// at and let go, but that never reached the server for a reason of the
// client's own: the adaptive rate limit kept it home (its turn would have
// come after its deadline, or its context ended while it waited). It
// counts neither as a request nor as a refusal: only the server's answers
// say whether it is overloaded. Withdraw each such request once; one
// counted before the window moves nothing.
func (t *AdaptiveThrottle) Withdraw(at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	id := floorDiv(at.UnixNano(), t.width)
	if id > t.head || id <= t.head-adaptiveSlots {
		return
	}
	if i := ringIndex(id); t.requests[i] > 0 {
		t.requests[i]--
		t.sumReqs--
	}
}

// Accepted counts a request the server accepted at now: it answered, with
// anything but a sign of overload. What that is belongs to the protocol:
// grpcretry and connectretry count every status but UNAVAILABLE,
// RESOURCE_EXHAUSTED and DEADLINE_EXCEEDED, httpretry every response but
// 429, 502, 503 and 504.
func (t *AdaptiveThrottle) Accepted(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := t.slot(now)
	t.accepts[i]++
	t.sumAccept++
}

// RejectProbability returns the probability that a request at now is
// rejected.
func (t *AdaptiveThrottle) RejectProbability(now time.Time) float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.slot(now)
	return t.probability()
}

// Counts returns the requests and accepts in the window at now.
func (t *AdaptiveThrottle) Counts(now time.Time) (requests, accepts int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.slot(now)
	return t.sumReqs, t.sumAccept
}
