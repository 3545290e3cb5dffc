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
	opValue := func(ctx context.Context) (struct{}, error) { return struct{}{}, op(ctx) }
	st := fast(s)
	if st == nil {
		_, err := doValue(ctx, &Call[struct{}]{}, s, opValue)
		return err
	}
	// doValue's fast path, without the adapter around op.
	err := op(ctx)
	if err == nil {
		if st.budget != nil {
			st.budget.RecordSuccess()
		}
		return nil
	}
	_, err = retry(ctx, &Call[struct{}]{}, s, opValue, nil, nil, err)
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
	st := fast(s)
	if st == nil {
		return doCounted(ctx, c, s, op)
	}
	v, err := op(ctx)
	if err == nil {
		if st.budget != nil {
			st.budget.RecordSuccess()
		}
		return v, nil
	}
	return retry(ctx, c, s, op, nil, nil, err)
}

// fast returns the settings of s when the call can take the fast path,
// measured by BenchmarkDo in the bench module: s is a built-in strategy
// whose budget counts no calls. Its initial token has no delay and cannot
// be refused, so the first attempt runs before it is made, and a call that
// succeeds at once costs no token; its success is recorded with static
// calls, and the loop's state lives in retry, which only a failure
// reaches.
func fast(s Strategy) *settings {
	var st *settings
	switch b := s.(type) {
	case *Retrier:
		st = &b.s
	case *Standard:
		st = &b.s
	default:
		return nil
	}
	if st.callBudget != nil {
		return nil
	}
	return st
}

// doCounted is doValue for any strategy: it tells a call budget of the call
// (see [CallBudget]) and makes the initial token of a strategy that is not
// built in.
func doCounted[T any](ctx context.Context, c *Call[T], s Strategy, op func(context.Context) (T, error)) (T, error) {
	// A call budget counts the call, and each retry it admitted until
	// that retry's attempt (or the wait before it) ends.
	cb := callBudgetOf(s)
	if cb != nil {
		cb.StartCall()
		defer cb.EndCall()
	}
	if f := deferred(s); f != nil {
		// As on the fast path: the first attempt before the token.
		v, err := op(ctx)
		if err == nil {
			f.recordFirstSuccess()
			return v, nil
		}
		var tok Token
		if any(f) != any(s) {
			tok = f.firstToken()
		}
		return retry(ctx, c, s, op, cb, tok, err)
	}
	tok, err := s.AcquireInitialToken(ctx)
	if err != nil || tok == nil {
		return op(ctx)
	}
	return retry(ctx, c, s, op, cb, tok, nil)
}

// retry runs the attempts of a call from the token tok on: first, when
// last is not nil, it refreshes tok after the failed first attempt. A nil
// tok is a built-in strategy's first token: then s is that strategy, and
// its tokens stay on this stack, advanced in place (a retry makes no token
// on the heap). cb is the call budget of s, nil for none.
func retry[T any](ctx context.Context, c *Call[T], s Strategy, op func(context.Context) (T, error), cb CallBudget, tok Token, last error) (T, error) {
	var zero T
	attempts := 0
	if last != nil {
		attempts = 1
	}
	direct := tok == nil
	var cur token
	if direct {
		cur = token{owner: s, attempt: 1}
	}
	for {
		if last != nil {
			if ctx.Err() != nil {
				return zero, c.gaveUp(last, context.Cause(ctx), attempts)
			}
			var rerr error
			if direct {
				rerr = advance(s, ctx, &cur, last)
			} else {
				var next Token
				if next, rerr = s.RefreshToken(ctx, tok, last); rerr == nil && next == nil {
					rerr = errInvalidToken
				}
				tok = next
			}
			if rerr != nil {
				return zero, c.gaveUp(last, rerr, attempts)
			}
			if c.OnRetry != nil {
				c.OnRetry(attempts, last, delayOf(direct, &cur, tok))
			}
		}
		if d := delayOf(direct, &cur, tok); d > 0 {
			if werr := wait(ctx, clockOf(s), d); werr != nil {
				if cb != nil && paidOf(direct, &cur, tok) {
					cb.EndRetry()
				}
				return zero, c.gaveUp(last, werr, attempts)
			}
		}
		attempts++
		v, err := op(ctx)
		if cb != nil && paidOf(direct, &cur, tok) {
			cb.EndRetry()
		}
		if err == nil {
			// The attempt succeeded; a strategy that rejects its own token
			// cannot change that.
			if direct {
				recordDirectSuccess(s, &cur)
			} else {
				_ = s.RecordSuccess(tok)
			}
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
}

// advance is RefreshToken of a built-in strategy s for its token tk on
// DoValue's stack, made the next token in place. The calls are static, so
// that tk stays on the stack.
func advance(s Strategy, ctx context.Context, tk *token, err error) error {
	switch st := s.(type) {
	case *Retrier:
		return st.advance(ctx, tk, err)
	case *Standard:
		return st.advance(ctx, tk, err)
	}
	return errInvalidToken
}

// recordDirectSuccess is RecordSuccess of a built-in strategy s for its
// token tk on DoValue's stack.
func recordDirectSuccess(s Strategy, tk *token) {
	switch st := s.(type) {
	case *Retrier:
		recordSuccess(st.s.budget, tk)
	case *Standard:
		recordSuccess(st.s.budget, tk)
	}
}

// delayOf returns the delay of the loop's current token: cur when direct,
// else tok.
func delayOf(direct bool, cur *token, tok Token) time.Duration {
	if direct {
		return cur.delay
	}
	return tok.Delay()
}

// paidOf reports whether the loop's current token admits a retry the
// budget paid for.
func paidOf(direct bool, cur *token, tok Token) bool {
	if direct {
		return cur.paid
	}
	return paid(tok)
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
