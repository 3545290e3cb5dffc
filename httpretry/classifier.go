package httpretry

import (
	"errors"
	"net/http"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/verdict"
)

// Failure is a failed attempt, as a classifier given to [WithClassifier]
// sees it. Its fields must not be modified, nor the bodies read.
type Failure struct {
	// Request is the attempt's request.
	Request *http.Request
	// Response is the response the Transport does not count as a success
	// (a retryable status, or one of 500 or above), its header included;
	// nil when the attempt got no response.
	Response *http.Response
	// Err is the error of an attempt that got no response; nil with one.
	Err error
}

// WithClassifier lets f decide what a failed attempt means for retrying
// it. f gets the failure and the built-in verdict (the retryable status
// codes, whether the request is idempotent, the connection error), and
// returns the verdict to use, within guardrails that are the same in
// grpcretry and connectretry:
//
//   - f may make any failure non-retryable (Safety [rebound.SafetyNo]);
//     it may make one retryable only when the request is idempotent
//     ([WithIdempotent], [WithIdempotencyKey]): a POST that may have
//     reached the server stays as it is;
//   - f cannot undo a Retry-After (or rate-limit reset) hint, nor one
//     beyond the cap;
//   - f may mark a failure as the server's slow-down (SlowDown) with a harder Backoff of its
//     own, as Local (a client-side limit: no budget is spent or refilled
//     for it), or as a Class with its own attempt limit (ClassAttempts).
//
// The built-in verdict marks a 429, and a 503 with a Retry-After, as
// throttling (Throttle); under [WithAdaptiveRateLimit] the mark f returns
// is what the rate limit counts.
//
// A failure is a response of a retryable status or of 500 or above, or an
// error without a response; other responses are successes, and f does not
// see them. f runs on the request's path, once per failed attempt, and
// must be safe for concurrent use.
func WithClassifier(f func(Failure, rebound.RetryInfo) rebound.RetryInfo) Option {
	return optionFunc(func(c *config) {
		if f == nil {
			c.fail("WithClassifier", "nil classifier")
			return
		}
		c.classify = f
	})
}

// judged returns the error of a failed attempt as the classifier sees it:
// err is the built-in one, a *statusError with resp, or a marked
// transport error without.
func (t *Transport) judged(r *http.Request, idempotent bool, err error) error {
	f := t.cfg.classify
	if f == nil {
		return err
	}
	builtin := rebound.Classify(err)
	var se *statusError
	if errors.As(err, &se) {
		if se.overCap > 0 {
			return err // the server asked for more than the caller waits
		}
		se.info = verdict.Reclassify(builtin, idempotent, f(Failure{Request: r, Response: se.resp}, builtin))
		return se
	}
	cause := err
	if u := errors.Unwrap(err); u != nil {
		cause = u // the error Mark wrapped
	}
	return rebound.Mark(cause, verdict.Reclassify(builtin, idempotent, f(Failure{Request: r, Err: cause}, builtin)))
}
