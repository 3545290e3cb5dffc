package rebound

import (
	"context"
	"time"
)

// Call runs the attempts of one call, as [DoValue] and [Hedge] do, and tells
// its hooks what the loop decides as it decides: for the call's logs,
// statistics and traces. T is the type of the call's result.
//
// The zero value has no hooks. Any hook may be nil. The hooks of a call run
// one at a time on its path, so they must return quickly. Use a Call for
// one call at a time; a Call is not modified by its methods.
type Call[T any] struct {
	// OnRetry: attempt number attempt failed with err, and the next
	// attempt follows after delay.
	OnRetry func(attempt int, err error, delay time.Duration)
	// OnHedge: hedged attempt number attempt (2 or more) is being sent.
	OnHedge func(attempt int)
	// OnThrottled: the budget refused hedged attempt number attempt (A6
	// throttling). No further hedges are sent, but the attempts already
	// sent go on, and may still succeed. (A retry the budget refuses ends
	// the call: OnGiveUp reports it, with [ErrThrottled].)
	OnThrottled func(attempt int)
	// OnGiveUp: no further attempt will be made after attempts attempts;
	// err is the last attempt's error (nil if none ran) and reason why
	// retrying stopped, as in [Error]. It is not called after a success.
	OnGiveUp func(attempts int, err, reason error)
}

// gaveUp builds the loop's error and tells the OnGiveUp hook.
func (c *Call[T]) gaveUp(err, reason error, attempts int) *Error {
	if c.OnGiveUp != nil {
		c.OnGiveUp(attempts, err, reason)
	}
	return &Error{Err: err, Reason: reason, Attempts: attempts}
}

// Retry calls op until it succeeds or s refuses another attempt, as
// [DoValue] does.
func (c *Call[T]) Retry(ctx context.Context, s Strategy, op func(context.Context) (T, error)) (T, error) {
	return doValue(ctx, c, s, op)
}

// Hedge runs op as hedged attempts, as [Hedge] does.
func (c *Call[T]) Hedge(ctx context.Context, h *Hedger, op func(ctx context.Context, attempt int) (T, error)) (T, error) {
	return hedge(ctx, c, h, op)
}
