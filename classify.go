package rebound

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
//   - It may mark a failure as throttling (Throttle) with a Backoff of
//     its own, as local (Local), or as a Class with its own attempt
//     limit; an invalid Backoff is dropped.
func Reclassify(builtin RetryInfo, promotable bool, verdict RetryInfo) RetryInfo {
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
	if out.Backoff != (Backoff{}) && out.Backoff.Validate() != nil {
		out.Backoff = Backoff{}
	}
	if out.ClassAttempts < 0 {
		out.ClassAttempts = 0
	}
	return out
}

// classCount is how many attempts of a call have failed with a Class.
type classCount struct {
	class string
	n     int
}

// classLimited counts a failure with info's Class against the counts so
// far (nil for none), and reports whether the class's attempt limit is
// reached, with the counts to carry on. counts is not modified: tokens
// share it.
func classLimited(counts *[]classCount, info RetryInfo) (*[]classCount, bool) {
	if info.Class == "" || info.ClassAttempts <= 0 {
		return counts, false
	}
	var old []classCount
	if counts != nil {
		old = *counts
	}
	out := make([]classCount, len(old), len(old)+1)
	copy(out, old)
	done := false
	found := false
	for i := range out {
		if out[i].class == info.Class {
			out[i].n++
			done, found = out[i].n >= info.ClassAttempts, true
		}
	}
	if !found {
		out = append(out, classCount{info.Class, 1})
		done = info.ClassAttempts <= 1
	}
	return &out, done
}

// backoffFor returns the backoff of a retry after info's failure: its own
// when it has one, else b.
func backoffFor(b Backoff, info RetryInfo) Backoff {
	if info.Backoff.Initial > 0 {
		return info.Backoff
	}
	return b
}
