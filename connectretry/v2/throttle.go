package connectretry

import (
	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/connectretry/internal/engine"
)

// WithAdaptiveThrottle turns on client-side adaptive throttling (see
// [rebound.AdaptiveThrottle]) with c: every attempt, the first included, of
// every call asks the throttle of the server name (see [WithServerName];
// by default the peer's address) whether to go out. One it keeps home
// fails at once, without reaching the server, with CodeUnavailable and an
// error that unwraps to [rebound.ErrRejectedLocally]; it is not retried, so
// the call ends with [rebound.ErrThrottled]. Every code but Unavailable,
// ResourceExhausted and DeadlineExceeded counts as accepted. Every client
// of the process with the same server name and c shares one throttle. c's
// fields must be valid; the zero value means the SRE book's defaults.
func WithAdaptiveThrottle(c rebound.AdaptiveThrottleConfig) Option {
	return optionFunc(func(o *engine.Options) { o.SetAdaptiveThrottle(c) })
}
