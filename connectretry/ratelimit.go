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

// WithRateLimitQuota makes the adaptive rate limit (see
// [WithAdaptiveRateLimit], which it turns on with the zero config if it is
// not set) read the quota each answer publishes in its response headers (a failed call's trailers too), and
// pace the calls to each server name to it from the first answer, before
// any throttle: no faster than the remaining quota over the time to its
// reset, shared by every client of the process with the same server name
// and settings; clients in other processes that read the same falling
// remainder move toward even shares of it without talking (see
// [rebound.AdaptiveRateLimit]). It reads the fields httpretry's
// WithRateLimitQuota reads, under the same names: from the first of these an
// answer carries, the IETF RateLimit and RateLimit-Policy fields (draft-ietf-httpapi-ratelimit-headers, the
// structured form of draft 08 on, `"default";r=50;t=30`, and the
// dictionary of drafts 05-07, `limit=100, remaining=50, reset=30`);
// the older drafts' RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset; X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset, the reset in delta-seconds or a
// Unix time (from 1000000000), either with a fraction. The IETF fields are
// parsed as Structured Field Values (RFC 9651) with
// github.com/dunglas/httpsfv.
//
// A quota is trusted only so far: one that is malformed or absurd (a
// remainder that is negative or not a number, a reset in the past or more
// than a day away, a limit of 0, a remainder above the limit, a limit that
// changes within a window) is ignored, the learned rate stays in charge,
// and the first such quota of each server name is logged at warning level
// to the [WithLogger] logger, or slog.Default() without one. With nothing
// left, an attempt waits for the reset, but never longer than the
// Retry-After cap ([WithRetryDelayCap]) nor past its context's deadline
// (it then fails at once with CodeResourceExhausted and [rebound.ErrRateLimited]). A
// server that publishes nothing leaves the adaptive rate limit as it is
// without this option.
func WithRateLimitQuota() Option {
	return optionFunc(func(o *engine.Options) { o.SetRateLimitQuota() })
}
