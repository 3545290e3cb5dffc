package httpretry

import (
	"context"
	"errors"

	"github.com/rebound-go/rebound"
)

// strategy wraps the Strategy of a host for the retry loop. It adds what
// HTTP needs around each decision:
//
//   - A response that is going to be retried is drained and closed before
//     the wait, so its connection goes back to the pool; one that is not
//     stays unread, to be returned.
//   - A next attempt whose delay would reach the context's deadline is
//     refused before the response is drained ([rebound.Do] would refuse it
//     too, but only after the drain).
type strategy struct {
	s     rebound.Strategy
	clock rebound.Clock
	// maxAttempts, when > 0, caps the attempts of a call whose override
	// asks for fewer; budget is the host's, which still counts the
	// failure that ends such a call.
	maxAttempts int
	budget      rebound.Budget
}

func (s *strategy) AcquireInitialToken(ctx context.Context) (rebound.Token, error) {
	return s.s.AcquireInitialToken(ctx)
}

// InitialTokenOf tells [rebound.DoValue] that the initial token and a
// first success are the wrapped strategy's, so that, for a built-in one,
// it makes no token for a call that succeeds at once.
func (s *strategy) InitialTokenOf() rebound.Strategy { return s.s }

func (s *strategy) RefreshToken(ctx context.Context, t rebound.Token, err error) (rebound.Token, error) {
	if s.maxAttempts > 0 && t.Attempt() >= s.maxAttempts {
		// The override's cap: the failure counts as the strategy would
		// count it, and no retry follows.
		info := rebound.Classify(err)
		if info.Safety == rebound.SafetyNo && !info.ServerStop {
			return nil, rebound.ErrNotRetryable
		}
		if s.budget != nil {
			s.budget.RecordFailure()
		}
		return nil, rebound.ErrAttemptsExhausted
	}
	next, rerr := s.s.RefreshToken(ctx, t, err)
	if rerr != nil || next == nil {
		return next, rerr
	}
	if dl, ok := ctx.Deadline(); ok && !s.clock.Now().Add(next.Delay()).Before(dl) {
		return nil, rebound.ErrDeadline
	}
	var se *statusError
	if errors.As(err, &se) {
		se.discard(ctx)
	}
	return next, nil
}

func (s *strategy) RecordSuccess(t rebound.Token) error { return s.s.RecordSuccess(t) }

// Budget is the wrapped strategy's budget, so that [rebound.DoValue]
// tells a [rebound.CallBudget] of each call; nil for none.
func (s *strategy) Budget() rebound.Budget {
	if b, ok := s.s.(interface{ Budget() rebound.Budget }); ok {
		return b.Budget()
	}
	return nil
}

// Clock is the clock [rebound.DoValue] waits on.
func (s *strategy) Clock() rebound.Clock { return s.clock }

// clockOf returns the clock a strategy carries, as rebound.Do finds it, or
// def.
func clockOf(s rebound.Strategy, def rebound.Clock) rebound.Clock {
	if c, ok := s.(interface{ Clock() rebound.Clock }); ok {
		if clk := c.Clock(); clk != nil {
			return clk
		}
	}
	return def
}
