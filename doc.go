// Package rebound is the protocol-agnostic retry engine shared by rebound's
// front doors for grpc-go (grpcretry), connect-go (connectretry) and net/http
// (httpretry).
//
// The engine follows the Smithy retry design: a [Strategy] hands out a
// [Token] before the first attempt and refreshes it after each failure; the
// token says how long to wait before the next attempt. [Do] and [DoValue] run
// that loop. Two strategies are provided:
//
//   - [NewStandard], the Smithy/AWS "standard" strategy: exponential backoff
//     with full jitter, a server retry-after hint as a minimum delay, and a
//     [TokenBucket] retry budget.
//   - [NewRetrier], the gRPC A6 retryPolicy: maxAttempts, exponential backoff
//     random(0, min(initial*multiplier^(n-1), max)), retryable
//     classification, exact server pushback that resets the exponent, and an
//     A6 [Throttle].
//
// [Hedge] runs hedged attempts per the A6 hedgingPolicy.
//
// Errors describe themselves to strategies through [RetryInfo] (carried by
// an error with a RetryInfo() RetryInfo method, see [Mark]) and [ErrorInfo].
// When retrying stops, the returned [*Error] unwraps both to the last
// attempt's error and to the reason (one of the Err… sentinels or the
// context's cause).
//
// Time and randomness are injected: every strategy takes [WithClock] and
// [WithRandom], so tests drive a fake clock instead of sleeping.
//
// # Resource bounds
//
// A client that runs for months and talks to ever new servers keeps
// bounded state, by one rule in every front door:
//
//   - The A6 throttle of a server name is shared by every client of the
//     process with that name, for as long as any of them holds it; then it
//     is freed.
//   - grpcretry keeps its state per ClientConn and drops it once the conn
//     is closed and collected.
//   - connectretry (per server name) and httpretry (per host) keep the
//     state of the 1024 peers used most recently; an evicted peer that
//     comes back starts afresh.
//   - Replay buffers are capped per call and per client
//     (grpcretry.WithBufferLimits; httpretry.WithMaxBufferedBody), service
//     configs by their size (serviceconfig), and server hints by their caps
//     (httpretry.WithRetryAfterCap).
package rebound
