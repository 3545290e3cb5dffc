package rebound

import (
	"context"
	"errors"
	"time"
)

var (
	errNilStrategy = errors.New("rebound: nil Strategy")
	errNilOp       = errors.New("rebound: nil operation")
)

// Do calls op until it succeeds or s refuses another attempt, following the
// Smithy retry loop:
//
//   - If s cannot give an initial token, op is called once, without retries,
//     and its error returned as is.
//   - Before each attempt Do waits the token's delay (the initial token's
//     too) on the strategy's clock (see [Retrier.Clock]; the real clock for
//     strategies without one). It never sleeps past ctx's deadline: a delay
//     that would reach it ends the loop with [ErrDeadline] at once.
//   - An attempt that fails after ctx is done is not retried: the caller's
//     cancellation is final.
//   - When s has a method Budget() Budget ([Retrier.Budget]) that returns
//     a [CallBudget], Do tells it of the call and of each retry its tokens
//     paid for, so a strategy that wraps a Retrier or a Standard keeps a
//     [RatioBudget] or [ConcurrencyBudget] counting by passing Budget on.
//
// When retrying stops, Do returns an [*Error] that unwraps to the last
// attempt's error and to the reason (a sentinel such as
// [ErrAttemptsExhausted], the strategy's own error, or context.Cause(ctx)).
// A nil s or op is an error; op is not called.
func Do(ctx context.Context, s Strategy, op func(context.Context) error) error {
	if op == nil {
		return errNilOp
	}
	_, err := DoValue(ctx, s, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, op(ctx)
	})
	return err
}

// DoValue is [Do] for an operation that returns a value. The value of the
// successful attempt is returned; on failure the zero value.
func DoValue[T any](ctx context.Context, s Strategy, op func(context.Context) (T, error)) (T, error) {
	return doValue(ctx, &Call[T]{}, s, op)
}

func doValue[T any](ctx context.Context, c *Call[T], s Strategy, op func(context.Context) (T, error)) (T, error) {
	var zero T
	if s == nil {
		return zero, errNilStrategy
	}
	if op == nil {
		return zero, errNilOp
	}
	var (
		tok      Token
		last     error // the last attempt's error; nil before the first
		attempts int
	)
	// A call budget counts the call, and each retry it admitted until
	// that retry's attempt (or the wait before it) ends.
	cb := callBudgetOf(s)
	if cb != nil {
		cb.StartCall()
		defer cb.EndCall()
	}
	// direct is s when it is a built-in strategy itself (not a wrapper
	// that acts around RefreshToken): its first token is never made.
	var direct deferredToken
	if f := deferred(s); f != nil {
		// The built-in strategies' initial token has no delay and cannot
		// be refused, so the first attempt runs before it is made: a call
		// that succeeds at once costs no token, and one that fails is
		// refreshed from a token on the stack (refreshFirst).
		attempts = 1
		v, err := op(ctx)
		if err == nil {
			f.recordFirstSuccess()
			return v, nil
		}
		last = err
		if any(f) == any(s) {
			direct = f
		} else {
			tok = f.firstToken()
		}
	} else {
		var err error
		if tok, err = s.AcquireInitialToken(ctx); err != nil || tok == nil {
			return op(ctx)
		}
	}
	for {
		if last != nil {
			if ctx.Err() != nil {
				return zero, c.gaveUp(last, context.Cause(ctx), attempts)
			}
			var (
				next Token
				rerr error
			)
			if tok == nil {
				// Only after a built-in strategy's first attempt.
				next, rerr = direct.refreshFirst(ctx, last)
			} else {
				next, rerr = s.RefreshToken(ctx, tok, last)
			}
			if rerr != nil {
				return zero, c.gaveUp(last, rerr, attempts)
			}
			if next == nil {
				return zero, c.gaveUp(last, errInvalidToken, attempts)
			}
			if c.OnRetry != nil {
				c.OnRetry(attempts, last, next.Delay())
			}
			tok = next
		}
		if d := tok.Delay(); d > 0 {
			if werr := wait(ctx, clockOf(s), d); werr != nil {
				if cb != nil && paid(tok) {
					cb.EndRetry()
				}
				return zero, c.gaveUp(last, werr, attempts)
			}
		}
		attempts++
		v, err := op(ctx)
		if cb != nil && paid(tok) {
			cb.EndRetry()
		}
		if err == nil {
			// The attempt succeeded; a strategy that rejects its own token
			// cannot change that.
			_ = s.RecordSuccess(tok)
			return v, nil
		}
		last = err
	}
}

// deferredToken is implemented by the built-in strategies, whose initial
// token is a formality: [DoValue] makes it only once the first attempt has
// failed, and otherwise records the success directly.
type deferredToken interface {
	firstToken() Token
	recordFirstSuccess()
	// refreshFirst is RefreshToken of the first token, made on the
	// stack: no one else ever holds it.
	refreshFirst(ctx context.Context, err error) (Token, error)
}

// deferred returns s as a deferredToken when it is exactly one of the
// built-in strategies, or a wrapper that says its initial token and
// first success are those of one (httpretry's, which acts only around
// RefreshToken). A type that embeds one may override
// AcquireInitialToken, so it takes the general path.
func deferred(s Strategy) deferredToken {
	switch st := s.(type) {
	case *Retrier:
		return st
	case *Standard:
		return st
	case interface{ InitialTokenOf() Strategy }:
		return deferred(st.InitialTokenOf())
	}
	return nil
}

// wait sleeps d on c unless that would pass ctx's deadline (then
// ErrDeadline at once) or ctx ends first (then its cause). The timer is
// stopped on every path.
func wait(ctx context.Context, c Clock, d time.Duration) error {
	if beyondDeadline(ctx, c, d) {
		return ErrDeadline
	}
	t := c.NewTimer(d)
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		t.Stop()
		return context.Cause(ctx)
	}
}

// budgeted is implemented by strategies that hold a [Budget].
type budgeted interface{ Budget() Budget }

// callBudgetOf returns the budget of s when it counts calls, else nil.
func callBudgetOf(s any) CallBudget {
	if b, ok := s.(budgeted); ok {
		cb, _ := b.Budget().(CallBudget)
		return cb
	}
	return nil
}

// paid reports whether tok admits a retry the budget paid for.
func paid(tok Token) bool {
	tk, ok := tok.(*token)
	return ok && tk.paid
}
