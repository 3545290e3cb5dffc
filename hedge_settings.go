package rebound

import "time"

// The accessors below let a front door run a hedging state machine of its
// own, where [Hedge]'s one-function-per-attempt model does not fit (a
// streaming call, whose attempts live on after they are sent), with the
// same settings as Hedge.

// Delay returns the hedging delay to use now: the policy's DelayFunc when
// set (never below 0), else its Delay.
func (h *Hedger) Delay() time.Duration { return h.delay() }

// Budget returns the budget that hedges are charged to, or nil for none.
func (h *Hedger) Budget() Budget { return h.s.budget }

// Clock returns the clock that hedging delays wait on.
func (h *Hedger) Clock() Clock { return h.s.clock }
