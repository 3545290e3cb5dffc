package connectretry

import (
	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/connectretry/internal/engine"
)

// WithAdaptiveRateLimit paces the calls to each server name (see
// [WithServerName]; by default the peer's address) to the rate the server
// accepts (see [rebound.AdaptiveRateLimit]): every attempt, the first included,
// of every call waits for a send token within its context. When its turn
// would come after the context's deadline it fails at once, without
// reaching the server, with CodeResourceExhausted and an error that
// unwraps to [rebound.ErrRateLimited]; it is not retried, so the call ends
// with [rebound.ErrThrottled]. A wait the caller cancels gives its token
// back.
//
// ResourceExhausted, and any answer with a grpc-retry-pushback-ms
// trailer, are throttles; the pushback delay, or else the retry_delay of a
// google.rpc.RetryInfo in the error details, holds the rate until it has
// passed. Every other answer only feeds the measured rate. With
// [WithClassifier], the classifier's SlowDown mark has the last word on a
// call's failed attempts, streams included: the built-in verdict it is
// given marks what these rules count, a failure it marks counts as a
// throttle, and a throttle it unmarks only feeds the measured rate. The
// limit starts at the server's first throttle; until then only its slow
// start holds attempts back (at most four in flight until answers come
// back, then twice as many each round trip: a few round trips once,
// never more than a quarter-second; see [rebound.AdaptiveRateLimit]).
//
// Every client of the process with the same server name and c shares one
// limiter, so that they together keep to the server's limit. c's fields
// must be valid; the zero value means the AWS SDKs' constants.
func WithAdaptiveRateLimit(c rebound.AdaptiveRateLimitConfig) Option {
	return optionFunc(func(o *engine.Options) { o.SetRateLimit(c) })
}
