package rebound

import "time"

// Override narrows the retry policy of one call: grpcretry takes it as a
// call option, connectretry and httpretry through the call's context. The
// zero value changes nothing.
//
// By default each field can only tighten what the client's configuration
// allows: the call gets the smaller number of attempts, the shorter
// per-attempt timeout, and only the codes both the configuration and the
// override list. A value that would loosen the policy (more attempts, a
// longer per-attempt timeout, codes the configuration does not retry, a
// policy on a method that has none) is ignored and logged at debug level, unless the client was built
// with its package's WithTrustedOverrides option: a per-call value may come
// from a caller the service does not trust (a request header passed on, a
// tenant's settings), and such a caller must not be able to multiply the
// load on a backend. The client's own attempt cap, its retry throttle or
// budget and its replay buffer limits apply in every case.
type Override struct {
	// MaxAttempts counts every attempt, the first included; 0 keeps the
	// configured number.
	MaxAttempts int
	// PerAttemptTimeout bounds each attempt until it commits, as the
	// configured per-attempt timeout does; 0 keeps the configured one.
	// Adding a timeout where none is configured tightens the policy.
	PerAttemptTimeout time.Duration
	// RetryableCodes, when not nil, are the codes the call may retry (or,
	// under a hedging policy, the non-fatal ones): gRPC status codes for
	// grpcretry and connectretry (the numeric values of codes.Code and
	// connect.Code, which agree), HTTP status codes for httpretry. An empty
	// non-nil slice retries no code; a per-attempt timeout is still
	// retried. nil keeps the configured codes.
	RetryableCodes []int
	// Disable makes the call once: no retries, no hedges.
	Disable bool
}
