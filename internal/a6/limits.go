package a6

import (
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/adaptive"
	"github.com/rebound-go/rebound/internal/ratelimit"
)

// SetAdaptiveThrottle is WithAdaptiveThrottle: c must be valid.
func (o *Options) SetAdaptiveThrottle(c rebound.AdaptiveThrottleConfig) {
	if err := c.Validate(); err != nil {
		o.Fail("WithAdaptiveThrottle: %v", err)
		return
	}
	o.AdaptiveThrottle = &c
}

// SetRateLimit is WithAdaptiveRateLimit: c must be valid.
func (o *Options) SetRateLimit(c rebound.AdaptiveRateLimitConfig) {
	if err := c.Validate(); err != nil {
		o.Fail("WithAdaptiveRateLimit: %v", err)
		return
	}
	o.RateLimit = &c
}

// Gates returns the adaptive throttle and the rate limit gates of server
// name, on the clock clk, nil for an option that is off: every client of
// the process with the same name and settings shares their throttle and
// limiter.
func (o *Options) Gates(name string, clk rebound.Clock) (*adaptive.Gate, *ratelimit.Gate) {
	var (
		g *adaptive.Gate
		l *ratelimit.Gate
	)
	if o.AdaptiveThrottle != nil {
		g = &adaptive.Gate{Throttle: adaptive.Throttle(name, *o.AdaptiveThrottle), Clock: clk, Random: o.Random}
	}
	if o.RateLimit != nil {
		l = &ratelimit.Gate{Limiter: ratelimit.Limiter(name, *o.RateLimit), Clock: clk}
	}
	return g, l
}

// RateFeedback returns what a gRPC or Connect answer with code says about
// the server's limit (see ratelimit.Feedback), pushback holding the values
// of its pushback trailer: the server's wait is the pushback delay (none
// for a pushback that says stop), else retryDelay's, the retry_delay of a
// google.rpc.RetryInfo in the answer's details.
func RateFeedback(code uint32, pushback []string, retryDelay func() time.Duration) rebound.RateFeedback {
	d, stop, present := ParsePushback(pushback)
	if stop {
		d = 0
	}
	if !present {
		d = retryDelay()
	}
	return ratelimit.Feedback(code, present, d)
}
