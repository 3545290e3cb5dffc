package connectretry

import (
	"errors"

	"connectrpc.com/connect/v2"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/connectretry/internal/engine"
)

// Failure is a failed attempt, as a classifier given to [WithClassifier]
// sees it. Its fields must not be modified.
type Failure struct {
	// Method is the call's procedure, "/package.Service/Method"
	// (connect.Spec.Procedure), the name grpcretry's Failure.Method and
	// the statistics give it.
	Method string
	// Err is the attempt's error: its code, message and details.
	Err *connect.Error
	// Header and Trailer are the attempt's response header and trailer
	// metadata, as its connect.CallInfo holds them (connect v2 keeps them
	// there, not in the error); empty when none arrived.
	Header, Trailer *connect.Header
}

// WithClassifier lets f decide what a failed attempt of a call under a
// retry or hedging policy means for retrying it. f gets the failure and
// the built-in verdict (the policy's codes, pushback, RetryInfo), and
// returns the verdict to use, within guardrails that are the same in
// grpcretry and httpretry:
//
//   - f may make any failure non-retryable (Safety [rebound.SafetyNo]),
//     and make one retryable ([rebound.SafetyYes]) whatever the policy's
//     codes: the call has a policy;
//   - f can never undo a commit, nor the server's pushback, "stop" or
//     RetryInfo;
//   - f may mark a failure as the server's slow-down (SlowDown) with a
//     harder Backoff of its own, as Local (a client-side limit: no budget
//     is spent or refilled for it), or as a Class with its own attempt
//     limit (ClassAttempts).
//
// The built-in verdict marks ResourceExhausted, and any answer with
// pushback, as slow-down (SlowDown); under [WithAdaptiveRateLimit] the
// mark f returns is what the rate limit counts.
//
// A per-attempt timeout is not given to f. f runs on the call's path, once
// per failed attempt (also for hedges racing each other), and must be
// safe for concurrent use.
func WithClassifier(f func(Failure, rebound.RetryInfo) rebound.RetryInfo) Option {
	return optionFunc(func(o *engine.Options) {
		if f == nil {
			o.Fail("WithClassifier: nil classifier")
			return
		}
		o.Classify = func(procedure string, err error, meta engine.Metadata, info rebound.RetryInfo) rebound.RetryInfo {
			ce, ok := errors.AsType[*connect.Error](err)
			if !ok || ce == nil {
				ce = connect.NewError(connect.Code(major{}.Code(err)), err.Error()).WithCause(err)
			}
			fl := Failure{Method: procedure, Err: ce, Header: new(connect.Header), Trailer: new(connect.Header)}
			if ci, ok := meta.(*connect.CallInfo); ok && ci != nil {
				fl.Header, fl.Trailer = ci.ResponseHeader(), ci.ResponseTrailer()
			}
			return f(fl, info)
		}
	})
}
