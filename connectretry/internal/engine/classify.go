package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/a6"
	"github.com/rebound-go/rebound/internal/perattempt"
	"github.com/rebound-go/rebound/internal/ratelimit"
	"github.com/rebound-go/rebound/internal/verdict"
	"github.com/rebound-go/rebound/serviceconfig"
)

// PushbackHeader and PreviousAttemptsHeader are A6's metadata keys in
// their canonical net/http form, as both majors' headers hold them.
const (
	PushbackHeader         = "Grpc-Retry-Pushback-Ms"
	PreviousAttemptsHeader = "Grpc-Previous-Rpc-Attempts"
)

// classify describes a failed attempt of procedure for the retry loop:
// retryable (or non-fatal) when its code is in codes, with the server's
// pushback (the values of the answer's pushback header) and RetryInfo,
// then as the interceptor's classifier says (see verdict), which is given
// meta, the answer's metadata. v holds the
// attempt's answer to the rate limit for the verdict, if any. committed
// says the application has seen the attempt's response.
func (i *Interceptor) classify(v *ratelimit.Verdict, err error, pushback []string, meta Metadata, codes serviceconfig.CodeSet, procedure string, committed bool) *a6.Failure {
	code := i.major.Code(err)
	info := a6.Info(codes.Has(code), pushback, committed)
	d, has := i.major.RetryDelay(err)
	info = i.opts.Hints.Apply(info, code, d, has)
	return &a6.Failure{Err: err, Info: i.verdict(v, procedure, err, code, pushback, meta, info)}
}

// verdict returns what the classifier makes of a failed attempt of
// procedure, whose error is err with code, and built-in verdict info. The
// classifier's word on throttling settles the attempt's answer to the rate
// limit, held in v (nil when the interceptor has no rate limit, or the
// attempt did not wait for the verdict).
func (i *Interceptor) verdict(v *ratelimit.Verdict, procedure string, err error, code serviceconfig.Code, pushback []string, meta Metadata, info rebound.RetryInfo) rebound.RetryInfo {
	if i.opts.Classify == nil {
		return info
	}
	// The built-in verdict marks what the rate limit counts as a
	// throttle from the server (not its own refusal to send), so that the
	// classifier sees it and may unmark it.
	if !errors.Is(err, rebound.ErrRateLimited) {
		_, _, pb := a6.ParsePushback(pushback)
		info.SlowDown = info.SlowDown || ratelimit.Feedback(uint32(code), pb, 0).SlowDown
	}
	final := verdict.Reclassify(info, true, i.opts.Classify(procedure, err, meta, info))
	v.Settle(info, final)
	return final
}

// timeoutError is the error of an attempt cut by its per-attempt timeout d:
// DeadlineExceeded, with a message naming the timeout; errors.Is finds
// rebound.ErrAttemptTimeout through it. It is retried whatever the codes.
func (i *Interceptor) timeoutError(d time.Duration) *a6.Failure {
	err := i.major.Error(serviceconfig.DeadlineExceeded, perattempt.NewError("connectretry", d))
	return &a6.Failure{Err: err, Info: perattempt.Info(false)}
}

// rejectedLocally is the error of an attempt the adaptive throttle kept
// home.
func (i *Interceptor) rejectedLocally() error {
	return i.major.Error(serviceconfig.Unavailable, fmt.Errorf("connectretry: %w", rebound.ErrRejectedLocally))
}
