package rebound

import "time"

// AttemptStats are A6's per-method statistics of retry attempts, or of
// hedged attempts (the first attempt of a call counts as the original, each
// further one as a retry attempt).
type AttemptStats struct {
	// Attempts is the number of retry (or hedged) attempts made.
	Attempts uint64
	// Failed is how many of them failed.
	Failed uint64
	// Histogram counts each attempt once, in the bucket of its ordinal
	// within its call. The buckets are A6's: >=1, >=2, >=3, >=4, >=5,
	// >=10, >=100 and >=1000, so the 1st retry of a call counts in
	// Histogram[0], its 7th in Histogram[4] (>=5) and its 42nd in
	// Histogram[5] (>=10).
	Histogram [8]uint64
}

// MethodStats are the retry statistics of one method: A6's "Retry and
// Hedging Statistics" and the counts behind rebound's other decisions.
type MethodStats struct {
	// Calls is the number of calls that ended.
	Calls uint64
	// Retries are the retry attempts of calls under a retry policy.
	Retries AttemptStats
	// Hedges are the hedged attempts of calls under a hedging policy.
	Hedges AttemptStats
	// TransparentRetries is the number of attempts the transport retried
	// on its own (gRPC only, when metrics are on).
	TransparentRetries uint64
	// Throttled is the number of calls in which the retry budget refused a
	// retry or hedge.
	Throttled uint64
	// PushbackStops is the number of calls in which server pushback said
	// not to retry.
	PushbackStops uint64
	// Pushbacks is the number of retries or hedges delayed by server
	// pushback.
	Pushbacks uint64
	// RetryDelay is the total time calls spent waiting with no attempt in
	// flight.
	RetryDelay time.Duration
	// AttemptTimeouts is the number of attempts cut by the per-attempt
	// timeout (WithPerAttemptTimeout, or perAttemptRecvTimeout in the
	// service config) before their response started.
	AttemptTimeouts uint64
}

// Stats are retry statistics by method name, as a snapshot. The protocol
// packages name methods as their protocol does ("/pkg.Service/Method" for gRPC and
// Connect, "GET example.com" for HTTP).
type Stats map[string]MethodStats
