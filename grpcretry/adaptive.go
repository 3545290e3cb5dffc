package grpcretry

import (
	"fmt"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/a6"
	"github.com/rebound-go/rebound/serviceconfig"
)

// AdaptiveHedgingConfig configures the adaptive hedging of
// [WithAdaptiveHedging], as rebound.AdaptiveThrottleConfig configures an
// adaptive throttle: the hedging delay of each method follows the
// method's recent latency, and
// a hard cap keeps its hedges within a fraction of its calls. The idea is
// that of Finagle's BackupRequestFilter, fitted to A6: the hedgingPolicy
// still decides whether a method is hedged, how many attempts it may make
// and which codes are non-fatal, and its hedgingDelay is used until enough
// latencies have been seen; the A6 throttle still applies.
//
// It applies to unary calls. The latencies are those of each method's
// successful calls on each ClientConn, timed on the Client's clock (see
// [WithClock]) from the first attempt to the answer; a call won by a hedge
// counts with the time it took, which is less than its first attempt would
// have taken but more than the delay.
//
// The zero value is not valid; start from [DefaultAdaptiveHedging].
type AdaptiveHedgingConfig struct {
	// MaxExtraLoad is the fraction of extra attempts that hedging may add
	// to a method, in (0, 1). It sets the cap: each call earns
	// MaxExtraLoad of a hedge, each hedge spends one (a hedge sent at once
	// after a non-fatal status too), and a hedge that finds too little
	// saved is not sent; over n calls a method sends at most
	// n × MaxExtraLoad + Burst hedges. It also sets the delay: the
	// (1 - 0.9 × MaxExtraLoad) quantile of the method's recent latency, so
	// 0.05 hedges at about the 95th percentile (95.5th). The tenth of the
	// allowance held back pays for the hedges the quantile does not
	// foresee (a second hedge, one after a non-fatal status, a run of slow
	// calls), so that the cap seldom has to refuse the hedge of a stalled
	// call.
	MaxExtraLoad float64
	// Window is how far back latencies count, at least 1ms. The window
	// moves in steps of a quarter of it, and the delay is recomputed at
	// most every Window/64.
	Window time.Duration
	// MinSamples is how many latencies the window must hold before their
	// quantile replaces the configured hedgingDelay; at least 1.
	MinSamples int
	// Burst is how many hedges a method may save up, in 1..1000000. A
	// method starts with Burst saved.
	Burst int
}

// DefaultAdaptiveHedging returns settings that hedge at about the 95th
// percentile of the last 30 seconds' latencies once 100 calls have
// succeeded, and send at most 5 hedges per 100 calls, with up to 100 saved
// up: enough for a run of slow calls.
func DefaultAdaptiveHedging() AdaptiveHedgingConfig {
	return AdaptiveHedgingConfig{MaxExtraLoad: 0.05, Window: 30 * time.Second, MinSamples: 100, Burst: 100}
}

func (a AdaptiveHedgingConfig) validate() error {
	switch {
	case !(a.MaxExtraLoad > 0 && a.MaxExtraLoad < 1):
		return fmt.Errorf("AdaptiveHedgingConfig.MaxExtraLoad must be in (0, 1), got %v", a.MaxExtraLoad)
	case a.Window < time.Millisecond:
		return fmt.Errorf("AdaptiveHedgingConfig.Window must be >= 1ms, got %v", a.Window)
	case a.MinSamples < 1:
		return fmt.Errorf("AdaptiveHedgingConfig.MinSamples must be >= 1, got %d", a.MinSamples)
	case a.Burst < 1 || a.Burst > 1e6:
		return fmt.Errorf("AdaptiveHedgingConfig.Burst must be in 1..1000000, got %d", a.Burst)
	}
	return nil
}

// adaptiveMethod is the adaptive hedging state of one method on one target.
//
// Its latency samples are the durations of the method's successful calls.
// A call that a hedge won took less than its first attempt would have, but
// more than the delay that sent the hedge; so below the delay in use the
// samples rank exactly as the first attempts' latencies do, and the
// quantile they give is exact while it is below that delay, and climbs
// towards the true one while it is above.
type adaptiveMethod struct {
	hedger   *rebound.Hedger
	clock    rebound.Clock
	fallback time.Duration // the configured hedgingDelay
	lat      latencyWindow
	cap      hedgeCap
}

// adaptive returns the adaptive hedging state of method under mc on t,
// made on first use.
func (c *Client) adaptive(t *target, p *policyEntry, mc *serviceconfig.MethodConfig, method string) (*adaptiveMethod, error) {
	if v, ok := p.adaptive.Load(method); ok {
		return v.(*adaptiveMethod), nil
	}
	a := c.opts.adaptive
	clk := c.opts.Clock
	if clk == nil {
		clk = rebound.RealClock()
	}
	m := &adaptiveMethod{clock: clk, fallback: mc.HedgingPolicy.HedgingDelay}
	m.lat.init(a, clk.Now())
	m.cap.init(a)
	h, err := rebound.NewHedger(rebound.HedgingPolicy{
		MaxAttempts:      mc.HedgingPolicy.Attempts(c.opts.MaxAttempts),
		HedgingDelay:     m.fallback,
		HedgingDelayFunc: m.delay,
	}, rebound.WithClassifier(rebound.Classify), rebound.WithClock(clk), rebound.WithBudget(&cappedBudget{budget: a6.Budget(t.throttle, c.opts.Settings()), cap: &m.cap}))
	if err != nil {
		return nil, err
	}
	m.hedger = h
	v, _ := p.adaptive.LoadOrStore(method, m)
	return v.(*adaptiveMethod), nil
}

// delay is the hedging delay now: the window's quantile, or the configured
// delay while the window holds too few samples.
func (m *adaptiveMethod) delay() time.Duration {
	w := &m.lat
	now := m.clock.Now()
	at := int64(now.Sub(w.origin))
	if next := w.next.Load(); at >= next && w.next.CompareAndSwap(next, at+int64(w.refresh)) {
		w.cached.Store(int64(w.quantileAt(now)))
	}
	if d := w.cached.Load(); d >= 0 {
		return time.Duration(d)
	}
	return m.fallback
}

// Latencies are counted in microsecond buckets on a log-linear scale:
// exact below 32µs, then 16 buckets per doubling (at most 6.25% wide), up
// to 2^32µs (71 minutes), where longer latencies are counted.
const (
	subBits     = 4
	subBuckets  = 1 << subBits
	maxMicros   = 1<<32 - 1
	numBuckets  = (32-subBits-1)*subBuckets + 2*subBuckets
	windowSlots = 4
)

// bucketOf returns the bucket of a latency of us microseconds.
func bucketOf(us uint64) int {
	us = min(us, maxMicros)
	if us < 2*subBuckets {
		return int(us)
	}
	e := bits.Len64(us) - subBits - 1
	return e*subBuckets + int(us>>e)
}

// bucketEnd returns the smallest latency, in microseconds, above bucket i.
func bucketEnd(i int) uint64 {
	if i < 2*subBuckets {
		return uint64(i) + 1
	}
	e := i/subBuckets - 1
	return uint64(i%subBuckets+subBuckets+1) << e
}

// latencyWindow is a sliding-window latency histogram. Recording takes no
// lock but once per slot per quarter window, to clear a slot for reuse.
type latencyWindow struct {
	quantile   float64
	minSamples uint64
	slotLen    time.Duration
	refresh    time.Duration
	origin     time.Time

	mu    sync.Mutex // serializes the clearing of slots
	slots [windowSlots]latencySlot

	next   atomic.Int64 // when to recompute cached, as time since origin
	cached atomic.Int64 // the quantile, or -1 while the window holds too few samples
}

// latencySlot counts the latencies of one quarter window, the one with
// number epoch since the origin.
type latencySlot struct {
	epoch  atomic.Int64
	counts [numBuckets]atomic.Uint32
}

func (w *latencyWindow) init(a *AdaptiveHedgingConfig, now time.Time) {
	w.quantile = 1 - quantileShare*a.MaxExtraLoad
	w.minSamples = uint64(a.MinSamples)
	w.slotLen = a.Window / windowSlots
	w.refresh = a.Window / 64
	w.origin = now
	for i := range w.slots {
		w.slots[i].epoch.Store(math.MinInt64)
	}
	w.cached.Store(-1)
}

func (w *latencyWindow) epoch(now time.Time) int64 { return int64(now.Sub(w.origin) / w.slotLen) }

func slotIndex(epoch int64) int { return int((epoch%windowSlots + windowSlots) % windowSlots) }

// record counts a latency d that ended at now.
func (w *latencyWindow) record(now time.Time, d time.Duration) {
	e := w.epoch(now)
	s := &w.slots[slotIndex(e)]
	if cur := s.epoch.Load(); cur != e {
		if cur > e {
			return // the slot already counts a later quarter
		}
		w.mu.Lock()
		if s.epoch.Load() < e {
			for i := range s.counts {
				s.counts[i].Store(0)
			}
			s.epoch.Store(e)
		}
		w.mu.Unlock()
		if s.epoch.Load() != e {
			return
		}
	}
	s.counts[bucketOf(uint64(max(d, 0)/time.Microsecond))].Add(1)
}

// quantileAt returns the window's quantile at now, rounded up to the end of
// its bucket, or -1 if the window holds fewer than minSamples latencies.
func (w *latencyWindow) quantileAt(now time.Time) time.Duration {
	e := w.epoch(now)
	var counts [numBuckets]uint64
	var total uint64
	for i := range w.slots {
		s := &w.slots[i]
		if se := s.epoch.Load(); se > e || se <= e-windowSlots {
			continue
		}
		for j := range s.counts {
			c := uint64(s.counts[j].Load())
			counts[j] += c
			total += c
		}
	}
	if total == 0 || total < w.minSamples {
		return -1
	}
	// The epsilon keeps float error from pushing an exact rank, such as
	// 0.95 × 100, to the next one.
	rank := min(max(uint64(math.Ceil(w.quantile*float64(total)-1e-9)), 1), total)
	var sum uint64
	for i, c := range counts {
		if sum += c; sum >= rank {
			return time.Duration(bucketEnd(i)) * time.Microsecond
		}
	}
	return time.Duration(maxMicros) * time.Microsecond
}

// quantileShare is the part of MaxExtraLoad that the delay aims to spend.
const quantileShare = 0.9

// capUnit is one hedge in the fixed-point arithmetic of hedgeCap.
const capUnit = 1_000_000

// hedgeCap is the hard cap on a method's hedges: each call adds earn, each
// hedge takes capUnit, and the balance stays within [0, max].
type hedgeCap struct {
	tokens    atomic.Int64
	max, earn int64
}

func (c *hedgeCap) init(a *AdaptiveHedgingConfig) {
	c.max = int64(a.Burst) * capUnit
	c.earn = max(int64(math.Round(a.MaxExtraLoad*capUnit)), 1)
	c.tokens.Store(c.max)
}

// deposit adds one call's share.
func (c *hedgeCap) deposit() {
	for {
		v := c.tokens.Load()
		n := min(v+c.earn, c.max)
		if v == n || c.tokens.CompareAndSwap(v, n) {
			return
		}
	}
}

// giveBack returns a hedge that take spent and the budget then refused.
func (c *hedgeCap) giveBack() {
	for {
		v := c.tokens.Load()
		n := min(v+capUnit, c.max)
		if v == n || c.tokens.CompareAndSwap(v, n) {
			return
		}
	}
}

// take spends one hedge, if the balance holds one.
func (c *hedgeCap) take() bool {
	for {
		v := c.tokens.Load()
		if v < capUnit {
			return false
		}
		if c.tokens.CompareAndSwap(v, v-capUnit) {
			return true
		}
	}
}

// cappedBudget is the budget of an adaptive method: the target's A6
// throttle and WithBudget's, if any, and the method's cap, all of which
// must allow a hedge. It counts calls for a rebound.CallBudget among them.
type cappedBudget struct {
	budget rebound.Budget // a6.Budget: the throttle and WithBudget's; nil for neither
	cap    *hedgeCap
}

func (b *cappedBudget) RecordFailure() {
	if b.budget != nil {
		b.budget.RecordFailure()
	}
}

func (b *cappedBudget) RecordSuccess() {
	if b.budget != nil {
		b.budget.RecordSuccess()
	}
}

// RecordRetrySuccess passes a hedge's success on as rebound's loops do, so
// that a token bucket's refund applies.
func (b *cappedBudget) RecordRetrySuccess(timeout bool) {
	switch r := b.budget.(type) {
	case nil:
	case interface{ RecordRetrySuccess(bool) }:
		r.RecordRetrySuccess(timeout)
	default:
		r.RecordSuccess()
	}
}

// Allow takes a hedge from the cap, then asks the budget, and gives the
// cap's hedge back when the budget refuses: a refused hedge spends
// nothing (the budget gives back what it took itself, see
// rebound.AllBudgets).
func (b *cappedBudget) Allow(timeout bool) bool {
	if !b.cap.take() {
		return false
	}
	if b.budget != nil && !b.budget.Allow(timeout) {
		b.cap.giveBack()
		return false
	}
	return true
}

func (b *cappedBudget) StartCall() {
	if cb, ok := b.budget.(rebound.CallBudget); ok {
		cb.StartCall()
	}
}

func (b *cappedBudget) EndRetry() {
	if cb, ok := b.budget.(rebound.CallBudget); ok {
		cb.EndRetry()
	}
}

func (b *cappedBudget) EndCall() {
	if cb, ok := b.budget.(rebound.CallBudget); ok {
		cb.EndCall()
	}
}
