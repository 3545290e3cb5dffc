package grpcretry

import (
	"errors"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/a6"
	"github.com/rebound-go/rebound/internal/ratelimit"
	"github.com/rebound-go/rebound/internal/verdict"
)

// Failure is a failed attempt, as a classifier given to [WithClassifier]
// sees it. Its fields must not be modified.
type Failure struct {
	// Method is the call's full method name, "/package.Service/Method".
	Method string
	// Status is the attempt's status.
	Status *status.Status
	// Header holds the response headers, nil when none came (a
	// Trailers-Only response, or none at all); Trailer holds the
	// trailers.
	Header, Trailer metadata.MD
}

// WithClassifier lets f decide what a failed attempt of a call under a
// retry or hedging policy means for retrying it. f gets the failure and
// the built-in verdict (the policy's codes, pushback, RetryInfo, whether
// the call committed), and returns the verdict to use, within guardrails
// that are the same in connectretry and httpretry:
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
// The built-in verdict marks RESOURCE_EXHAUSTED, and any status with
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

// verdict classifies a failed attempt of method, made under a policy:
// info is what its code and pushback say; the server's RetryInfo and the
// client's classifier add to it. The classifier's word on throttling
// settles the attempt's answer to the rate limit, held in v (nil when the
// client has no rate limit, or the attempt did not wait for the verdict).
func (o *options) verdict(v *ratelimit.Verdict, method string, info rebound.RetryInfo, err error, header, trailer metadata.MD) rebound.RetryInfo {
	hinted(o.Hints, &info, err)
	if o.classify == nil {
		return info
	}
	st, _ := status.FromError(err)
	// The built-in verdict marks what the rate limit counts as a
	// throttle from the server (not its own refusal to send), so that the
	// classifier sees it and may unmark it.
	if _, _, pushback := a6.ParsePushback(trailer[a6.PushbackHeader]); !errors.Is(err, rebound.ErrRateLimited) {
		info.SlowDown = info.SlowDown || ratelimit.Feedback(uint32(st.Code()), pushback, 0).SlowDown
	}
	final := verdict.Reclassify(info, true, o.classify(Failure{Method: method, Status: st, Header: header, Trailer: trailer}, info))
	v.Settle(info, final)
	return final
}
