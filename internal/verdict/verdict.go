// Package verdict holds the guardrails of a user's classifier, the same in
// grpcretry, connectretry and httpretry (their WithClassifier): a
// classifier says what a failure means for retrying it, but the server's
// word and a commit are facts it cannot change, and it may start retries
// only where the package allows them.
package verdict

import "github.com/rebound-go/rebound"

// Reclassify returns the verdict to use on a failed attempt when a user's
// classifier has given verdict for it and the built-in classification of
// the package was builtin. grpcretry, connectretry and httpretry call it
// for their WithClassifier, so that these guardrails hold the same way in
// each:
//
//   - The classifier may always make a failure non-retryable.
//   - It may make one retryable (raise its Safety) only when promotable:
//     when a retry or hedging policy governs the call (gRPC, Connect) or
//     the request is idempotent (HTTP). Otherwise builtin's Safety stays.
//   - It can never undo a commit (Committed), nor what the server said
//     about retrying: a pushback delay or "stop" (HasRetryAfter,
//     RetryAfter, ServerStop), or a minimum wait (MinDelay, which it may
//     only lengthen), and a Stop of builtin's stays.
//   - It may mark a failure as slow-down (SlowDown) with a Backoff of
//     its own, as local (Local), or as a Class with its own attempt
//     limit; an invalid Backoff is dropped.
func Reclassify(builtin rebound.RetryInfo, promotable bool, verdict rebound.RetryInfo) rebound.RetryInfo {
	out := verdict
	if out.Safety > builtin.Safety && !promotable {
		out.Safety = builtin.Safety
	}
	out.Committed = builtin.Committed || verdict.Committed
	out.ServerStop = builtin.ServerStop || verdict.ServerStop
	if builtin.HasRetryAfter {
		out.HasRetryAfter, out.RetryAfter = true, builtin.RetryAfter
	}
	out.MinDelay = max(builtin.MinDelay, verdict.MinDelay)
	if builtin.Stop != nil {
		out.Stop = builtin.Stop
	}
	if out.Backoff != (rebound.Backoff{}) && out.Backoff.Validate() != nil {
		out.Backoff = rebound.Backoff{}
	}
	if out.ClassAttempts < 0 {
		out.ClassAttempts = 0
	}
	return out
}
