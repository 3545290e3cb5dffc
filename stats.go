package rebound

import "time"

// StatsBuckets are the lower bounds of A6's retry-attempt histogram: the
// k-th retry attempt of a call is counted in the last bucket whose bound is
// <= k, so the 1st retry lands in ">=1", the 7th in ">=5", the 42nd in
// ">=10".
var StatsBuckets = [8]int{1, 2, 3, 4, 5, 10, 100, 1000}

// StatsBucket returns the index in [StatsBuckets] of the k-th retry attempt
// (k >= 1; smaller k count as 1).
func StatsBucket(k int) int {
	for i := len(StatsBuckets) - 1; i > 0; i-- {
		if k >= StatsBuckets[i] {
			return i
		}
	}
	return 0
}

// AttemptStats are A6's per-method statistics of retry attempts, or of
// hedged attempts (the first attempt of a call counts as the original, each
// further one as a retry attempt).
type AttemptStats struct {
	// Attempts is the number of retry (or hedged) attempts made.
	Attempts uint64
	// Failed is how many of them failed.
	Failed uint64
	// Histogram counts each attempt once, in the bucket of its ordinal
	// within its call (see [StatsBuckets]).
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
}

// Stats are retry statistics by method name, as a snapshot. Front doors
// name methods as their protocol does ("/pkg.Service/Method" for gRPC and
// Connect, "GET example.com" for HTTP).
type Stats map[string]MethodStats
