package rebound

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// HedgePolicy is A6's hedgingPolicy.
type HedgePolicy struct {
	// MaxAttempts counts every attempt, the original included. Must be >= 1.
	MaxAttempts int
	// Delay is the time between hedges; 0 sends every attempt at once.
	Delay time.Duration
	// DelayFunc, when set, is consulted for the delay each time a hedge is
	// scheduled, instead of Delay (an adaptive delay, for example). It must
	// be safe for concurrent use and return a value >= 0.
	DelayFunc func() time.Duration
}

// Hedger runs hedged attempts with [Hedge]. An error classified [SafetyYes]
// is non-fatal (the hedge's nonFatalStatusCodes); anything else is fatal.
// A Hedger is safe for concurrent use.
type Hedger struct {
	p HedgePolicy
	s settings
}

// NewHedger returns a Hedger for p. [WithBudget], [WithClassifier],
// [WithClock] and [WithMaxAttempts] apply; backoff and random options are
// accepted and unused.
func NewHedger(p HedgePolicy, opts ...Option) (*Hedger, error) {
	if p.Delay < 0 {
		return nil, fmt.Errorf("rebound: HedgePolicy.Delay must be >= 0, got %v", p.Delay)
	}
	h := &Hedger{p: p, s: settings{maxAttempts: p.MaxAttempts, backoff: DefaultBackoff}}
	if err := h.s.build(opts); err != nil {
		return nil, err
	}
	return h, nil
}

// MaxAttempts returns the maximum number of attempts.
func (h *Hedger) MaxAttempts() int { return h.s.maxAttempts }

func (h *Hedger) delay() time.Duration {
	if h.p.DelayFunc != nil {
		return max(h.p.DelayFunc(), 0)
	}
	return h.p.Delay
}

type hedgeResult[T any] struct {
	v   T
	err error
}

var errNilHedger = errors.New("rebound: nil Hedger")

// Hedge runs op as A6 hedged attempts. op gets a context that is cancelled
// when the attempt loses, and the attempt's 1-based number.
//
//   - The first attempt starts at once; each further one after the hedging
//     delay, while attempts remain and the budget allows (the first is
//     always sent).
//   - The first success wins: every other attempt is cancelled, and Hedge
//     returns once they have all returned.
//   - A non-fatal failure counts against the budget and sends the next
//     hedge at once; later ones follow at the delay. A pushback
//     (RetryInfo.HasRetryAfter) sends the next hedge after exactly that
//     time; a pushback "stop" counts against the budget too and ends
//     hedging. A fatal failure cancels everything and is returned, as is a
//     committed one (RetryInfo.Committed).
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

	maxAttempts := h.s.maxAttempts
	results := make(chan hedgeResult[T], maxAttempts)
	sent, running := 0, 0
	var obs Observer // looked up once a hedge is due
	launch := func() {
		sent++
		running++
		if sent > 1 {
			if obs == nil {
				obs = ObserverFrom(parent)
			}
			if obs != nil {
				obs.Hedging(sent)
			}
		}
		go func(n int) {
			v, err := op(ctx, n)
			results <- hedgeResult[T]{v, err}
		}(sent)
	}
	// finish cancels the attempts still running and waits for them.
	finish := func() {
		cancel()
		for ; running > 0; running-- {
			<-results
		}
	}

	var (
		timer   Timer
		timerC  <-chan time.Time
		due     time.Time // when timer fires
		stopped bool      // no further hedges: pushback said stop or the budget refused
		reason  error     = ErrAttemptsExhausted
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
			stopped, reason = true, ErrBudgetExhausted
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
	for {
		select {
		case <-timerC:
			timer, timerC = nil, nil
			hedge()
		case <-parent.Done():
			finish()
			return zero, gaveUp(parent, last, context.Cause(parent), sent)
		case r := <-results:
			running--
			if r.err == nil {
				if h.s.budget != nil {
					h.s.budget.RecordSuccess()
				}
				finish()
				return r.v, nil
			}
			last = r.err
			if parent.Err() != nil {
				finish()
				return zero, gaveUp(parent, last, context.Cause(parent), sent)
			}
			info := h.s.classify(r.err)
			// A6 counts a non-fatal failure or a pushback "stop" against
			// the throttle, whatever happens to the call next.
			if (info.Safety == SafetyYes || info.ServerStop) && h.s.budget != nil {
				h.s.budget.RecordFailure()
			}
			if info.Safety != SafetyYes {
				// A fatal status cancels everything, pushback or not.
				finish()
				reason := ErrNotRetryable
				if info.ServerStop {
					reason = ErrPushback
				}
				return zero, gaveUp(parent, last, reason, sent)
			}
			if info.Committed {
				// This attempt's response had started: it is the answer.
				finish()
				return zero, gaveUp(parent, last, ErrCommitted, sent)
			}
			switch {
			case info.ServerStop:
				disarm()
				stopped, reason = true, ErrPushback
			case info.HasRetryAfter:
				arm(info.RetryAfter)
			default:
				arm(0)
			}
		}
		if running == 0 {
			if timerC == nil {
				return zero, gaveUp(parent, last, reason, sent)
			}
			// Only a pushback-delayed hedge is left; do not wait for it
			// past the deadline.
			if dl, ok := parent.Deadline(); ok && !due.Before(dl) {
				return zero, gaveUp(parent, last, ErrDeadline, sent)
			}
		}
	}
}
