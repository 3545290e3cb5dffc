package rebound

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// HedgingPolicy is A6's hedgingPolicy. The zero value is not valid:
// MaxAttempts must be set.
type HedgingPolicy struct {
	// MaxAttempts counts every attempt, the original included. Must be >= 1.
	MaxAttempts int
	// HedgingDelay is the time between hedges; 0 sends every attempt at
	// once. Must be >= 0.
	HedgingDelay time.Duration
	// HedgingDelayFunc, when set, is consulted for the delay each time a
	// hedge is scheduled, instead of HedgingDelay (an adaptive delay, for
	// example). It must be safe for concurrent use; a negative result
	// counts as 0.
	HedgingDelayFunc func() time.Duration
}

// Hedger runs hedged attempts with [Hedge]: it is the [Strategy] of hedging.
// An error classified [SafetyYes] is non-fatal (the hedge's
// nonFatalStatusCodes); anything else is fatal. A Hedger is safe for
// concurrent use.
type Hedger struct {
	p HedgingPolicy
	s settings
}

// NewHedger returns a Hedger for p. [WithBudget], [WithClassifier],
// [WithClock] and [WithMaxAttempts] apply; backoff and random options are
// accepted and unused.
func NewHedger(p HedgingPolicy, opts ...Option) (*Hedger, error) {
	if p.HedgingDelay < 0 {
		return nil, fmt.Errorf("rebound: HedgingPolicy.HedgingDelay must be >= 0, got %v", p.HedgingDelay)
	}
	h := &Hedger{p: p, s: settings{maxAttempts: p.MaxAttempts, backoff: DefaultBackoff()}}
	if err := h.s.build(opts); err != nil {
		return nil, err
	}
	return h, nil
}

// Budget returns the budget of the hedges, nil for none.
func (h *Hedger) Budget() Budget { return h.s.budget }

func (h *Hedger) delay() time.Duration {
	if h.p.HedgingDelayFunc != nil {
		return max(h.p.HedgingDelayFunc(), 0)
	}
	return h.p.HedgingDelay
}

type hedgeResult[T any] struct {
	n   int // the attempt's number
	v   T
	err error
}

var errNilHedger = errors.New("rebound: nil Hedger")

// hedgeState is what the attempts of one [Hedge] call share with it, for
// [Commit].
type hedgeState struct {
	committed atomic.Int32  // the attempt the call is committed to, 0 while none
	commitC   chan struct{} // a commit is waiting for the loop; buffered
}

// attemptContext is the context of one hedged attempt: cancelled on its
// own when the attempt loses, and the attempt's handle for [Commit].
type attemptContext struct {
	context.Context
	st *hedgeState
	n  int
}

type attemptKey struct{}

func (c *attemptContext) Value(key any) any {
	if key == (attemptKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// Commit tells the [Hedge] call that ctx's attempt belongs to that the call
// is committed to that attempt (A6 "When Retries are Valid": its response
// has started): no further hedges are sent, the other attempts are
// cancelled, and this attempt's result, success or failure, is the call's.
// ctx is the context Hedge gave the attempt, or one derived from it. It
// reports whether the call is committed to this attempt: false when
// another attempt committed first, or ctx is not a hedged attempt's. It is
// safe to call from any goroutine, more than once.
func Commit(ctx context.Context) bool {
	a, ok := ctx.Value(attemptKey{}).(*attemptContext)
	if !ok {
		return false
	}
	if a.st.committed.CompareAndSwap(0, int32(a.n)) {
		a.st.commitC <- struct{}{} // buffered for the one commit
		return true
	}
	return a.st.committed.Load() == int32(a.n)
}

// Hedge runs op as A6 hedged attempts. op gets a context that is cancelled
// when the attempt loses, and the attempt's 1-based number.
//
//   - The first attempt starts at once; each further one after the hedging
//     delay, while attempts remain and the budget allows (the first is
//     always sent). After a hedge the budget refuses, no further hedges
//     are sent.
//   - The first success wins: every other attempt is cancelled, and Hedge
//     returns once they have all returned.
//   - A non-fatal failure counts against the budget and sends the next
//     hedge at once; later ones follow at the delay. A pushback
//     (RetryInfo.HasRetryAfter) sends the next hedge after exactly that
//     time, a server's RetryInfo.MinDelay after that time; a pushback
//     "stop" counts against the budget too and ends hedging, and so does
//     a RetryInfo.Stop, with its reason. A fatal failure cancels
//     everything and is returned, as is a committed one
//     (RetryInfo.Committed).
//   - An attempt whose op calls [Commit] wins the call whatever its
//     result: no hedge follows, the others are cancelled, and its failure,
//     if it fails, is returned.
//   - When every attempt has failed, Hedge returns after the last one ended,
//     with an [*Error] for the last failure.
//
// Every attempt's context, the winner's included, is cancelled when Hedge
// returns: an op whose result stays in use afterwards (a response body to be
// read, say) must give its attempt a context of its own. The values of
// losing attempts are dropped; an op that holds resources must release them
// itself when its context is cancelled. No goroutine or timer started by
// Hedge outlives the call.
func Hedge[T any](ctx context.Context, h *Hedger, op func(ctx context.Context, attempt int) (T, error)) (T, error) {
	return hedge(ctx, &Call[T]{}, h, op)
}

func hedge[T any](ctx context.Context, c *Call[T], h *Hedger, op func(ctx context.Context, attempt int) (T, error)) (T, error) {
	var zero T
	if h == nil {
		return zero, errNilHedger
	}
	if op == nil {
		return zero, errNilOp
	}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cb, _ := h.s.budget.(CallBudget)
	if cb != nil {
		cb.StartCall()
		defer cb.EndCall()
	}
	// ended tells cb that hedge n, which Allow paid for, has ended.
	ended := func(n int) {
		if cb != nil && n > 1 {
			cb.EndRetry()
		}
	}

	maxAttempts := h.s.maxAttempts
	results := make(chan hedgeResult[T], maxAttempts)
	st := &hedgeState{commitC: make(chan struct{}, 1)}
	cancels := make([]context.CancelFunc, 0, maxAttempts) // attempt n's is cancels[n-1]
	sent, running := 0, 0
	launch := func() {
		sent++
		running++
		if sent > 1 && c.OnHedge != nil {
			c.OnHedge(sent)
		}
		actx, acancel := context.WithCancel(ctx)
		cancels = append(cancels, acancel)
		go func(a *attemptContext) {
			v, err := op(a, a.n)
			results <- hedgeResult[T]{a.n, v, err}
		}(&attemptContext{Context: actx, st: st, n: sent})
	}
	// finish cancels the attempts still running and waits for them.
	finish := func() {
		cancel()
		for ; running > 0; running-- {
			ended((<-results).n)
		}
		for _, c := range cancels {
			c()
		}
	}

	var (
		timer   Timer
		timerC  <-chan time.Time
		due     time.Time // when timer fires
		stopped bool      // no further hedges: pushback said stop, the budget refused or the call committed
		classes *[]classCount
		reason  error = ErrAttemptsExhausted
		last    error
	)
	disarm := func() {
		if timer != nil {
			timer.Stop()
			timer, timerC = nil, nil
		}
	}
	defer disarm()
	// hedge sends the next hedge if the budget allows, then schedules the
	// one after it; with a zero delay that means sending them all now.
	var arm func(d time.Duration)
	hedge := func() {
		if h.s.budget != nil && !h.s.budget.Allow(false) {
			stopped, reason = true, ErrThrottled
			if c.OnThrottled != nil {
				c.OnThrottled(sent + 1)
			}
			return
		}
		launch()
		if sent < maxAttempts {
			arm(h.delay())
		}
	}
	arm = func(d time.Duration) {
		disarm()
		if stopped || sent >= maxAttempts {
			return
		}
		if d <= 0 {
			hedge()
			return
		}
		due = h.s.clock.Now().Add(d)
		timer = h.s.clock.NewTimer(d)
		timerC = timer.C()
	}

	launch()
	if sent < maxAttempts {
		arm(h.delay())
	}
	commitC := (<-chan struct{})(st.commitC)
	for {
		select {
		case <-timerC:
			timer, timerC = nil, nil
			hedge()
		case <-commitC:
			// No hedge follows the committed attempt, and the others
			// are of no use: cancel them now.
			commitC = nil
			disarm()
			stopped, reason = true, ErrCommitted
			w := int(st.committed.Load())
			for i, c := range cancels {
				if i+1 != w {
					c()
				}
			}
		case <-parent.Done():
			finish()
			return zero, c.gaveUp(last, context.Cause(parent), sent)
		case r := <-results:
			running--
			ended(r.n)
			if w := int(st.committed.Load()); w != 0 && w != r.n {
				continue // cancelled, or about to be: the call is w's
			}
			committed := st.committed.Load() != 0
			if r.err == nil {
				// A hedge (attempt 2 on) was paid for by Allow.
				recordSuccess(h.s.budget, &token{paid: r.n > 1})
				finish()
				return r.v, nil
			}
			last = r.err
			if parent.Err() != nil {
				finish()
				return zero, c.gaveUp(last, context.Cause(parent), sent)
			}
			if errors.Is(r.err, ErrRejectedLocally) {
				// The adaptive throttle kept this hedge home: send no
				// more, and let those sent finish.
				disarm()
				stopped, reason = true, ErrThrottled
				if running == 0 {
					return zero, c.gaveUp(last, reason, sent)
				}
				continue
			}
			info := h.s.classify(r.err)
			// A6 counts a non-fatal failure or a pushback "stop" against
			// the throttle, whatever happens to the call next.
			if (info.Safety == SafetyYes || info.ServerStop) && h.s.budget != nil && !info.Local {
				h.s.budget.RecordFailure()
			}
			var classDone bool
			classes, classDone = classLimited(classes, info)
			if info.Safety != SafetyYes {
				// A fatal status cancels everything, pushback or not.
				finish()
				reason := ErrNotRetryable
				if info.ServerStop {
					reason = ErrPushback
				}
				return zero, c.gaveUp(last, reason, sent)
			}
			if info.Committed || committed {
				// This attempt's response had started: it is the answer.
				finish()
				return zero, c.gaveUp(last, ErrCommitted, sent)
			}
			switch {
			case info.ServerStop:
				disarm()
				stopped, reason = true, ErrPushback
			case info.Stop != nil:
				disarm()
				stopped, reason = true, info.Stop
			case classDone:
				disarm()
				stopped, reason = true, ErrAttemptsExhausted
			case info.HasRetryAfter:
				arm(info.RetryAfter)
			default:
				// At once, unless the server asked for a pause.
				arm(info.MinDelay)
			}
		}
		if running == 0 {
			if timerC == nil {
				return zero, c.gaveUp(last, reason, sent)
			}
			// Only a pushback-delayed hedge is left; do not wait for it
			// past the deadline.
			if dl, ok := parent.Deadline(); ok && !due.Before(dl) {
				return zero, c.gaveUp(last, ErrDeadline, sent)
			}
		}
	}
}
