package connectretry

import (
	"errors"

	"connectrpc.com/connect"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/a6"
	"github.com/rebound-go/rebound/internal/ratelimit"
	"github.com/rebound-go/rebound/internal/verdict"
)

// Failure is a failed attempt, as a classifier given to [WithClassifier]
// sees it. Its fields must not be modified.
type Failure struct {
	// Method is the call's procedure, "/package.Service/Method"
	// (connect.Spec.Procedure), the name grpcretry's Failure.Method and
	// the statistics give it.
	Method string
	// Err is the attempt's error: its code, message and details, and in
	// its Meta the response's header and trailer metadata.
	Err *connect.Error
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
//   - f may mark a failure as the server's slow-down (SlowDown) with a harder Backoff of its
//     own, as Local (a client-side limit: no budget is spent or refilled
//     for it), or as a Class with its own attempt limit (ClassAttempts).
//
// The built-in verdict marks ResourceExhausted, and any answer with
// pushback, as slow-down (SlowDown); under [WithAdaptiveRateLimit] the
// mark f returns is what the rate limit counts.
//
// A per-attempt timeout is not given to f. f runs on the call's path, once
// per failed attempt (also for hedges racing each other), and must be
// safe for concurrent use.
func WithClassifier(f func(Failure, rebound.RetryInfo) rebound.RetryInfo) Option {
	return optionFunc(func(o *options) {
		if f == nil {
			o.Fail("WithClassifier: nil classifier")
			return
		}
		o.classify = f
	})
}

// verdict returns what the classifier makes of a failed attempt of
// procedure, whose error is err (ce when it is a connect error) and
// built-in verdict info. The classifier's word on throttling settles the
// attempt's answer to the rate limit, held in v (nil when the interceptor
// has no rate limit, or the attempt did not wait for the verdict).
func (o *options) verdict(v *ratelimit.Verdict, procedure string, ce *connect.Error, err error, info rebound.RetryInfo) rebound.RetryInfo {
	if o.classify == nil {
		return info
	}
	if ce == nil {
		ce = connect.NewError(connect.CodeUnknown, err)
	}
	// The built-in verdict marks what the rate limit counts as a
	// throttle from the server (not its own refusal to send), so that the
	// classifier sees it and may unmark it.
	if !errors.Is(err, rebound.ErrRateLimited) {
		_, _, pushback := a6.ParsePushback(ce.Meta()[pushbackKey])
		info.SlowDown = info.SlowDown || ratelimit.Feedback(uint32(ce.Code()), pushback, 0).SlowDown
	}
	final := verdict.Reclassify(info, true, o.classify(Failure{Method: procedure, Err: ce}, info))
	v.Settle(info, final)
	return final
}
