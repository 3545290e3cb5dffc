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

// WithRateLimitQuota makes the adaptive rate limit (see
// [WithAdaptiveRateLimit], which it turns on with the zero config if it is
// not set) read the quota each response publishes, and pace the requests
// to its host to it from the first response, before any 429: no faster
// than the remaining quota over the time to its reset, shared by every
// Transport of the process that has the same host and settings; clients
// in other processes that read the same falling remainder move toward
// even shares of it without talking (see [rebound.AdaptiveRateLimit]). It
// reads, from the first of these a response carries: the IETF RateLimit
// and RateLimit-Policy fields (draft-ietf-httpapi-ratelimit-headers, the
// structured form of draft 08 on, `"default";r=50;t=30`, and the
// dictionary of drafts 05-07, `limit=100, remaining=50, reset=30`); the
// older drafts' RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset;
// X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset, the
// reset in delta-seconds or a Unix time (from 1000000000), either with a
// fraction. The IETF fields are parsed as Structured Field Values (RFC
// 9651) with github.com/dunglas/httpsfv.
//
// A quota is trusted only so far: one that is malformed or absurd (a
// remainder that is negative or not a number, a reset in the past or more
// than a day away, a limit of 0, a remainder above the limit, a limit that
// changes within a window) is ignored, the learned rate stays in charge,
// and the first such quota of each host is logged at warning level to the
// [WithLogger] logger, or slog.Default() without one. With nothing left,
// an attempt waits for the reset, but never longer than the Retry-After
// cap ([WithRetryDelayCap]) nor past its context's deadline (it then fails
// at once with [rebound.ErrRateLimited]). A host that publishes nothing
// leaves the adaptive rate limit as it is without this option.
func WithRateLimitQuota() Option {
	return optionFunc(func(c *config) { c.rateLimitQuota = true })
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
		return &ratelimit.Gate{
			Limiter: ratelimit.Limiter(r.URL.Host, *l.cfg.rateLimit), Clock: l.cfg.clock,
			Server: r.URL.Host, Logger: l.cfg.logger, MaxWait: l.cfg.retryDelayCap,
		}, nil
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
		f := l.feedback(resp)
		if l.cfg.rateLimitQuota {
			f.Quota = gate.Quota(resp.Header.Values)
		}
		gate.Answer(r.Context(), res, true, f)
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
