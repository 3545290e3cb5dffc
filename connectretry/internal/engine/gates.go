package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/a6"
	"github.com/rebound-go/rebound/internal/adaptive"
	"github.com/rebound-go/rebound/internal/ratelimit"
	"github.com/rebound-go/rebound/serviceconfig"
)

// admission is one attempt's pass through the adaptive throttle and the
// adaptive rate limit of its server name, each nil when off.
type admission struct {
	gate  *adaptive.Gate
	limit *ratelimit.Gate
	r     rebound.Reservation
}

// gated reports whether attempts must pass a gate.
func (i *Interceptor) gated() bool {
	return i.opts.AdaptiveThrottle != nil || i.opts.RateLimit != nil
}

// admit lets an attempt to t, made with ctx, go out once the adaptive
// throttle allows it and the rate limit gives it its turn. One kept home
// fails at once: the throttle's refusal is Unavailable and unwraps to
// rebound.ErrRejectedLocally, the rate limit's ResourceExhausted and
// rebound.ErrRateLimited, the caller's context ending its own. The
// throttle is asked first, so that an attempt it keeps home takes no turn
// of the rate limit.
func (i *Interceptor) admit(ctx context.Context, t *Target) (admission, error) {
	a := admission{gate: t.gate, limit: t.limit}
	at, ok := a.gate.Allow()
	if !ok {
		return admission{}, i.rejectedLocally()
	}
	var err error
	if a.r, err = a.limit.Wait(ctx); err != nil {
		// Kept home by the rate limit, the attempt never reached the
		// server: the throttle counts it neither way.
		a.gate.Withdraw(at)
		return admission{}, i.waitError(ctx, err)
	}
	return a, nil
}

// answered tells the gates how the attempt made with ctx ended: with err
// (nil or io.EOF for success), its answer carrying the pushback header
// values pushback.
func (i *Interceptor) answered(ctx context.Context, a *admission, err error, pushback []string) {
	var code serviceconfig.Code
	failed := err != nil && !errors.Is(err, io.EOF)
	if failed {
		code = i.major.Code(err)
	}
	if a.limit != nil {
		a.limit.Answer(ctx, a.r, failed, i.RateFeedback(err, pushback))
	}
	if a.gate != nil && (!failed || adaptive.AcceptedCode(uint32(code))) {
		a.gate.Accepted()
	}
}

// RateFeedback returns what an attempt's answer says about the server's
// limit: its error err (nil or io.EOF for success), and the values of its
// pushback header. The server's wait is the pushback delay, else the
// retry_delay of a RetryInfo in the error's details.
func (i *Interceptor) RateFeedback(err error, pushback []string) rebound.RateFeedback {
	var code serviceconfig.Code
	if err != nil && !errors.Is(err, io.EOF) {
		code = i.major.Code(err)
	}
	return a6.RateFeedback(uint32(code), pushback, func() time.Duration {
		d, _ := i.major.RetryDelay(err)
		return d
	})
}

// waitError turns the error of a wait for the rate limit into an
// attempt's error.
func (i *Interceptor) waitError(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, rebound.ErrRateLimited):
		return i.major.Error(serviceconfig.ResourceExhausted, fmt.Errorf("connectretry: %w", err))
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return i.major.Error(serviceconfig.DeadlineExceeded, err)
	}
	return i.major.Error(serviceconfig.Cancelled, err)
}

// awaitVerdict gives an attempt's context a place where its answer waits
// for the classifier's verdict before the rate limit hears of it (see
// ratelimit.Verdict), when the interceptor has both.
func (i *Interceptor) awaitVerdict(ctx context.Context) (context.Context, *ratelimit.Verdict) {
	return ratelimit.Await(ctx, i.opts.RateLimit != nil && i.opts.Classify != nil)
}
