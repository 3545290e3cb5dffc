package rebound

import (
	"context"
	"time"
)

// Observer is told of the decisions a retry or hedging loop makes, as it
// makes them: for decision logs and tracing. Attach one to a call's context
// with [WithObserver]; [Do], [DoValue] and [Hedge] call it. Its methods must
// be safe for concurrent use and return quickly: they run on the call's
// path.
type Observer interface {
	// Retrying: attempt failed with err, and the next attempt follows
	// after delay.
	Retrying(attempt int, err error, delay time.Duration)
	// Hedging: hedged attempt number attempt (2 or more) is being sent.
	Hedging(attempt int)
	// Throttled: the budget refused hedged attempt number attempt (A6
	// throttling). No further hedges are sent, but the attempts already
	// sent go on, and may still succeed. (A retry the budget refuses ends
	// the call: GaveUp reports it, with rebound.ErrBudgetExhausted.)
	Throttled(attempt int)
	// GaveUp: no further attempt will be made after attempts attempts;
	// err is the last attempt's error (nil if none ran) and reason why
	// retrying stopped, as in [Error].
	GaveUp(attempts int, err, reason error)
}

type observerKey struct{}

// WithObserver returns a copy of ctx that carries o. The loops look it up
// only after a failure, so it costs nothing on a call's success path.
func WithObserver(ctx context.Context, o Observer) context.Context {
	return context.WithValue(ctx, observerKey{}, o)
}

// ObserverFrom returns the Observer ctx carries, or nil; an observer that
// wraps another uses it to pass events on.
func ObserverFrom(ctx context.Context) Observer {
	o, _ := ctx.Value(observerKey{}).(Observer)
	return o
}

// gaveUp builds the loop's error and tells ctx's observer.
func gaveUp(ctx context.Context, err, reason error, attempts int) *Error {
	if o := ObserverFrom(ctx); o != nil {
		o.GaveUp(attempts, err, reason)
	}
	return &Error{Err: err, Reason: reason, Attempts: attempts}
}
