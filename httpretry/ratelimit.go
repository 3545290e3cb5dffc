package httpretry

import (
	"fmt"
	"net/http"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/bounded"
	"github.com/rebound-go/rebound/internal/ratelimit"
)

// WithAdaptiveRateLimit paces the requests to each host to the rate the
// host accepts (see [rebound.AdaptiveRateLimit]): every attempt, the first
// included, waits for a send token of its URL's host within its
// request's context. When its turn would come after the context's
// deadline it fails at once, without reaching the server, with an error
// that unwraps to [rebound.ErrRateLimited]; it is not retried, so
// RoundTrip fails with [rebound.ErrThrottled]. A wait the caller cancels
// gives its token back.
//
// A 429, and a 503 with a Retry-After, are throttles; the Retry-After
// (at most [WithRetryDelayCap]'s cap) holds the rate until it has
// passed. Every other answer only feeds the measured rate. With
// [WithClassifier], the classifier's SlowDown mark has the last word: a
// failure it marks counts as a throttle, and a throttle it unmarks only
// feeds the measured rate. The limit starts at the host's first
// throttle; until then only its slow start holds attempts back (at most
// four in flight until answers come back, then twice as many each round
// trip: a few round trips once, never more than a quarter-second; see
// [rebound.AdaptiveRateLimit]).
//
// Every Transport of the process with c shares one limiter per host, so
// that the clients of one process together keep to the host's limit; a
// Transport keeps the limiters of the 1024 hosts it used most recently. c's fields must be valid; the zero value means the AWS SDKs'
// constants.
func WithAdaptiveRateLimit(c rebound.AdaptiveRateLimitConfig) Option {
	return optionFunc(func(cfg *config) {
		if err := c.Validate(); err != nil {
			cfg.fail("WithAdaptiveRateLimit", "%v", err)
			return
		}
		cfg.rateLimit = &c
	})
}

// limitedBase is the base RoundTripper behind an adaptive rate limit per
// host.
type limitedBase struct {
	base  http.RoundTripper
	cfg   *config
	gates *bounded.Map[string, *ratelimit.Gate]
}

func newLimitedBase(base http.RoundTripper, cfg *config) *limitedBase {
	if f := cfg.classify; f != nil {
		// The classifier's word on throttling reaches the limit: see
		// sendJudged.
		cfg.classify = func(fl Failure, builtin rebound.RetryInfo) rebound.RetryInfo {
			v := f(fl, builtin)
			ratelimit.Of(fl.Request.Context()).Settle(builtin, v)
			return v
		}
	}
	return &limitedBase{base: base, cfg: cfg, gates: bounded.New[string, *ratelimit.Gate](bounded.DefaultMax)}
}

// sendJudged is sendWith under a rate limit and a classifier (see
// WithClassifier): the attempt's answer waits in its context for the
// classifier's verdict, so that a failure the classifier marks as
// throttling cuts the host's rate, and a throttle it unmarks does not;
// an answer the classifier does not see (a success, a Retry-After beyond
// the cap) is told as the rate limit's own rules judge it.
func (t *Transport) sendJudged(r *http.Request, idempotent bool, retryable *statusSet) (*http.Response, error) {
	ctx, v := ratelimit.Await(r.Context(), true)
	resp, err := t.sendWith(r.WithContext(ctx), idempotent, retryable)
	v.Release()
	return resp, err
}

// awaited reports whether r's context holds an attempt's answer for the
// classifier's verdict (see sendJudged).
func awaited(r *http.Request) bool { return ratelimit.Of(r.Context()) != nil }

func (l *limitedBase) RoundTrip(r *http.Request) (*http.Response, error) {
	gate, _ := l.gates.Get(r.URL.Host, func() (*ratelimit.Gate, error) {
		return &ratelimit.Gate{Limiter: ratelimit.Limiter(r.URL.Host, *l.cfg.rateLimit), Clock: l.cfg.clock}, nil
	})
	res, err := gate.Wait(r.Context())
	if err != nil {
		if r.Body != nil {
			_ = r.Body.Close()
		}
		return nil, fmt.Errorf("httpretry: %s %s: %w", r.Method, r.URL.Host, ratelimit.Kept(err))
	}
	resp, err := l.base.RoundTrip(r)
	if err == nil && resp != nil {
		gate.Answer(r.Context(), res, true, l.feedback(resp))
	} else {
		gate.Answer(r.Context(), res, true, rebound.RateFeedback{})
	}
	return resp, err
}

// feedback returns what resp says about the host's limit: a 429, or a 503
// with a Retry-After, is a throttle, and its Retry-After the server's
// wait.
func (l *limitedBase) feedback(resp *http.Response) rebound.RateFeedback {
	if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
		return rebound.RateFeedback{}
	}
	wait, ok := ParseRetryAfter(resp.Header.Get("Retry-After"), l.cfg.clock.Now())
	if !ok && resp.StatusCode == http.StatusServiceUnavailable {
		return rebound.RateFeedback{}
	}
	return rebound.RateFeedback{SlowDown: true, Wait: min(wait, l.cfg.retryDelayCap)}
}
