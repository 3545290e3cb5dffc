package rebound

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rebound-go/rebound/internal/gopanic"
	"github.com/rebound-go/rebound/internal/hedgehook"
)

func init() { hedgehook.Commit = commit }

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
// nonFatalStatusCodes); anything else is fatal. Make one with [NewHedger];
// the zero value is not usable. A Hedger is safe for concurrent use.
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

func (h *Hedger) delay() time.Duration {
	if h.p.HedgingDelayFunc != nil {
		return max(h.p.HedgingDelayFunc(), 0)
	}
	return h.p.HedgingDelay
}

type hedgeResult[T any] struct {
	n     int // the attempt's number
	v     T
	err   error
	panic *gopanic.Panic // the attempt panicked; v and err are unset
}

var errNilHedger = errors.New("rebound: nil Hedger")

// hedgeState is what the attempts of one [Hedge] call share with it, for
// [Commit].
type hedgeState struct {
	committed atomic.Int32 // the attempt the call is committed to, 0 while none
	mu        sync.Mutex   // guards what follows
	// commitC tells the hedging machinery of a commit; buffered. nil
	// until the machinery starts (see listen).
	commitC chan struct{}
	// start starts the machinery when the hedging delay fires; nil when
	// it starts at once or there is none. A commit before then stops it
	// (startStopped), as no hedge will follow.
	start        interface{ Stop() bool }
	startStopped bool
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
func Commit(ctx context.Context) bool { return commit(ctx, nil) }

// commit is Commit, calling then (when not nil) once ctx's attempt has won,
// before the machinery is told (see hedgehook.Commit).
func commit(ctx context.Context, then func(context.Context)) bool {
	a, ok := ctx.Value(attemptKey{}).(*attemptContext)
	if !ok {
		return false
	}
	if a.st.committed.CompareAndSwap(0, int32(a.n)) {
		a.st.mu.Lock()
		c := a.st.commitC
		if c == nil && a.st.start != nil && !a.st.startStopped && a.st.start.Stop() {
			a.st.startStopped = true // no hedge is due any more
		}
		a.st.mu.Unlock()
		if then != nil {
			then(ctx)
		}
		if c != nil {
			c <- struct{}{} // buffered for the one commit
		}
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
//
// Hedges, and the machinery that sends them and judges their results, run
// on goroutines of their own. A panic there, in op or in a callback (the
// classifier, the budget, a [Call]'s hooks, HedgingDelayFunc, the clock),
// does not end the process: every attempt is cancelled and waited for,
// and Hedge panics on the caller's goroutine with an error that carries
// the original value (errors.Is and errors.As see an error value) and,
// in its message, the value and the stack where it happened, as errgroup
// and singleflight do. A panic in attempt 1, which runs on the caller's
// goroutine, goes on as it is, once the hedges have returned.
func Hedge[T any](ctx context.Context, h *Hedger, op func(ctx context.Context, attempt int) (T, error)) (T, error) {
	return hedge(ctx, &Call[T]{}, h, op)
}
