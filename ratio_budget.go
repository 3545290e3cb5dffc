package rebound

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// CallBudget is a [Budget] that also counts the calls made, not only their
// failures and retries: [RatioBudget] allows retries in proportion to the
// calls, [ConcurrencyBudget] in proportion to the calls in flight. The
// retry loops ([Do], [DoValue], [Hedge], and grpcretry, connectretry and
// httpretry, streams included) call StartCall before a call's first
// attempt and EndCall once it has ended, and EndRetry when a retry or
// hedge that Allow admitted has ended. A failure marked Local (see
// [RetryInfo]) takes no retry from the budget, so its retry is not
// counted either. Implementations must be safe for concurrent use.
type CallBudget interface {
	Budget
	// StartCall notes a call about to make its first attempt.
	StartCall()
	// EndRetry notes that a retry or hedge Allow admitted has ended.
	EndRetry()
	// EndCall notes that a call has ended, with or without success.
	EndCall()
}

// RatioBudgetConfig sets a [RatioBudget]. The zero value is not valid;
// start from [DefaultRatioBudget].
type RatioBudgetConfig struct {
	// Ratio is how many retries are allowed per call, over TTL: 0.2 lets
	// retries add at most 20% to the load the calls make. Must be in
	// [0, 1000].
	Ratio float64
	// MinRetriesPerSecond is a floor of retries allowed whatever the
	// traffic, so that a client with few calls can still retry. Must be
	// >= 0.
	MinRetriesPerSecond float64
	// TTL is how long a call and a retry count. Must be in [1s, 1h].
	TTL time.Duration
	// Clock tells the time; nil means the real clock.
	Clock Clock
}

// DefaultRatioBudget returns the defaults of Finagle and Linkerd: retries
// may add 20% to the calls of the last 10 seconds, plus 10 a second.
func DefaultRatioBudget() RatioBudgetConfig {
	return RatioBudgetConfig{Ratio: 0.2, MinRetriesPerSecond: 10, TTL: 10 * time.Second}
}

// ratioSlots is the number of steps the TTL window moves in.
const ratioSlots = 60

// RatioBudget is the retry budget of Finagle and Linkerd: over the last
// TTL, retries (and hedges) may number at most
//
//	Ratio × calls + MinRetriesPerSecond × TTL
//
// Unlike the A6 [Throttle] it does not wait for failures to close: during
// an outage, retries stay a fixed fraction of the load instead of a burst
// until the throttle empties; unlike the [TokenBucket] its limit follows
// the traffic, so one setting suits a busy client and a quiet one. The
// window moves in steps of TTL/60.
//
// A RatioBudget is a [CallBudget]: the retry loops tell it of each call.
// It is safe for concurrent use. Use [NewRatioBudget]; the zero value is
// not usable.
type RatioBudget struct {
	ratio, reserve float64 // reserve = MinRetriesPerSecond × TTL
	width          int64   // nanoseconds per slot
	clock          Clock

	mu             sync.Mutex
	head           int64 // the newest slot, in slot numbers since the Unix epoch
	started        bool
	calls, retries [ratioSlots]int64
	sumCalls       int64
	sumRetries     int64
}

// NewRatioBudget returns a RatioBudget that has seen nothing, or an error
// naming the bad field of c.
func NewRatioBudget(c RatioBudgetConfig) (*RatioBudget, error) {
	switch {
	case !(c.Ratio >= 0 && c.Ratio <= 1000):
		return nil, fmt.Errorf("rebound: RatioBudgetConfig.Ratio must be in [0, 1000], got %v", c.Ratio)
	case !(c.MinRetriesPerSecond >= 0) || math.IsInf(c.MinRetriesPerSecond, 0):
		return nil, fmt.Errorf("rebound: RatioBudgetConfig.MinRetriesPerSecond must be a finite number >= 0, got %v", c.MinRetriesPerSecond)
	case c.TTL < time.Second || c.TTL > time.Hour:
		return nil, fmt.Errorf("rebound: RatioBudgetConfig.TTL must be in [1s, 1h], got %v", c.TTL)
	}
	if c.Clock == nil {
		c.Clock = realClock{}
	}
	return &RatioBudget{
		ratio: c.Ratio, reserve: c.MinRetriesPerSecond * c.TTL.Seconds(),
		width: int64(c.TTL / ratioSlots), clock: c.Clock,
	}, nil
}

// slot moves the window to now and returns the index of now's slot; a
// time before the newest slot counts in it. Call with mu held.
func (b *RatioBudget) slot(now time.Time) int {
	id := floorDiv(now.UnixNano(), b.width)
	switch {
	case !b.started:
		b.started, b.head = true, id
	case id <= b.head:
	case id-b.head >= ratioSlots:
		b.calls, b.retries = [ratioSlots]int64{}, [ratioSlots]int64{}
		b.sumCalls, b.sumRetries, b.head = 0, 0, id
	default:
		for b.head < id {
			b.head++
			i := int(((b.head % ratioSlots) + ratioSlots) % ratioSlots)
			b.sumCalls -= b.calls[i]
			b.sumRetries -= b.retries[i]
			b.calls[i], b.retries[i] = 0, 0
		}
	}
	return int(((b.head % ratioSlots) + ratioSlots) % ratioSlots)
}

// StartCall counts a call.
func (b *RatioBudget) StartCall() {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := b.slot(b.clock.Now())
	b.calls[i]++
	b.sumCalls++
}

// Allow counts a retry and reports true when the retries in the window,
// this one included, stay within Ratio × calls + MinRetriesPerSecond ×
// TTL. A refused retry is not counted.
func (b *RatioBudget) Allow(timeout bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := b.slot(b.clock.Now())
	if float64(b.sumRetries+1) > b.ratio*float64(b.sumCalls)+b.reserve {
		return false
	}
	b.retries[i]++
	b.sumRetries++
	return true
}

// unallow takes back the retry Allow counted last.
func (b *RatioBudget) unallow(bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := b.slot(b.clock.Now())
	if b.retries[i] > 0 {
		b.retries[i]--
		b.sumRetries--
	}
}

// Counts returns the calls and retries in the window now.
func (b *RatioBudget) Counts() (calls, retries int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.slot(b.clock.Now())
	return b.sumCalls, b.sumRetries
}

// RecordFailure does nothing: the budget counts calls and retries.
func (b *RatioBudget) RecordFailure() {}

// RecordSuccess does nothing.
func (b *RatioBudget) RecordSuccess() {}

// EndRetry does nothing: a retry counts for TTL.
func (b *RatioBudget) EndRetry() {}

// EndCall does nothing: a call counts for TTL.
func (b *RatioBudget) EndCall() {}

// ConcurrencyBudgetConfig sets a [ConcurrencyBudget]. The zero value
// allows no retry at all; start from [DefaultConcurrencyBudget].
type ConcurrencyBudgetConfig struct {
	// Percent of the calls in flight that may be retrying at once. Must
	// be in [0, 100000].
	Percent float64
	// MinConcurrency is how many retries may be in flight whatever the
	// calls. Must be >= 0.
	MinConcurrency int
}

// DefaultConcurrencyBudget returns Envoy's retry budget defaults: 20% of
// the active requests, and at least 3.
func DefaultConcurrencyBudget() ConcurrencyBudgetConfig {
	return ConcurrencyBudgetConfig{Percent: 20, MinConcurrency: 3}
}

// ConcurrencyBudget is Envoy's retry budget: a retry or hedge is allowed
// while the retries in flight number fewer than
//
//	max(MinConcurrency, Percent/100 × calls in flight)
//
// A retry is in flight from the moment Allow admits it (its backoff
// included) until its attempt ends. The limit follows the load as it is
// now, with no window to tune: a client whose calls all fail cannot more
// than add Percent to its concurrency, however long the outage lasts.
//
// A ConcurrencyBudget is a [CallBudget]: the retry loops tell it when each
// call and each admitted retry starts and ends. It is safe for concurrent
// use and takes no lock. Use [NewConcurrencyBudget]; the zero value allows
// nothing.
type ConcurrencyBudget struct {
	percent float64
	floor   int64
	calls   atomic.Int64
	retries atomic.Int64
}

// NewConcurrencyBudget returns a ConcurrencyBudget with nothing in flight,
// or an error naming the bad field of c.
func NewConcurrencyBudget(c ConcurrencyBudgetConfig) (*ConcurrencyBudget, error) {
	switch {
	case !(c.Percent >= 0 && c.Percent <= 100000):
		return nil, fmt.Errorf("rebound: ConcurrencyBudgetConfig.Percent must be in [0, 100000], got %v", c.Percent)
	case c.MinConcurrency < 0:
		return nil, fmt.Errorf("rebound: ConcurrencyBudgetConfig.MinConcurrency must be >= 0, got %d", c.MinConcurrency)
	}
	return &ConcurrencyBudget{percent: c.Percent, floor: int64(c.MinConcurrency)}, nil
}

// Allow admits a retry while fewer than the limit are in flight.
func (b *ConcurrencyBudget) Allow(timeout bool) bool {
	limit := max(b.floor, int64(b.percent*float64(b.calls.Load())/100))
	for {
		r := b.retries.Load()
		if r >= limit {
			return false
		}
		if b.retries.CompareAndSwap(r, r+1) {
			return true
		}
	}
}

func (b *ConcurrencyBudget) unallow(bool) { b.EndRetry() }

// StartCall counts a call in flight.
func (b *ConcurrencyBudget) StartCall() { b.calls.Add(1) }

// EndCall counts a call that ended.
func (b *ConcurrencyBudget) EndCall() { b.calls.Add(-1) }

// EndRetry counts an admitted retry that ended.
func (b *ConcurrencyBudget) EndRetry() { b.retries.Add(-1) }

// InFlight returns the calls and the admitted retries in flight.
func (b *ConcurrencyBudget) InFlight() (calls, retries int64) {
	return b.calls.Load(), b.retries.Load()
}

// RecordFailure does nothing: the budget counts what is in flight.
func (b *ConcurrencyBudget) RecordFailure() {}

// RecordSuccess does nothing.
func (b *ConcurrencyBudget) RecordSuccess() {}
